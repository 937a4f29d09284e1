// CpuOps: the reference backend, forwarding each op to its kernel file.
#pragma once

#include "ops/ops.h"

namespace kestrel {

class CpuOps final : public Ops {
 public:
  // activations: F32 (the default), or F64 for the float64 oracle mode, in which every
  // activation, cache and state tensor is double and the kernels compute in double.
  explicit CpuOps(DType activations = DType::kF32);
  Device device() const override { return Device::kCpu; }
  const char* name() const override { return "cpu"; }
  std::string device_name() const override;  // /proc/cpuinfo's model name
  DType activation_dtype() const override { return activations_; }
  // BF16/F16/F32 and every block format: matmul (and so matmul_multi and moe_experts) dequantizes
  // a tile of weight rows at a time; embed / embed_rows dequantize the rows they gather.
  bool supports_weight_dtype(DType dtype) const override;

  Buffer alloc(DType dtype, int64_t rows, int64_t cols) override;
  Buffer upload(const Tensor& host) override;
  void to_host(const Tensor& src, void* dst) override;
  void zero(const Tensor& t) override;
  void zero_rows(const Tensor& t, int64_t row) override;
  void copy_rows(const Tensor& dst, int64_t dst_row, const Tensor& src, int64_t src_row, int64_t n) override;
  void begin_step(const StepPlan& plan) override {}

  void embed(const Tensor& out, const Tensor& table, const StepPlan& plan, double scale) override;
  void rms_norm(const Tensor& out, const Tensor& x, const Tensor& w, float eps) override;
  void head_rms_norm(const Tensor& x, const Tensor& w, int head_dim, float eps) override;
  void add(const Tensor& out, const Tensor& a, const Tensor& b) override;
  void add_rms_norm(const Tensor& residual, const Tensor& x, const Tensor& w, const Tensor& out, float eps) override;
  void mul_sigmoid(const Tensor& x, const Tensor& gate) override;
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
  void qsa_select(const Tensor& select, const Tensor& q, const Tensor& k, const Tensor& k_norm,
                  const KvLayerView& cache, const QsaParams& p, const StepPlan& plan) override;
  void dilated_conv1d_silu(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& state, int kernel,
                           int dilation, const StepPlan& plan) override;
  void matmul(const Tensor& out, const Tensor& x, const Tensor& w) override;
  void rope(const Tensor& x, int head_dim, const RopeConfig& rope, const StepPlan& plan) override;
  void attention(const Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, const KvLayerView& cache,
                 const AttentionParams& p, const StepPlan& plan) override;
  void kv_write(const KvLayerView& cache, const Tensor& k, const Tensor& v, const StepPlan& plan) override;
  void conv1d_silu(const Tensor& x, const Tensor& w, const StateLayerView& state, int kernel,
                   const StepPlan& plan) override;
  void gated_delta_rule(const Tensor& out, const Tensor& qkv, const Tensor& a, const Tensor& b, const Tensor& a_neg,
                        const Tensor& dt_bias, const StateLayerView& state, const DeltaNetConfig& cfg,
                        const StepPlan& plan) override;
  void gated_rms_norm(const Tensor& x, const Tensor& z, const Tensor& w, int head_dim, float eps) override;
  void moe_route(const Tensor& ids, const Tensor& weights, const Tensor& logits, int top_k, bool norm_topk) override;
  void moe_experts(const Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                   const ExpertWeights& experts) override;

 private:
  DType activations_;
};

}  // namespace kestrel
