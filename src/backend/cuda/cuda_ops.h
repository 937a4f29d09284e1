// CudaOps: the CUDA backend. Device memory from cudaMalloc (never managed memory), one stream,
// one cuBLAS handle; each op forwards to its entry point in <op>.cu (see context.h).
#pragma once

#include <memory>

#include "ops/ops.h"
#include "ops/step_graphs.h"

namespace kestrel {

namespace cuda {
struct Context;
class Scratch;
}  // namespace cuda

// How prefill matmuls (T > 8 rows, BF16 weights) treat the F32 activations. The weights are
// exact in BF16; the activations are split into BF16 terms x = t1 + t2 + ..., one tensor-core
// GEMM per term, summed in F32. Decode rows (T <= 8) always take the F32 GEMV kernel, and so
// does every T in deterministic mode (CudaOps::set_deterministic), whatever the precision.
enum class MatmulPrecision : uint8_t {
  kBf16,    // 1 term: activations rounded to BF16 (~2^-9 relative), 1 GEMM
  kBf16x2,  // 2 terms (~2^-16), 2 GEMMs
  kBf16x3,  // 3 terms (~2^-24, as exact as F32 inputs), 3 GEMMs: the default
  kExact,   // no tensor cores: the F32 GEMV kernel for every T (slow; a reference for diagnosis)
};
const char* matmul_precision_name(MatmulPrecision p);

class CudaOps final : public Ops, public StepGraphs {
 public:
  // Uses device `device`; Error(kUnsupported) naming --device cuda when there is no GPU.
  explicit CudaOps(int device = 0);
  ~CudaOps() override;
  CudaOps(const CudaOps&) = delete;
  CudaOps& operator=(const CudaOps&) = delete;

  // Number of CUDA devices visible (0 when there is no driver or no GPU; never throws).
  static int device_count();

  Device device() const override { return Device::kCuda; }
  const char* name() const override { return "cuda"; }
  std::string device_name() const override;  // cudaDeviceProp::name
  std::unique_ptr<OpTimer> make_timer() override;  // CUDA events on the stream
  bool device_memory(uint64_t& free_bytes, uint64_t& total_bytes) const override;  // cudaMemGetInfo
  std::string device_fault() const override;  // an error the stream reports (sticky: illegal address, ...)

  // BF16/F16/F32 and all seven ggml block formats (Q8_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, MXFP4).
  bool supports_weight_dtype(DType dtype) const override;

  Buffer alloc(DType dtype, int64_t rows, int64_t cols) override;
  Buffer upload(const Tensor& host) override;
  // A Q4_K matrix becomes DType::kQ4_K_T32, a Q8_0 one of whole 256-element super-blocks
  // DType::kQ8_0_T32, and a Q6_K one whose rows are a multiple of 8 DType::kQ6_K_T32 (their bytes
  // permuted in groups of 32 rows, block_gemv_geometry.h's q4k_int: the integer-dot GEMV's
  // layouts); anything else, upload.
  Buffer upload_matrix(const Tensor& host) override;
  void to_host(const Tensor& src, void* dst) override;
  void zero(const Tensor& t) override;
  void zero_rows(const Tensor& t, int64_t row) override;
  void copy_rows(const Tensor& dst, int64_t dst_row, const Tensor& src, int64_t src_row, int64_t n) override;
  void begin_step(const StepPlan& plan) override;

  void embed(const Tensor& out, const Tensor& table, const StepPlan& plan, double scale) override;
  void rms_norm(const Tensor& out, const Tensor& x, const Tensor& w, float eps) override;
  void embed_rms_norm(const Tensor& x, const Tensor& out, const Tensor& table, const StepPlan& plan, double scale,
                      const Tensor& w, float eps) override;
  void head_rms_norm(const Tensor& x, const Tensor& w, int head_dim, float eps) override;
  void add(const Tensor& out, const Tensor& a, const Tensor& b) override;
  void add_rms_norm(const Tensor& residual, const Tensor& x, const Tensor& w, const Tensor& out, float eps) override;
  void mul_sigmoid(const Tensor& x, const Tensor& gate) override;
  void add_mul_sigmoid(const Tensor& out, const Tensor& x, const Tensor& gate) override;
  void silu_mul(const Tensor& out, const Tensor& gate, const Tensor& up) override;
  void gelu_tanh_mul(const Tensor& out, const Tensor& gate, const Tensor& up) override;
  void scale(const Tensor& x, double s) override;
  void slice_cols(const Tensor& out, const Tensor& x, int64_t begin) override;
  void gather_rows(const Tensor& out, const Tensor& x, const std::vector<int32_t>& rows) override;
  void softcap(const Tensor& x, float cap) override;
  void argmax(const Tensor& ids, const Tensor& x) override;
  void sample_candidates(const Tensor& ids, const Tensor& scaled, const Tensor& mass, const Tensor& x,
                         std::span<const float> temperatures) override;
  void activation(const Tensor& x, Activation act) override;
  void mul(const Tensor& out, const Tensor& a, const Tensor& b) override;
  void group_rms_norm(const Tensor& out, const Tensor& x, const Tensor& w, int group, float eps) override;
  void embed_rows(const Tensor& out, const std::vector<Tensor>& shards, const std::vector<int32_t>& ids) override;
  void token_windows(const Tensor& windows, const Tensor& context, int32_t eos, const StepPlan& plan) override;
  void ngram_embed(const Tensor& out, const std::vector<Tensor>& shards, const Tensor& windows,
                   const Tensor& hash) override;
  void streams_expand(const Tensor& out, const Tensor& y) override;
  void streams_mix(const Tensor& out, const Tensor& w, const Tensor& x) override;
  void streams_inject(const Tensor& x, const Tensor& y, const Tensor& w, bool accumulate) override;
  void stream_gate(const Tensor& g, const Tensor& a, const Tensor& b) override;
  void matmul(const Tensor& out, const Tensor& x, const Tensor& w) override;
  void matmul_gated(const Tensor& out, const Tensor& gate, const Tensor& up, const Tensor& w, Activation act) override;
  void matmul_gated_and_route(const Tensor& out, const Tensor& gate, const Tensor& up, const Tensor& w, Activation act,
                              const Tensor& ids, const Tensor& weights, const Tensor& logits, int top_k,
                              bool norm_topk) override;
  void matmul_multi(const Tensor& x, std::span<const MatmulTarget> targets) override;
  void gated_mlp(const Tensor& y, const Tensor& x, const Tensor& gate, const Tensor& up, const Tensor& down,
                 Activation act, const Tensor& g, const Tensor& u) override;
  void rope(const Tensor& x, int head_dim, const RopeConfig& rope, const StepPlan& plan) override;
  void qk_norm_rope(const Tensor& q, const Tensor& q_norm, const Tensor& k, const Tensor& k_norm, int head_dim,
                    float eps, const RopeConfig& rope_cfg, const StepPlan& plan) override;
  void norm_rope_attention(const Tensor& out, const Tensor& q, const Tensor& q_norm, const Tensor& k,
                           const Tensor& k_norm, const Tensor& v, const Tensor& gate, float eps,
                           const RopeConfig& rope_cfg, const KvLayerView& cache, const AttentionParams& p,
                           const StepPlan& plan) override;
  void attention(const Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, const KvLayerView& cache,
                 const AttentionParams& p, const StepPlan& plan) override;
  void kv_write(const KvLayerView& cache, const Tensor& k, const Tensor& v, const StepPlan& plan) override;
  void qsa_select(const Tensor& select, const Tensor& q, const Tensor& k, const Tensor& k_norm,
                  const KvLayerView& cache, const QsaParams& p, const StepPlan& plan) override;
  void dilated_conv1d_silu(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& state, int kernel,
                           int dilation, const StepPlan& plan) override;
  void conv1d_silu(const Tensor& x, const Tensor& w, const StateLayerView& state, int kernel,
                   const StepPlan& plan) override;
  void gated_delta_rule(const Tensor& out, const Tensor& qkv, const Tensor& a, const Tensor& b, const Tensor& a_neg,
                        const Tensor& dt_bias, const StateLayerView& state, const DeltaNetConfig& cfg,
                        const StepPlan& plan) override;
  void gated_rms_norm(const Tensor& x, const Tensor& z, const Tensor& w, int head_dim, float eps) override;
  void deltanet_recurrence(const Tensor& out, const Tensor& qkv, const Tensor& z, const Tensor& a, const Tensor& b,
                           const Tensor& conv_w, const Tensor& a_neg, const Tensor& dt_bias, const Tensor& norm,
                           float eps, const StateLayerView& state, const DeltaNetConfig& cfg,
                           const StepPlan& plan) override;
  void moe_route(const Tensor& ids, const Tensor& weights, const Tensor& logits, int top_k, bool norm_topk) override;
  void moe_experts_shared(const Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                          const ExpertWeights& experts, const Tensor& shared, const Tensor& shared_gate) override;
  void moe_experts(const Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                   const ExpertWeights& experts) override;

  // Waits for all work queued so far.
  void synchronize();
  // See MatmulPrecision; kBf16x3 unless set.
  void set_matmul_precision(MatmulPrecision p);
  MatmulPrecision matmul_precision() const;
  // Deterministic mode (off unless set): a row's result does not depend on the other rows of its
  // step, so a sequence's logits are bit-identical decoded alone or in any batch. Matmuls take
  // the F32 GEMV kernels for every row count (groups of up to 8 rows, each row summed as when
  // alone) instead of cuBLAS, and split-KV attention cuts a row's keys by its own key count only.
  // The other kernels are batch-invariant always. Costs prefill and large-batch speed (docs/cuda.md).
  void set_deterministic(bool on);
  bool deterministic() const;
  // Step graphs (StepGraphs; docs/cuda.md "CUDA graphs"): on unless KESTREL_CUDA_GRAPHS=0 in the
  // environment when the backend was made, or set_step_graphs(false). Never used in deterministic mode.
  void set_step_graphs(bool on);

  std::string graphs_off_reason() const override;
  bool replay_step(const StepGraphKey& key, const StepPlan& plan) override;
  void begin_capture(const StepGraphKey& key, const StepPlan& plan) override;
  std::string end_capture() override;
  void abort_capture() override;
  void drop_graphs(const void* owner) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  const cuda::Context& ctx() const;
};

}  // namespace kestrel
