// Ops: the backend-neutral operations a forward pass may call.
//
// The architectures (src/model/arch/) express their forward passes in these ops only; each
// backend (src/backend/cpu, src/backend/cuda) implements all of them, with one file per op
// named like the op. Shapes are in the comments: T = rows of the step (flattened new tokens of
// every sequence), H = hidden size. Unless noted, activations are F32 and weights are BF16, F16
// or F32 matrices [out, in], or block-format matrices (Q8_0 ... MXFP4) where
// supports_weight_dtype admits them. An op may write its output over an input only where it says so.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/config.h"
#include "ops/step_plan.h"
#include "core/error.h"
#include "ops/tensor.h"

namespace kestrel {

// One attention layer's slice of the paged KV cache.
struct KvLayerView {
  Tensor k;        // [n_blocks * block_size, n_kv_heads * head_dim]
  Tensor v;        // same; may alias k's storage layout but not its memory
  Tensor index_k;  // [n_blocks * block_size, index_head_dim] raw QSA indexer keys, or empty
  // > 0: k/v are not paged but a ring per sequence: position p of the sequence in state slot s
  // is row s * ring_rows + p % ring_rows (sliding-window layers keep only the window's past).
  int ring_rows = 0;
};

// One linear-attention layer's recurrent state, one row per slot.
struct StateLayerView {
  Tensor conv;  // [n_slots, conv_dim * (conv_kernel - 1)]: last inputs, oldest first, per channel
  Tensor ssm;   // [n_slots, n_v_heads * k_head_dim * v_head_dim]: S[h][dk][dv]
  Tensor aux;   // [n_slots, n] or empty: a layer's extra conv state (Qwen4-Exp PLE's dilated conv)
};

struct AttentionParams {
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  float scale = 1.0f;
  int window = 0;  // > 0: attend to the last `window` positions only (sliding window)
  // I32 [T, S] or empty: the positions each row attends (sparse attention, e.g. QSA), -1 = unused
  // slot; order free. Each listed position must be <= the row's position.
  Tensor select;
  bool write_kv = true;  // false: leave the step's k/v out of the cache (kv_write stores them later)
};

// One QSA (Qwen4-Exp sparse attention) indexer: which cached positions each query row attends.
struct QsaParams {
  int n_heads = 0;     // indexer query heads
  int head_dim = 0;    // indexer head size (one key head)
  int budget = 0;      // tokens taken from the best complete blocks (a multiple of ratio)
  int ratio = 0;       // keys averaged into one block
  float eps = 1e-6f;   // of the pooled keys' RMSNorm
  RopeConfig rope;     // applied to the pooled keys at each block's first position
};

// The routed experts of one MoE layer. Expert e's matrices: gate [F, H], up [F, H], down [H, F]
// (views; a fused gate_up checkpoint tensor is split into row ranges at load).
struct ExpertWeights {
  std::vector<Tensor> gate, up, down;
  Activation act = Activation::kSilu;
  Tensor expert_scale;  // F32 [1, E] or empty: routing weight of expert e multiplied by expert_scale[e]
};

// RoPE's inverse frequency of rotating pair i over freq_dim dims, as transformers forms it: the
// exponent 2i / freq_dim, theta to that power and its reciprocal, each in fp32. (The once-rounded
// double value differs by an ulp for some pairs, which long fixture prompts amplify to ~1e-4 of
// the logits' RMS.) Every backend's rope uses this table.
inline float rope_inv_freq(double theta, int i, int freq_dim) {
  const float exponent = float(2 * i) / float(freq_dim);
  return 1.0f / std::pow(float(theta), exponent);
}

// One output of Ops::matmul_multi: out[T, N] = x . w^T.
struct MatmulTarget {
  Tensor out;
  Tensor w;
};

// The index of the largest of x[0, n): the first on ties, NaN never chosen over a number (0 when
// there is nothing else). Ops::argmax computes this per row; the sampler's greedy pick is it too.
template <typename T>
inline int32_t first_argmax(const T* x, int64_t n) {
  int32_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (x[i] > x[best] || (std::isnan(x[best]) && !std::isnan(x[i]))) best = int32_t(i);
  }
  return best;
}

// The part of the forward pass an op belongs to, for profiles. The model code marks it with a
// PhaseScope; ops outside any mark count as kOther.
enum class Phase : uint8_t { kEmbed, kAttention, kDeltaNet, kFfn, kHead, kOther };
inline constexpr int kNumPhases = 6;
const char* phase_name(Phase p);

// Points on a backend's own clock, for timing its ops: the CPU's steady clock (its ops run
// synchronously), device events on the CUDA stream.
class OpTimer {
 public:
  virtual ~OpTimer() = default;
  virtual int mark() = 0;  // records a point after everything queued so far; returns its index
  // Waits for every mark, returns each one's time in seconds after the first, and forgets them.
  virtual std::vector<double> take() = 0;
};

// Ops that only some backends implement have a default that refuses by name, so a model that
// needs one fails clearly ("the cuda backend does not implement op 'qsa_select'") rather than
// computing something else.
class Ops {
 public:
  virtual ~Ops() = default;
  virtual Device device() const = 0;
  virtual const char* name() const = 0;
  // A timer on this backend's clock (default: the host's steady clock).
  virtual std::unique_ptr<OpTimer> make_timer();
  // Non-empty when the backend can compute no more (a sticky device error): what went wrong.
  virtual std::string device_fault() const { return {}; }
  // What the backend runs on, as the hardware names itself ("NVIDIA H200", the CPU's model name):
  // benchmarks record it with their figures.
  virtual std::string device_name() const = 0;
  // The device's free and total memory; false for backends without device memory (the CPU).
  virtual bool device_memory(uint64_t& free_bytes, uint64_t& total_bytes) const { return false; }
  // The dtype of activations, caches and recurrent state: F32, or F64 for the CPU backend's
  // float64 oracle mode (CpuOps(DType::kF64), `--precision f64`). Weights keep their own dtypes.
  virtual DType activation_dtype() const { return DType::kF32; }
  // The dtype of the KV cache's key and value rows (ModelCache): the activation dtype, or BF16
  // after set_kv_cache_bf16(true) (`--kv-cache bf16`: half the cache's memory and half the bytes
  // a decode step's attention reads). With a BF16 cache every key and value a row attends is
  // rounded to BF16 — the step's own as well as the cached — so results do not depend on where
  // a prefill's chunks fall. Recurrent state, QSA index keys and activations keep their dtype.
  virtual DType kv_cache_dtype() const { return kv_bf16_ ? DType::kBF16 : activation_dtype(); }
  virtual void set_kv_cache_bf16(bool on) { kv_bf16_ = on; }
  // Whether weight matrices of this dtype may be handed to the ops that take weights (matmul,
  // matmul_multi, moe_experts, embed, embed_rows). Plain floats always; a block format (DType::kQ4_K ...)
  // only where the backend has kernels for it — otherwise the loader widens it at load.
  virtual bool supports_weight_dtype(DType dtype) const {
    return dtype == DType::kBF16 || dtype == DType::kF16 || dtype == DType::kF32;
  }
  // The phase the next ops belong to (see PhaseScope); only profiles read it.
  void set_phase(Phase p) { phase_ = p; }
  Phase phase() const { return phase_; }

  // ---- memory ----
  virtual Buffer alloc(DType dtype, int64_t rows, int64_t cols) = 0;  // zero-filled
  virtual Buffer upload(const Tensor& host) = 0;                        // copy of a host tensor
  // A weight matrix that only matmul and matmul_multi will read (never gathered as rows, never
  // sliced but at multiples of 32 rows): the backend may keep it in a layout of its own, with a
  // dtype of its own (CUDA: a Q4_K matrix as DType::kQ4_K_T32, Q8_0 as kQ8_0_T32, Q6_K as
  // kQ6_K_T32). By default, upload.
  virtual Buffer upload_matrix(const Tensor& host) { return upload(host); }
  virtual void to_host(const Tensor& src, void* dst) = 0;               // blocking copy
  // Blocking copy of an F32 or F64 tensor as floats (F64 rounded once): logits and captured
  // hidden states, whatever the activation dtype.
  void to_host_f32(const Tensor& src, float* dst);
  virtual void zero(const Tensor& t) = 0;
  virtual void zero_rows(const Tensor& t, int64_t row) = 0;             // t[row, :] = 0
  // dst[dst_row + i, :] = src[src_row + i, :] for i < n (same cols and dtype; may be one tensor).
  virtual void copy_rows(const Tensor& dst, int64_t dst_row, const Tensor& src, int64_t src_row, int64_t n) = 0;

  // ---- step ----
  // Called once before the layers of a step run: the backend takes what it needs of the plan.
  virtual void begin_step(const StepPlan& plan) = 0;

  // ---- elementwise and normalization ----
  // out[T, H] = table[tokens[t], :] (table BF16/F16/F32 [V, H]), times `scale`.
  virtual void embed(const Tensor& out, const Tensor& table, const StepPlan& plan, double scale) = 0;
  // out = x / rms(x) * w per row; w: F32 [1, cols] or empty (no weight). out may be x.
  virtual void rms_norm(const Tensor& out, const Tensor& x, const Tensor& w, float eps) = 0;
  // The embedding fused with the first layer's norm: embed(x, table, plan, scale), then
  // rms_norm(out, x, w, eps); out distinct from x. Bit-identical to the two ops, which is what this
  // default does; CUDA runs it as one launch (a step's first two links in one).
  virtual void embed_rms_norm(const Tensor& x, const Tensor& out, const Tensor& table, const StepPlan& plan,
                              double scale, const Tensor& w, float eps) {
    embed(x, table, plan, scale);
    rms_norm(out, x, w, eps);
  }
  // RMSNorm of each head_dim group of x [T, n * head_dim] in place; w F32 [1, head_dim] or empty.
  virtual void head_rms_norm(const Tensor& x, const Tensor& w, int head_dim, float eps) = 0;
  // out = a + b (out may be a or b).
  virtual void add(const Tensor& out, const Tensor& a, const Tensor& b) = 0;
  // The residual add fused with the next norm: residual += x, then out = rms_norm(residual, w, eps);
  // residual, x, out [T, H], w as in rms_norm. out may be x, never residual. Bit-identical to
  // add(residual, residual, x) followed by rms_norm(out, residual, w, eps), which is what this
  // default does; the CPU and CUDA backends run it as one pass over the rows.
  virtual void add_rms_norm(const Tensor& residual, const Tensor& x, const Tensor& w, const Tensor& out, float eps) {
    add(residual, residual, x);
    rms_norm(out, residual, w, eps);
  }
  // x *= sigmoid(gate): gate the same shape as x, or [T, 1] (one gate per row).
  virtual void mul_sigmoid(const Tensor& x, const Tensor& gate) = 0;
  // out += x * sigmoid(gate), gate as in mul_sigmoid; x may be overwritten. Bit-identical to
  // mul_sigmoid(x, gate) followed by add(out, out, x), which is what this default does (a gated
  // shared expert's output joining the routed experts'); CUDA runs it as one pass.
  virtual void add_mul_sigmoid(const Tensor& out, const Tensor& x, const Tensor& gate) {
    mul_sigmoid(x, gate);
    add(out, out, x);
  }
  // out[T, F] = silu(gate) * up.
  virtual void silu_mul(const Tensor& out, const Tensor& gate, const Tensor& up) = 0;
  // out[T, F] = gelu_tanh(gate) * up (see Activation). out may be gate or up.
  virtual void gelu_tanh_mul(const Tensor& out, const Tensor& gate, const Tensor& up) { refuse("gelu_tanh_mul"); }
  // x *= s (every element).
  virtual void scale(const Tensor& x, double s) { refuse("scale"); }
  // out[T, n] = x[:, begin : begin + n] (a column block of x [T, C]).
  virtual void slice_cols(const Tensor& out, const Tensor& x, int64_t begin) { refuse("slice_cols"); }
  // out[R, C] = x[rows[r], :]
  virtual void gather_rows(const Tensor& out, const Tensor& x, const std::vector<int32_t>& rows) = 0;
  // x = cap * tanh(x / cap)
  virtual void softcap(const Tensor& x, float cap) = 0;
  // ids I32 [R, 1] = for each row of x [R, V], the index of its largest value: the first one on
  // ties, NaN never chosen (0 when a row has nothing else) — the host argmax() of the sampler.
  virtual void argmax(const Tensor& ids, const Tensor& x) = 0;
  // Each row r of x [R, V] reduced for the sampler (engine/sampler.h, SampleCandidates): with
  // s_i = sampling::scaled(x[r, i], temperatures[r]), ids I32 [R, M] = the first M tokens of the
  // order (s descending, the lower id first on ties, -0 and +0 equal), scaled F32 [R, M] their
  // s, mass F64 [R, 1] = sampling::lane_sum over i of exp_nonpositive(s_i - max s). M <= V.
  virtual void sample_candidates(const Tensor& ids, const Tensor& scaled, const Tensor& mass, const Tensor& x,
                                 std::span<const float> temperatures) {
    refuse("sample_candidates");
  }
  // x = act(x) in place (silu, sigmoid or gelu-tanh).
  virtual void activation(const Tensor& x, Activation act) { refuse("activation"); }
  // out = a * b elementwise (out may be a or b).
  virtual void mul(const Tensor& out, const Tensor& a, const Tensor& b) { refuse("mul"); }
  // RMSNorm of each `group`-wide column block of each row: out = x / rms(group) * w, w F32
  // [1, x.cols] (a weight per column, not per group) or empty. out may be x.
  virtual void group_rms_norm(const Tensor& out, const Tensor& x, const Tensor& w, int group, float eps) { refuse("group_rms_norm"); }
  // out[N, D] = rows ids[i] of the concatenation of `shards` (each [rows_k, D], BF16/F16/F32):
  // an embedding lookup with host-computed ids (hashed n-gram ids), table split row-wise.
  virtual void embed_rows(const Tensor& out, const std::vector<Tensor>& shards, const std::vector<int32_t>& ids) { refuse("embed_rows"); }
  // Token windows for hashed n-gram embeddings (ops/ngram.h): windows I32 [T, n], row r = its
  // token and the n - 1 before it in its sequence, newest first, eos across an eos or before the
  // sequence's start. The tokens before the step come from context I32 [slots, n - 1] (each slot's
  // last n - 1 tokens, oldest first; a sequence with n_past == 0 starts from eos whatever its
  // row holds); afterwards every stepped sequence's row holds its last n - 1 tokens. 2 <= n <=
  // ngram::kMaxN. Keeping the context in a tensor the step updates lets a recorded decode step
  // replay (ops/step_graphs.h).
  virtual void token_windows(const Tensor& windows, const Tensor& context, int32_t eos, const StepPlan& plan) {
    refuse("token_windows");
  }
  // out[T * heads, D]: row t * heads + h = row ngram::head_row(windows[t], hash, h) of the
  // concatenation of `shards` (as embed_rows; every shard but the last the same rows), with
  // windows I32 [T, n] from token_windows and hash I64 [1, n + 2 * heads] (NgramHash::packed).
  virtual void ngram_embed(const Tensor& out, const std::vector<Tensor>& shards, const Tensor& windows,
                           const Tensor& hash) {
    refuse("ngram_embed");
  }

  // ---- residual streams (hyper-connections: x [T, n * H] holds n streams of width H) ----
  // out[T, n * H]: every stream = y [T, H].
  virtual void streams_expand(const Tensor& out, const Tensor& y) { refuse("streams_expand"); }
  // out[T, H] = mean over s of w_s * x_s (w, x [T, n * H]).
  virtual void streams_mix(const Tensor& out, const Tensor& w, const Tensor& x) { refuse("streams_mix"); }
  // x_s = (accumulate ? x_s : 0) + w[:, s] * y for every stream s; y [T, H], w [T, n].
  virtual void streams_inject(const Tensor& x, const Tensor& y, const Tensor& w, bool accumulate) { refuse("streams_inject"); }
  // g[T, n] = sigmoid(sign(d) * sqrt(max(|d|, 1e-6))), d = <a_s, b_s> / sqrt(H) per stream s
  // (Qwen4-Exp PLE gate); a, b [T, n * H].
  virtual void stream_gate(const Tensor& g, const Tensor& a, const Tensor& b) { refuse("stream_gate"); }

  // ---- matrix products ----
  // out[T, N] = x[T, K] . w[N, K]^T
  virtual void matmul(const Tensor& out, const Tensor& x, const Tensor& w) = 0;
  // out = (act(gate) * up) . w^T, act silu or gelu-tanh: a gated MLP's down projection. gate may
  // be overwritten. Bit-identical to silu_mul / gelu_tanh_mul(gate, gate, up) followed by
  // matmul(out, gate, w), which is what this default does; CUDA decode steps with a small K run
  // it as one GEMV that forms act(gate) * up as it loads its input.
  virtual void matmul_gated(const Tensor& out, const Tensor& gate, const Tensor& up, const Tensor& w, Activation act) {
    if (act == Activation::kGeluTanh) {
      gelu_tanh_mul(gate, gate, up);
    } else {
      KCHECK_MSG(act == Activation::kSilu, "matmul_gated: activation must be silu or gelu-tanh");
      silu_mul(gate, gate, up);
    }
    matmul(out, gate, w);
  }
  // An MoE layer's shared expert's down projection and its route, which neither reads what the
  // other writes: matmul_gated(out, gate, up, w, act) and moe_route(ids, weights, logits, top_k,
  // norm_topk), each bit-identical to its own op — this default runs the two; CUDA decode steps run
  // them in one launch (the route in blocks beside the GEMV's), so neither waits for the other.
  virtual void matmul_gated_and_route(const Tensor& out, const Tensor& gate, const Tensor& up, const Tensor& w,
                                      Activation act, const Tensor& ids, const Tensor& weights, const Tensor& logits,
                                      int top_k, bool norm_topk) {
    matmul_gated(out, gate, up, w, act);
    moe_route(ids, weights, logits, top_k, norm_topk);
  }
  // Several matmuls of the same x (a layer's input projections): each target exactly what
  // matmul(t.out, x, t.w) computes. Backends may run them as one launch (CUDA decode steps).
  virtual void matmul_multi(const Tensor& x, std::span<const MatmulTarget> targets) {
    for (const MatmulTarget& t : targets) matmul(t.out, x, t.w);
  }
  // A gated MLP, y = (act(x · gateᵀ) * (x · upᵀ)) · downᵀ, with g and u [T, F] as scratch (g may
  // end holding the product): matmul_multi(x, {g, gate}, {u, up}) then matmul_gated(y, g, u, down,
  // act), which is what this default runs. CUDA one-row steps whose down projection does not fuse
  // its activation (K > 1024) form the product in the gate and up GEMV's epilogue instead: one
  // launch fewer, the same bits.
  virtual void gated_mlp(const Tensor& y, const Tensor& x, const Tensor& gate, const Tensor& up, const Tensor& down,
                         Activation act, const Tensor& g, const Tensor& u) {
    const MatmulTarget proj[] = {{g, gate}, {u, up}};
    matmul_multi(x, proj);
    matmul_gated(y, g, u, down, act);
  }

  // ---- attention ----
  // RoPE on each head of x [T, n_heads * head_dim] in place, at the plan's positions. The angle
  // of pair i is pos * inv_freq[i], inv_freq[i] = theta^(-2i / F) (F = rope.freq_dim, or
  // rope.rotary_dim when 0), formed in fp32 as transformers does. Pairing (rotate_half):
  //   default:               (i, i + rotary_dim/2) for i < rotary_dim/2; dims >= rotary_dim untouched;
  //   rope.whole_head_pairs: (i, i + head_dim/2) for i < rotary_dim/2; the other pairs untouched
  //                          (Gemma 4 "proportional" RoPE: frequency 0 for the non-rotated pairs).
  virtual void rope(const Tensor& x, int head_dim, const RopeConfig& rope, const StepPlan& plan) = 0;
  // An attention layer's q and k before attention: head_rms_norm(q, q_norm) when q_norm is not
  // empty, then rope(q); the same for k unless k is empty (a KV-shared layer). Bit-identical to
  // those ops, which is what this default runs; CUDA runs them as one launch.
  virtual void qk_norm_rope(const Tensor& q, const Tensor& q_norm, const Tensor& k, const Tensor& k_norm,
                            int head_dim, float eps, const RopeConfig& rope_cfg, const StepPlan& plan) {
    if (!q_norm.empty()) head_rms_norm(q, q_norm, head_dim, eps);
    rope(q, head_dim, rope_cfg, plan);
    if (k.empty()) return;
    if (!k_norm.empty()) head_rms_norm(k, k_norm, head_dim, eps);
    rope(k, head_dim, rope_cfg, plan);
  }
  // An attention layer's middle: qk_norm_rope(q, q_norm, k, k_norm, p.head_dim, eps, rope_cfg),
  // attention(out, q, k, v, cache, p), then out *= sigmoid(gate) (mul_sigmoid) when gate [T,
  // n_heads * head_dim] is not empty. Bit-identical to those ops, which is what this default runs
  // (k holds its normed, rotated values after either); CUDA, over a paged cache the step writes,
  // norms and rotates q and k and writes k and v into the cache in one launch, and gates the
  // output in the attention's combine kernel.
  virtual void norm_rope_attention(const Tensor& out, const Tensor& q, const Tensor& q_norm, const Tensor& k,
                                   const Tensor& k_norm, const Tensor& v, const Tensor& gate, float eps,
                                   const RopeConfig& rope_cfg, const KvLayerView& cache, const AttentionParams& p,
                                   const StepPlan& plan) {
    qk_norm_rope(q, q_norm, k, k_norm, p.head_dim, eps, rope_cfg, plan);
    attention(out, q, k, v, cache, p, plan);
    if (!gate.empty()) mul_sigmoid(out, gate);
  }
  // out[T, n_heads * head_dim] = causal softmax attention of q over each sequence's positions
  // [0, p] (or [max(0, p - window + 1), p] when p.window > 0, or the row's p.select): positions
  // before the step (< n_past) from the cache, the step's own from k, v [T, n_kv * head_dim].
  // Then k, v are written into the cache at the plan's positions (kv_write), unless p.write_kv is
  // false. k and v may both be empty: every position then comes from the cache.
  // A ring cache (cache.ring_rows > 0, sliding layers) needs window <= ring_rows.
  virtual void attention(const Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v,
                         const KvLayerView& cache, const AttentionParams& p, const StepPlan& plan) = 0;
  // Stores k, v [T, width] in the cache at the plan's positions (for a ring, only each
  // sequence's last ring_rows positions of the step).
  virtual void kv_write(const KvLayerView& cache, const Tensor& k, const Tensor& v, const StepPlan& plan) { refuse("kv_write"); }

  // QSA indexer: writes the raw keys k [T, head_dim] into cache.index_k at the plan's positions,
  // then for each row at position p picks its attended positions into select I32 [T, budget + ratio - 1]
  // (-1 padded): the ((p + 1) / ratio) complete blocks of `ratio` keys are mean-pooled, RMS-normed
  // with k_norm (F32 [1, head_dim]), rotated at the block's first position, scored by
  // sum_h relu(q_h . k_b) / sqrt(head_dim) (q [T, n_heads * head_dim], already normed and rotated);
  // the best budget / ratio blocks (ties to the lower block) and the incomplete tail are selected.
  virtual void qsa_select(const Tensor& select, const Tensor& q, const Tensor& k, const Tensor& k_norm,
                          const KvLayerView& cache, const QsaParams& p, const StepPlan& plan) { refuse("qsa_select"); }

  // ---- Gated DeltaNet ----
  // Depthwise causal conv over time, per channel, continuing each sequence's conv state, then
  // SiLU; x [T, C] in place; w F32 [C, K]. The state keeps the last K-1 inputs.
  virtual void conv1d_silu(const Tensor& x, const Tensor& w, const StateLayerView& state, int kernel,
                           const StepPlan& plan) = 0;
  // The gated delta rule. qkv [T, conv_dim] (q | k | v after the conv), a, b [T, n_v_heads]
  // (raw projections), a_neg [1, n_v] = -exp(A_log), dt_bias [1, n_v]; out [T, n_v * dv].
  // q, k are L2-normalized; beta = sigmoid(b); g = a_neg * softplus(a + dt_bias).
  // Prefill runs the chunked (WY) form on chunks aligned to multiples of 64 positions; single
  // tokens run the recurrent form.
  virtual void gated_delta_rule(const Tensor& out, const Tensor& qkv, const Tensor& a, const Tensor& b,
                                const Tensor& a_neg, const Tensor& dt_bias, const StateLayerView& state,
                                const DeltaNetConfig& cfg, const StepPlan& plan) = 0;
  // Depthwise causal conv with dilation over time, continuing each sequence's state (its last
  // (kernel - 1) * dilation inputs per channel, oldest first, [C, (kernel - 1) * dilation] per slot),
  // then SiLU: out[t] = silu(sum_j w[c, j] x[t - (kernel - 1 - j) * dilation]). x, out [T, C]
  // (out may not be x); w F32 [C, kernel]. The state is updated.
  virtual void dilated_conv1d_silu(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& state,
                                   int kernel, int dilation, const StepPlan& plan) { refuse("dilated_conv1d_silu"); }
  // x [T, n * d] = rmsnorm(x per d-group) * w[d] * silu(z), in place.
  virtual void gated_rms_norm(const Tensor& x, const Tensor& z, const Tensor& w, int head_dim, float eps) = 0;
  // A Qwen-line DeltaNet layer's recurrence from its projections: conv1d_silu(qkv, conv_w),
  // gated_delta_rule(out, qkv, a, b, a_neg, dt_bias), gated_rms_norm(out, z, norm, v_head_dim).
  // Bit-identical to those three ops, which is what this default runs; CUDA decode steps run them
  // as one launch, which leaves qkv as the projection wrote it (callers read only out afterwards).
  virtual void deltanet_recurrence(const Tensor& out, const Tensor& qkv, const Tensor& z, const Tensor& a,
                                   const Tensor& b, const Tensor& conv_w, const Tensor& a_neg, const Tensor& dt_bias,
                                   const Tensor& norm, float eps, const StateLayerView& state,
                                   const DeltaNetConfig& cfg, const StepPlan& plan) {
    conv1d_silu(qkv, conv_w, state, cfg.conv_kernel, plan);
    gated_delta_rule(out, qkv, a, b, a_neg, dt_bias, state, cfg, plan);
    gated_rms_norm(out, z, norm, cfg.v_head_dim, eps);
  }

  // ---- mixture of experts ----
  // logits [T, E] -> ids I32 [T, k], weights F32 [T, k] (softmax over all experts, top-k,
  // renormalized when norm_topk).
  virtual void moe_route(const Tensor& ids, const Tensor& weights, const Tensor& logits, int top_k,
                         bool norm_topk) = 0;
  // out[T, H] = sum_j w[t, j] * down_e(act(gate_e x) * up_e x), e = ids[t, j], summed in j order,
  // act = experts.act, w[t, j] = weights[t, j] (times experts.expert_scale[e] when given).
  virtual void moe_experts(const Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                           const ExpertWeights& experts) = 0;
  // moe_experts, then a shared expert's output [T, H] joins the sum: out += shared *
  // sigmoid(shared_gate) (gate [T, 1] or [T, H], as in mul_sigmoid), or out += shared when
  // shared_gate is empty. shared may be overwritten. Bit-identical to moe_experts followed by
  // add_mul_sigmoid / add, which is what this default does; CUDA adds it in the routed sum's pass.
  virtual void moe_experts_shared(const Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                                  const ExpertWeights& experts, const Tensor& shared, const Tensor& shared_gate) {
    moe_experts(out, x, ids, weights, experts);
    if (shared_gate.empty()) {
      add(out, out, shared);
    } else {
      add_mul_sigmoid(out, shared, shared_gate);
    }
  }
 protected:
  Phase phase_ = Phase::kOther;
  bool kv_bf16_ = false;
  [[noreturn]] void refuse(const char* op) const {
    unsupported("the ", name(), " backend does not implement op '", op,
                "' (needed by this model architecture); run it with --device cpu");
  }
};

// Marks the ops of a scope as one phase of the forward pass, restoring the previous on exit.
class PhaseScope {
 public:
  PhaseScope(Ops& ops, Phase p) : ops_(ops), prev_(ops.phase()) { ops.set_phase(p); }
  ~PhaseScope() { ops_.set_phase(prev_); }
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  Ops& ops_;
  Phase prev_;
};

}  // namespace kestrel
