// Context: what every CUDA entry point needs besides its tensors — the stream, the cuBLAS
// handle, the step metadata begin_step uploaded, and growable scratch memory.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <span>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "ops/ops.h"

namespace kestrel::cuda {

// Device copies of the StepPlan's arrays (uploaded once per step by CudaOps::begin_step, at
// addresses fixed by the step's shape, so a recorded graph reads each step's values).
struct StepView {
  const int32_t* max_position = nullptr;  // [1] the step's largest position (sizes split-KV attention)
  const int32_t* tokens = nullptr;        // [T]
  const int32_t* positions = nullptr;     // [T]
  const int32_t* row_seq = nullptr;       // [T]
  const SeqStep* seqs = nullptr;          // [n_seqs]
  const int32_t* block_tables = nullptr;  // [sum of n_blocks]
  const int32_t* logit_rows = nullptr;    // [R]
  int32_t n_rows = 0;
  int32_t n_seqs = 0;
  int32_t block_size = 0;
};

// What CUDA graph capture (ops/step_graphs.h) needs to know about device memory: an epoch that
// advances whenever memory a recorded graph may reference is freed or moved, and whether a
// capture is open.
struct GraphGuard {
  std::atomic<uint64_t> epoch{0};
  bool capturing = false;
  // The largest position a step replayed from the open capture may hold: an op whose launch sizes
  // cover the step's positions only up to a bound (qsa_select's key blocks) lowers it, and a
  // replay of a step with a later position is refused (the graph is recorded again).
  int32_t position_limit = INT32_MAX;
  // Throws Error(kUnsupported) naming `what` (an op needing the host inside the step) while a
  // capture is open; the capture is then abandoned and the step runs eagerly.
  void check(const char* what) const;
  // While a capture is open: what this step's launches cover holds only for positions <= p.
  void limit_positions(int32_t p) {
    if (capturing && p < position_limit) position_limit = p;
  }
};

// Device scratch in numbered slots; a slot grows (never shrinks) on demand. Work on one stream
// is ordered, so an op may reuse a slot that the previous op used. Growing advances the graph
// epoch (and is refused while a capture is open).
class Scratch {
 public:
  explicit Scratch(GraphGuard& guard) : guard_(guard) {}
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch();
  void* get(int slot, size_t bytes);
  // get(), with memory it makes (or remakes, larger) zeroed on `stream` first: for counters that
  // their users leave at zero when they finish.
  void* get_zeroed(int slot, size_t bytes, cudaStream_t stream);

 private:
  GraphGuard& guard_;
  std::vector<void*> ptr_;
  std::vector<size_t> size_;
};

// Device copies of host arrays of device pointers (the expert weights of each MoE layer, the
// shards of an n-gram table), made
// once and reused while the pointers stay the same. Making or replacing a table synchronizes the
// stream, so it is refused while a capture is open (a warm-up step made them already).
class PointerTables {
 public:
  explicit PointerTables(GraphGuard& guard) : guard_(guard) {}
  PointerTables(const PointerTables&) = delete;
  PointerTables& operator=(const PointerTables&) = delete;
  ~PointerTables();
  const void* const* get(const std::vector<const void*>& ptrs, cudaStream_t stream);

 private:
  struct Entry {
    std::vector<const void*> host;
    void* dev = nullptr;
  };
  GraphGuard& guard_;
  std::unordered_map<const void*, Entry> entries_;  // keyed by the first pointer
};

struct Context {
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  StepView step;
  Scratch* scratch = nullptr;
  PointerTables* tables = nullptr;
  GraphGuard* guard = nullptr;
  MatmulPrecision matmul_precision = MatmulPrecision::kBf16x3;
  bool deterministic = false;  // batch-invariant kernels only (CudaOps::set_deterministic)
  // Copies host data into scratch slot `slot` (stream-ordered) and returns the device pointer.
  // Pageable host memory: refused while a capture is open.
  void* upload_scratch(int slot, const void* host, size_t bytes) const;
};

// Scratch slot numbers, one per use, so nested users never collide.
enum ScratchSlot : int {
  kSlotMatmulX = 0,     // BF16 terms of split matmul activations
  kSlotGatherRows = 1,  // row ids for gather_rows
  kSlotMoeHidden = 2,   // [T*k, F] expert hidden activations
  kSlotMoePartial = 3,  // [T*k, H] weighted expert outputs
  kSlotAttnPartial = 4, // split-KV attention partial results
  kSlotMatmulPartial = 5,  // per-term products of a stacked split matmul
  kSlotMoeIndex = 6,       // MoE pairs grouped by expert: counts, offsets, cursors, order
  kSlotConvOut = 7,        // conv1d outputs before they replace the inputs
  kSlotEmbedRows = 8,      // embed_rows: where each output row comes from
  kSlotQsaScores = 9,      // qsa_select: [T, max blocks] block scores
  kSlotGdrMeta = 10,       // gated_delta_rule, chunked: chunk rows and runs per group
  kSlotGdrChunks = 11,     // gated_delta_rule, chunked: per-chunk W, U, Q', K', P
  kSlotArgmax = 12,        // argmax: each row's per-range bests
  kSlotAttnKeys = 13,      // attention_prefill: each sequence's key range in the BF16 copy
  kSlotAttnBf16 = 14,      // attention_prefill: the attended K/V rows as BF16 terms
  kSlotSampleTemps = 15,   // sample_candidates: each row's temperature
  kSlotSampleKeys = 16,    // sample_candidates: each row's scaled logits
  kSlotArgmaxDone = 17,    // argmax: each row's count of ranges done (zero between calls)
  kNumSlots = 18,
};

// The device's multiprocessors (read once).
int sm_count();

// The most blocks (at kGemv1Cols columns a warp) of a one-row BF16/F32 GEMV that takes the deep
// small-grid code (gemv.cuh, kGemv1DeepUnroll): the multiprocessors, or
// KESTREL_CUDA_GEMV_DEEP_BLOCKS from the environment (0: never). Both codes give the same bits;
// the knob is there to measure which streams faster at a shape. Read once.
int64_t gemv_deep_max_blocks();

// Whether launch() (device_util.cuh) asks for programmatic dependent launch: on unless
// KESTREL_CUDA_PDL=0 (to measure what it buys; results are the same either way). Read once.
bool pdl_enabled();

// Checks that begin_step ran with this plan.
inline void check_step(const Context& ctx, const StepPlan& plan) {
  KCHECK_MSG(ctx.step.n_rows == plan.n_rows() && ctx.step.n_seqs == int32_t(plan.seqs.size()),
             "CUDA op called with a StepPlan that begin_step did not see (", plan.n_rows(), " rows vs ",
             ctx.step.n_rows, ")");
}

// ---- entry points, one file per op (same names as the CPU kernels) ----
void embed(const Context& ctx, const Tensor& out, const Tensor& table, const StepPlan& plan, float scale);
void rms_norm(const Context& ctx, const Tensor& out, const Tensor& x, const Tensor& w, float eps);
// Ops::embed_rms_norm in one launch; false (nothing launched) where it does not apply: a block-format
// table or rows too long for a thread's registers.
bool embed_rms_norm(const Context& ctx, const Tensor& x, const Tensor& out, const Tensor& table, const StepPlan& plan,
                    float scale, const Tensor& w, float eps);
void add_rms_norm(const Context& ctx, const Tensor& residual, const Tensor& x, const Tensor& w, const Tensor& out,
                  float eps);
void head_rms_norm(const Context& ctx, const Tensor& x, const Tensor& w, int head_dim, float eps);
void gated_rms_norm(const Context& ctx, const Tensor& x, const Tensor& z, const Tensor& w, int head_dim, float eps);
// Ops::deltanet_recurrence as one launch for a decode step (every sequence one token) whose shapes
// suit its kernel (dk, dv multiples of 32, n_v / n_k heads times dv / 32 at most 8, conv kernel
// at most 8): returns false, having done nothing, otherwise.
bool deltanet_recurrence(const Context& ctx, const Tensor& out, const Tensor& qkv, const Tensor& z, const Tensor& a,
                         const Tensor& b, const Tensor& conv_w, const Tensor& a_neg, const Tensor& dt_bias,
                         const Tensor& norm, float eps, const StateLayerView& state, const DeltaNetConfig& cfg,
                         const StepPlan& plan);
void add(const Context& ctx, const Tensor& out, const Tensor& a, const Tensor& b);
void mul_sigmoid(const Context& ctx, const Tensor& x, const Tensor& gate);
void add_mul_sigmoid(const Context& ctx, const Tensor& out, const Tensor& x, const Tensor& gate);
void silu_mul(const Context& ctx, const Tensor& out, const Tensor& gate, const Tensor& up);
void gelu_tanh_mul(const Context& ctx, const Tensor& out, const Tensor& gate, const Tensor& up);
void mul(const Context& ctx, const Tensor& out, const Tensor& a, const Tensor& b);
void scale(const Context& ctx, const Tensor& x, float s);
void activation(const Context& ctx, const Tensor& x, Activation act);
void slice_cols(const Context& ctx, const Tensor& out, const Tensor& x, int64_t begin);
// device_rows: a device copy of `rows` (the step's logit rows), or null to upload them.
void gather_rows(const Context& ctx, const Tensor& out, const Tensor& x, const std::vector<int32_t>& rows,
                 const int32_t* device_rows);
void softcap(const Context& ctx, const Tensor& x, float cap);
void argmax(const Context& ctx, const Tensor& ids, const Tensor& x);
void sample_candidates(const Context& ctx, const Tensor& ids, const Tensor& scaled, const Tensor& mass, const Tensor& x,
                       std::span<const float> temperatures);
void group_rms_norm(const Context& ctx, const Tensor& out, const Tensor& x, const Tensor& w, int group, float eps);
void embed_rows(const Context& ctx, const Tensor& out, const std::vector<Tensor>& shards,
                const std::vector<int32_t>& ids);
void token_windows(const Context& ctx, const Tensor& windows, const Tensor& context, int32_t eos,
                   const StepPlan& plan);
void ngram_embed(const Context& ctx, const Tensor& out, const std::vector<Tensor>& shards, const Tensor& windows,
                 const Tensor& hash);
void streams_expand(const Context& ctx, const Tensor& out, const Tensor& y);
void streams_mix(const Context& ctx, const Tensor& out, const Tensor& w, const Tensor& x);
void streams_inject(const Context& ctx, const Tensor& x, const Tensor& y, const Tensor& w, bool accumulate);
void stream_gate(const Context& ctx, const Tensor& g, const Tensor& a, const Tensor& b);
void matmul(const Context& ctx, const Tensor& out, const Tensor& x, const Tensor& w);
// out = (act(gate) * up) . w^T (a gated MLP's down projection); gate may be overwritten.
void matmul_gated(const Context& ctx, const Tensor& out, const Tensor& gate, const Tensor& up, const Tensor& w,
                  Activation act);
// Ops::matmul_gated_and_route: one launch where matmul_gated takes its one-launch GEMV, the two
// ops in turn otherwise.
void matmul_gated_and_route(const Context& ctx, const Tensor& out, const Tensor& gate, const Tensor& up,
                            const Tensor& w, Activation act, const Tensor& ids, const Tensor& weights,
                            const Tensor& logits, int top_k, bool norm_topk);
void matmul_multi(const Context& ctx, const Tensor& x, std::span<const MatmulTarget> targets);
// Ops::gated_mlp: one row's gate and up GEMVs with act(g) * u in their epilogue, then the down
// GEMV, where matmul_gated would take two launches; matmul_multi and matmul_gated otherwise.
void gated_mlp(const Context& ctx, const Tensor& y, const Tensor& x, const Tensor& gate, const Tensor& up,
               const Tensor& down, Activation act, const Tensor& g, const Tensor& u);
void rope(const Context& ctx, const Tensor& x, int head_dim, const RopeConfig& rope, const StepPlan& plan);
// Ops::qk_norm_rope as one launch, when the shapes suit its kernel (head_dim a multiple of 32, at
// most 256): returns false, having done nothing, otherwise.
bool qk_norm_rope(const Context& ctx, const Tensor& q, const Tensor& q_norm, const Tensor& k, const Tensor& k_norm,
                  int head_dim, float eps, const RopeConfig& rope, const StepPlan& plan);
// qk_norm_rope that also writes k (normed and rotated) and v into a paged cache at the plan's
// positions, as kv_write does: false, having done nothing, where its kernel does not take the shapes
// or the cache (a ring, or not F32/BF16). The caller has checked that every row's position lies in
// its sequence's blocks (attention's checks, as norm_rope_attention runs them first).
bool qk_norm_rope_kv_write(const Context& ctx, const Tensor& q, const Tensor& q_norm, const Tensor& k,
                           const Tensor& k_norm, const Tensor& v, int head_dim, float eps, const RopeConfig& rope,
                           const KvLayerView& cache, const StepPlan& plan);
void attention(const Context& ctx, const Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v,
               const KvLayerView& cache, const AttentionParams& p, const StepPlan& plan);
// Ops::norm_rope_attention over a paged cache the step writes (no ring, no selection, k and v
// given, write_kv): qk_norm_rope_kv_write, then attention over the cache with the gate in its
// combine kernel. False, having launched nothing, for the other cases (the caller runs the ops).
bool norm_rope_attention(const Context& ctx, const Tensor& out, const Tensor& q, const Tensor& q_norm,
                         const Tensor& k, const Tensor& k_norm, const Tensor& v, const Tensor& gate, float eps,
                         const RopeConfig& rope, const KvLayerView& cache, const AttentionParams& p,
                         const StepPlan& plan);
void kv_write(const Context& ctx, const KvLayerView& cache, const Tensor& k, const Tensor& v, const StepPlan& plan);
void qsa_select(const Context& ctx, const Tensor& select, const Tensor& q, const Tensor& k, const Tensor& k_norm,
                const KvLayerView& cache, const QsaParams& p, const StepPlan& plan);
void dilated_conv1d_silu(const Context& ctx, const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& state,
                         int kernel, int dilation, const StepPlan& plan);
// The longest conv kernel conv1d_silu (and deltanet_recurrence's fused conv) takes.
constexpr int kConv1dMaxKernel = 8;
void conv1d_silu(const Context& ctx, const Tensor& x, const Tensor& w, const StateLayerView& state, int kernel,
                 const StepPlan& plan);
void gated_delta_rule(const Context& ctx, const Tensor& out, const Tensor& qkv, const Tensor& a, const Tensor& b,
                      const Tensor& a_neg, const Tensor& dt_bias, const StateLayerView& state,
                      const DeltaNetConfig& cfg, const StepPlan& plan);
void moe_route(const Context& ctx, const Tensor& ids, const Tensor& weights, const Tensor& logits, int top_k,
               bool norm_topk);
// moe_route's checks of its arguments (internal checks: shapes, dtypes, top_k, E).
void check_moe_route(const Tensor& ids, const Tensor& weights, const Tensor& logits, int top_k);
// With shared (and shared_gate, empty or [T, 1] or [T, H]): out += shared * sigmoid(shared_gate),
// or + shared, in the routed sum's pass (Ops::moe_experts_shared).
void moe_experts(const Context& ctx, const Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                 const ExpertWeights& experts, const Tensor* shared = nullptr, const Tensor* shared_gate = nullptr);

}  // namespace kestrel::cuda
