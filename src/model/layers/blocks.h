// The shared blocks of every architecture: each is the weights of one sub-layer and the short
// list of ops that runs it. An architecture's forward pass is a sequence of these.
#pragma once

#include "cache/model_cache.h"
#include "model/config.h"
#include "model/workspace.h"
#include "ops/ops.h"

namespace kestrel {

// Softmax attention. Gated attention (Qwen3-Next / 3.5) has `gate`; q/k norms are optional.
// K = V (cfg.k_eq_v): v is empty and V comes from the k projection. A KV-shared layer (Gemma 4)
// has neither k nor v: it attends over the cache its source layer wrote.
struct AttentionWeights {
  Tensor q;       // [n_heads * head_dim, H]
  Tensor gate;    // [n_heads * head_dim, H] or empty
  Tensor k, v;    // [n_kv_heads * head_dim, H]; v empty when K = V; both empty when KV-shared
  Tensor o;       // [H, n_heads * head_dim]
  Tensor q_norm;  // F32 [1, head_dim] or empty
  Tensor k_norm;  // F32 [1, head_dim] or empty
};

// Gated DeltaNet in the canonical layout (Qwen3.5's; Qwen3-Next's fused projections are split
// into it at load).
struct DeltaNetWeights {
  Tensor qkv;      // [conv_dim, H]: q (n_k * dk) | k (n_k * dk) | v (n_v * dv)
  Tensor z;        // [n_v * dv, H]
  Tensor b, a;     // [n_v, H]
  Tensor conv;     // F32 [conv_dim, kernel]
  Tensor a_neg;    // F32 [1, n_v] = -exp(A_log)
  Tensor dt_bias;  // F32 [1, n_v]
  Tensor norm;     // F32 [1, dv]
  Tensor out;      // [H, n_v * dv]
};

// Gated MLP: down(act(gate x) * up x), act silu (SwiGLU) or gelu-tanh (GeGLU).
struct MlpWeights {
  Tensor gate, up;  // [F, H]
  Tensor down;      // [H, F]
  Activation act = Activation::kSilu;
};

struct MoeWeights {
  Tensor router;          // [E, H]
  ExpertWeights experts;  // E x (gate, up, down)
  MlpWeights shared;      // shared expert; empty tensors when the model has none
  Tensor shared_gate;     // [1, H] or empty
};

// y [T, H] = attention(x [T, H]) for one layer.
// This step's k and v of an attention layer (normed and rotated), kept for the KV-shared layers
// that read them (workspace memory, valid for the step).
struct StepKv {
  Tensor k, v;  // [T, n_kv_heads * head_dim]
};

// y [T, H] = attention(x [T, H]) for one layer. `select` (I32 [T, S] or empty): the positions each
// row attends (sparse attention, see ops.h). `step`: where a layer with k/v weights leaves its k/v,
// and where a KV-shared layer (no k/v weights) takes its source layer's. `write_kv` false leaves
// the cache write to a later ops.kv_write (after the last layer that reads the source's cache).
void attention_block(Ops& ops, Workspace& ws, const AttentionWeights& w, const AttentionConfig& cfg, float eps,
                     const KvLayerView& cache, int window, const StepPlan& plan, const Tensor& x, const Tensor& y,
                     const Tensor& select = Tensor{}, StepKv* step = nullptr, bool write_kv = true);
void deltanet_block(Ops& ops, Workspace& ws, const DeltaNetWeights& w, const DeltaNetConfig& cfg, float eps,
                    const StateLayerView& state, const StepPlan& plan, const Tensor& x, const Tensor& y);
void mlp_block(Ops& ops, Workspace& ws, const MlpWeights& w, const Tensor& x, const Tensor& y);
void moe_block(Ops& ops, Workspace& ws, const MoeWeights& w, const MoeConfig& cfg, const Tensor& x, const Tensor& y);

}  // namespace kestrel
