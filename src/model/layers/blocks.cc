#include "model/layers/blocks.h"

namespace kestrel {

void attention_block(Ops& ops, Workspace& ws, const AttentionWeights& w, const AttentionConfig& cfg, float eps,
                     const KvLayerView& cache, int window, const StepPlan& plan, const Tensor& x, const Tensor& y,
                     const Tensor& select, StepKv* step, bool write_kv) {
  PhaseScope phase(ops, Phase::kAttention);
  const int64_t T = x.rows;
  const int hd = cfg.head_dim;
  Tensor q = ws.take(T, int64_t(cfg.n_heads) * hd);
  Tensor gate = w.gate.empty() ? Tensor{} : ws.take(T, q.cols);
  Tensor k, v;
  // The projections of x in one call: q, the output gate, k and v (K = V: the same projection,
  // before k's norm and RoPE; KV-shared layers have none and take the source layer's).
  MatmulTarget proj[4];
  int n_proj = 0;
  proj[n_proj++] = {q, w.q};
  if (!gate.empty()) proj[n_proj++] = {gate, w.gate};
  if (!w.k.empty()) {
    k = ws.take(T, int64_t(cfg.n_kv_heads) * hd);
    v = ws.take(T, int64_t(cfg.n_kv_heads) * hd);
    proj[n_proj++] = {k, w.k};
    proj[n_proj++] = {v, w.v.empty() ? w.k : w.v};
  }
  ops.matmul_multi(x, std::span<const MatmulTarget>(proj, size_t(n_proj)));
  Tensor o = ws.take(T, q.cols);
  const AttentionParams params{.n_heads = cfg.n_heads, .n_kv_heads = cfg.n_kv_heads, .head_dim = hd,
                               .scale = cfg.scale, .window = window, .select = select, .write_kv = write_kv};
  if (w.k.empty()) {  // KV-shared: the source layer's k/v of this step (past positions: its cache)
    KCHECK(step != nullptr && !step->k.empty());
    ops.qk_norm_rope(q, w.q_norm, Tensor{}, Tensor{}, hd, eps, cfg.rope, plan);
    AttentionParams shared = params;
    shared.write_kv = false;
    ops.attention(o, q, step->k, step->v, cache, shared, plan);
    if (!gate.empty()) ops.mul_sigmoid(o, gate);
  } else {
    if (cfg.v_norm) ops.head_rms_norm(v, Tensor{}, hd, eps);
    // head norms and RoPE of q, k, attention, the output gate
    ops.norm_rope_attention(o, q, w.q_norm, k, w.k_norm, v, gate, eps, cfg.rope, cache, params, plan);
    if (step) *step = {k, v};
  }
  ops.matmul(y, o, w.o);
}

void deltanet_block(Ops& ops, Workspace& ws, const DeltaNetWeights& w, const DeltaNetConfig& cfg, float eps,
                    const StateLayerView& state, const StepPlan& plan, const Tensor& x, const Tensor& y) {
  PhaseScope phase(ops, Phase::kDeltaNet);
  const int64_t T = x.rows;
  const int64_t v_width = int64_t(cfg.n_v_heads) * cfg.v_head_dim;
  Tensor qkv = ws.take(T, cfg.conv_dim());
  Tensor z = ws.take(T, v_width);
  Tensor b = ws.take(T, cfg.n_v_heads);
  Tensor a = ws.take(T, cfg.n_v_heads);
  const MatmulTarget proj[] = {{qkv, w.qkv}, {z, w.z}, {b, w.b}, {a, w.a}};
  ops.matmul_multi(x, proj);
  Tensor o = ws.take(T, v_width);
  if (cfg.gate_act == Activation::kSilu) {  // conv, recurrence and rmsnorm(o) * w * silu(z)
    ops.deltanet_recurrence(o, qkv, z, a, b, w.conv, w.a_neg, w.dt_bias, w.norm, eps, state, cfg, plan);
  } else {  // rmsnorm(o) * w * act(z)
    ops.conv1d_silu(qkv, w.conv, state, cfg.conv_kernel, plan);
    ops.gated_delta_rule(o, qkv, a, b, w.a_neg, w.dt_bias, state, cfg, plan);
    ops.head_rms_norm(o, w.norm, cfg.v_head_dim, eps);
    ops.activation(z, cfg.gate_act);
    ops.mul(o, o, z);
  }
  ops.matmul(y, o, w.out);
}

void mlp_block(Ops& ops, Workspace& ws, const MlpWeights& w, const Tensor& x, const Tensor& y) {
  PhaseScope phase(ops, Phase::kFfn);
  const int64_t T = x.rows, F = w.gate.rows;
  Tensor g = ws.take(T, F);
  Tensor u = ws.take(T, F);
  ops.gated_mlp(y, x, w.gate, w.up, w.down, w.act, g, u);
}

void moe_block(Ops& ops, Workspace& ws, const MoeWeights& w, const MoeConfig& cfg, const Tensor& x, const Tensor& y) {
  PhaseScope phase(ops, Phase::kFfn);
  const int64_t T = x.rows;
  const bool shared = !w.shared.gate.empty();
  // Every projection of x in one call (one launch for a CUDA decode step): the router, and the
  // shared expert's gate, up and output gate. Each is exactly its own matmul.
  Tensor logits = ws.take(T, cfg.n_experts);
  Tensor g, u, sg;
  MatmulTarget proj[4];
  int n_proj = 0;
  proj[n_proj++] = {logits, w.router};
  if (shared) {
    g = ws.take(T, w.shared.gate.rows);
    u = ws.take(T, w.shared.up.rows);
    proj[n_proj++] = {g, w.shared.gate};
    proj[n_proj++] = {u, w.shared.up};
    if (!w.shared_gate.empty()) {
      sg = ws.take(T, 1);
      proj[n_proj++] = {sg, w.shared_gate};
    }
  }
  ops.matmul_multi(x, std::span<const MatmulTarget>(proj, size_t(n_proj)));
  Tensor ids = ws.take(DType::kI32, T, cfg.top_k);
  Tensor weights = ws.take(T, cfg.top_k);
  if (!shared) {
    ops.moe_route(ids, weights, logits, cfg.top_k, cfg.norm_topk_prob);
    ops.moe_experts(y, x, ids, weights, w.experts);
    return;
  }
  // The shared expert's down(act(g) * u) and the route (neither needs the other), then y = the
  // routed sum + s, times sigmoid(sg) when the layer gates it.
  Tensor s = ws.take(T, x.cols);
  ops.matmul_gated_and_route(s, g, u, w.shared.down, w.shared.act, ids, weights, logits, cfg.top_k,
                             cfg.norm_topk_prob);
  ops.moe_experts_shared(y, x, ids, weights, w.experts, s, sg);
}

}  // namespace kestrel
