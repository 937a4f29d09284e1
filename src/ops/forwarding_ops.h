// ForwardingOps: a backend wrapped, every call passed through to it — the fused ops too (matmul_gated,
// matmul_gated_and_route, add_mul_sigmoid, moe_experts_shared, sample_candidates, qk_norm_rope,
// norm_rope_attention), so a wrapped backend runs exactly the kernels it runs alone. Each op runs
// through run(name, fn), which subclasses override to act around it (ProfilingOps times ops; tests
// inject faults). Allocations and uploads pass straight through.
#pragma once

#include <functional>
#include <string>

#include "ops/ops.h"

namespace kestrel {

class ForwardingOps : public Ops {
 public:
  explicit ForwardingOps(Ops& inner) : inner_(inner) {}

  Ops& inner() const { return inner_; }

  Device device() const override { return inner_.device(); }
  const char* name() const override { return inner_.name(); }
  std::unique_ptr<OpTimer> make_timer() override { return inner_.make_timer(); }
  std::string device_fault() const override { return inner_.device_fault(); }
  std::string device_name() const override { return inner_.device_name(); }
  DType activation_dtype() const override { return inner_.activation_dtype(); }
  DType kv_cache_dtype() const override { return inner_.kv_cache_dtype(); }
  void set_kv_cache_bf16(bool on) override { inner_.set_kv_cache_bf16(on); }
  bool supports_weight_dtype(DType dtype) const override { return inner_.supports_weight_dtype(dtype); }
  bool device_memory(uint64_t& free_bytes, uint64_t& total_bytes) const override {
    return inner_.device_memory(free_bytes, total_bytes);
  }

  Buffer alloc(DType dtype, int64_t rows, int64_t cols) override { return inner_.alloc(dtype, rows, cols); }
  Buffer upload(const Tensor& host) override { return inner_.upload(host); }
  Buffer upload_matrix(const Tensor& host) override { return inner_.upload_matrix(host); }
  void to_host(const Tensor& src, void* dst) override {
    run("to_host", [&] { inner_.to_host(src, dst); });
  }
  void zero(const Tensor& t) override {
    run("zero", [&] { inner_.zero(t); });
  }
  void zero_rows(const Tensor& t, int64_t row) override {
    run("zero_rows", [&] { inner_.zero_rows(t, row); });
  }
  void copy_rows(const Tensor& dst, int64_t dst_row, const Tensor& src, int64_t src_row, int64_t n) override {
    run("copy_rows", [&] { inner_.copy_rows(dst, dst_row, src, src_row, n); });
  }
  void begin_step(const StepPlan& plan) override {
    run("begin_step", [&] { inner_.begin_step(plan); });
  }
  void embed(const Tensor& out, const Tensor& table, const StepPlan& plan, double scale) override {
    run("embed", [&] { inner_.embed(out, table, plan, scale); });
  }
  void rms_norm(const Tensor& out, const Tensor& x, const Tensor& w, float eps) override {
    run("rms_norm", [&] { inner_.rms_norm(out, x, w, eps); });
  }
  void head_rms_norm(const Tensor& x, const Tensor& w, int head_dim, float eps) override {
    run("head_rms_norm", [&] { inner_.head_rms_norm(x, w, head_dim, eps); });
  }
  void add(const Tensor& out, const Tensor& a, const Tensor& b) override {
    run("add", [&] { inner_.add(out, a, b); });
  }
  void embed_rms_norm(const Tensor& x, const Tensor& out, const Tensor& table, const StepPlan& plan, double scale,
                      const Tensor& w, float eps) override {
    run("embed_rms_norm", [&] { inner_.embed_rms_norm(x, out, table, plan, scale, w, eps); });
  }
  void add_rms_norm(const Tensor& residual, const Tensor& x, const Tensor& w, const Tensor& out, float eps) override {
    run("add_rms_norm", [&] { inner_.add_rms_norm(residual, x, w, out, eps); });
  }
  void mul_sigmoid(const Tensor& x, const Tensor& gate) override {
    run("mul_sigmoid", [&] { inner_.mul_sigmoid(x, gate); });
  }
  void add_mul_sigmoid(const Tensor& out, const Tensor& x, const Tensor& gate) override {
    run("add_mul_sigmoid", [&] { inner_.add_mul_sigmoid(out, x, gate); });
  }
  void silu_mul(const Tensor& out, const Tensor& gate, const Tensor& up) override {
    run("silu_mul", [&] { inner_.silu_mul(out, gate, up); });
  }
  void gelu_tanh_mul(const Tensor& out, const Tensor& gate, const Tensor& up) override {
    run("gelu_tanh_mul", [&] { inner_.gelu_tanh_mul(out, gate, up); });
  }
  void scale(const Tensor& x, double s) override {
    run("scale", [&] { inner_.scale(x, s); });
  }
  void slice_cols(const Tensor& out, const Tensor& x, int64_t begin) override {
    run("slice_cols", [&] { inner_.slice_cols(out, x, begin); });
  }
  void gather_rows(const Tensor& out, const Tensor& x, const std::vector<int32_t>& rows) override {
    run("gather_rows", [&] { inner_.gather_rows(out, x, rows); });
  }
  void argmax(const Tensor& ids, const Tensor& x) override {
    run("argmax", [&] { inner_.argmax(ids, x); });
  }
  void sample_candidates(const Tensor& ids, const Tensor& scaled, const Tensor& mass, const Tensor& x,
                         std::span<const float> temperatures) override {
    run("sample_candidates", [&] { inner_.sample_candidates(ids, scaled, mass, x, temperatures); });
  }
  void softcap(const Tensor& x, float cap) override {
    run("softcap", [&] { inner_.softcap(x, cap); });
  }
  void activation(const Tensor& x, Activation act) override {
    run("activation", [&] { inner_.activation(x, act); });
  }
  void mul(const Tensor& out, const Tensor& a, const Tensor& b) override {
    run("mul", [&] { inner_.mul(out, a, b); });
  }
  void group_rms_norm(const Tensor& out, const Tensor& x, const Tensor& w, int group, float eps) override {
    run("group_rms_norm", [&] { inner_.group_rms_norm(out, x, w, group, eps); });
  }
  void embed_rows(const Tensor& out, const std::vector<Tensor>& shards, const std::vector<int32_t>& ids) override {
    run("embed_rows", [&] { inner_.embed_rows(out, shards, ids); });
  }
  void token_windows(const Tensor& windows, const Tensor& context, int32_t eos, const StepPlan& plan) override {
    run("token_windows", [&] { inner_.token_windows(windows, context, eos, plan); });
  }
  void ngram_embed(const Tensor& out, const std::vector<Tensor>& shards, const Tensor& windows,
                   const Tensor& hash) override {
    run("ngram_embed", [&] { inner_.ngram_embed(out, shards, windows, hash); });
  }
  void streams_expand(const Tensor& out, const Tensor& y) override {
    run("streams_expand", [&] { inner_.streams_expand(out, y); });
  }
  void streams_mix(const Tensor& out, const Tensor& w, const Tensor& x) override {
    run("streams_mix", [&] { inner_.streams_mix(out, w, x); });
  }
  void streams_inject(const Tensor& x, const Tensor& y, const Tensor& w, bool accumulate) override {
    run("streams_inject", [&] { inner_.streams_inject(x, y, w, accumulate); });
  }
  void stream_gate(const Tensor& g, const Tensor& a, const Tensor& b) override {
    run("stream_gate", [&] { inner_.stream_gate(g, a, b); });
  }
  void gated_mlp(const Tensor& y, const Tensor& x, const Tensor& gate, const Tensor& up, const Tensor& down,
                 Activation act, const Tensor& g, const Tensor& u) override {
    run("gated_mlp", [&] { inner_.gated_mlp(y, x, gate, up, down, act, g, u); });
  }
  void matmul_gated(const Tensor& out, const Tensor& gate, const Tensor& up, const Tensor& w, Activation act) override {
    run("matmul_gated", [&] { inner_.matmul_gated(out, gate, up, w, act); });
  }
  void matmul_gated_and_route(const Tensor& out, const Tensor& gate, const Tensor& up, const Tensor& w, Activation act,
                              const Tensor& ids, const Tensor& weights, const Tensor& logits, int top_k,
                              bool norm_topk) override {
    run("matmul_gated_and_route",
        [&] { inner_.matmul_gated_and_route(out, gate, up, w, act, ids, weights, logits, top_k, norm_topk); });
  }
  void matmul_multi(const Tensor& x, std::span<const MatmulTarget> targets) override {
    run("matmul", [&] { inner_.matmul_multi(x, targets); });
  }
  void matmul(const Tensor& out, const Tensor& x, const Tensor& w) override {
    run("matmul", [&] { inner_.matmul(out, x, w); });
  }
  void rope(const Tensor& x, int head_dim, const RopeConfig& rope, const StepPlan& plan) override {
    run("rope", [&] { inner_.rope(x, head_dim, rope, plan); });
  }
  void norm_rope_attention(const Tensor& out, const Tensor& q, const Tensor& q_norm, const Tensor& k,
                           const Tensor& k_norm, const Tensor& v, const Tensor& gate, float eps,
                           const RopeConfig& rope_cfg, const KvLayerView& cache, const AttentionParams& p,
                           const StepPlan& plan) override {
    run("norm_rope_attention",
        [&] { inner_.norm_rope_attention(out, q, q_norm, k, k_norm, v, gate, eps, rope_cfg, cache, p, plan); });
  }
  void qk_norm_rope(const Tensor& q, const Tensor& q_norm, const Tensor& k, const Tensor& k_norm, int head_dim,
                    float eps, const RopeConfig& rope_cfg, const StepPlan& plan) override {
    run("qk_norm_rope", [&] { inner_.qk_norm_rope(q, q_norm, k, k_norm, head_dim, eps, rope_cfg, plan); });
  }
  void attention(const Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, const KvLayerView& cache,
                 const AttentionParams& p, const StepPlan& plan) override {
    run("attention", [&] { inner_.attention(out, q, k, v, cache, p, plan); });
  }
  void kv_write(const KvLayerView& cache, const Tensor& k, const Tensor& v, const StepPlan& plan) override {
    run("kv_write", [&] { inner_.kv_write(cache, k, v, plan); });
  }
  void qsa_select(const Tensor& select, const Tensor& q, const Tensor& k, const Tensor& k_norm,
                  const KvLayerView& cache, const QsaParams& p, const StepPlan& plan) override {
    run("qsa_select", [&] { inner_.qsa_select(select, q, k, k_norm, cache, p, plan); });
  }
  void conv1d_silu(const Tensor& x, const Tensor& w, const StateLayerView& state, int kernel,
                   const StepPlan& plan) override {
    run("conv1d_silu", [&] { inner_.conv1d_silu(x, w, state, kernel, plan); });
  }
  void gated_delta_rule(const Tensor& out, const Tensor& qkv, const Tensor& a, const Tensor& b, const Tensor& a_neg,
                        const Tensor& dt_bias, const StateLayerView& state, const DeltaNetConfig& cfg,
                        const StepPlan& plan) override {
    run("gated_delta_rule", [&] { inner_.gated_delta_rule(out, qkv, a, b, a_neg, dt_bias, state, cfg, plan); });
  }
  void dilated_conv1d_silu(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& state, int kernel,
                           int dilation, const StepPlan& plan) override {
    run("dilated_conv1d_silu", [&] { inner_.dilated_conv1d_silu(out, x, w, state, kernel, dilation, plan); });
  }
  void gated_rms_norm(const Tensor& x, const Tensor& z, const Tensor& w, int head_dim, float eps) override {
    run("gated_rms_norm", [&] { inner_.gated_rms_norm(x, z, w, head_dim, eps); });
  }
  void deltanet_recurrence(const Tensor& out, const Tensor& qkv, const Tensor& z, const Tensor& a, const Tensor& b,
                           const Tensor& conv_w, const Tensor& a_neg, const Tensor& dt_bias, const Tensor& norm,
                           float eps, const StateLayerView& state, const DeltaNetConfig& cfg,
                           const StepPlan& plan) override {
    run("deltanet_recurrence",
        [&] { inner_.deltanet_recurrence(out, qkv, z, a, b, conv_w, a_neg, dt_bias, norm, eps, state, cfg, plan); });
  }
  void moe_route(const Tensor& ids, const Tensor& weights, const Tensor& logits, int top_k, bool norm_topk) override {
    run("moe_route", [&] { inner_.moe_route(ids, weights, logits, top_k, norm_topk); });
  }
  void moe_experts(const Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                   const ExpertWeights& experts) override {
    run("moe_experts", [&] { inner_.moe_experts(out, x, ids, weights, experts); });
  }
  void moe_experts_shared(const Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                          const ExpertWeights& experts, const Tensor& shared, const Tensor& shared_gate) override {
    run("moe_experts_shared", [&] { inner_.moe_experts_shared(out, x, ids, weights, experts, shared, shared_gate); });
  }

 protected:
  // Runs op `op` (its name as the Ops method is called).
  virtual void run(const char* op, const std::function<void()>& fn) { fn(); }

  Ops& inner_;
};

}  // namespace kestrel
