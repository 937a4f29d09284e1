// ProfilingOps: a backend wrapped so that every op is timed on the backend's
// own clock (device events on the GPU) and attributed to its name and to the
// phase the model code marked (PhaseScope) — `kestrel bench --profile`. The
// model is loaded through the wrapper; allocations and uploads pass straight
// through.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "ops/ops.h"

namespace kestrel {

struct OpProfile {
  struct Row {
    double seconds = 0;
    int64_t calls = 0;
  };
  std::map<std::string, Row> by_op;
  Row by_phase[kNumPhases];
  double span = 0;    // first op start to last op end, over every profiled step
  double in_ops = 0;  // the sum of the ops' own times; span - in_ops is time between ops
  int64_t steps = 0;
};

class ProfilingOps final : public Ops {
 public:
  explicit ProfilingOps(Ops& inner) : inner_(inner), timer_(inner.make_timer()) {}

  Ops& inner() const { return inner_; }
  // Starts or stops recording (recording adds a clock mark per op).
  void set_recording(bool on) { recording_ = on; }
  // Folds the marks recorded so far into the profile (waits for the device).
  void collect();
  const OpProfile& profile() const { return profile_; }
  void clear() { profile_ = {}; }

  Device device() const override { return inner_.device(); }
  const char* name() const override { return inner_.name(); }
  std::unique_ptr<OpTimer> make_timer() override { return inner_.make_timer(); }
  bool device_memory(uint64_t& free_bytes, uint64_t& total_bytes) const override {
    return inner_.device_memory(free_bytes, total_bytes);
  }

  Buffer alloc(DType dtype, int64_t rows, int64_t cols) override { return inner_.alloc(dtype, rows, cols); }
  Buffer upload(const Tensor& host) override { return inner_.upload(host); }
  void to_host(const Tensor& src, void* dst) override {
    timed("to_host", [&] { inner_.to_host(src, dst); });
  }
  void zero(const Tensor& t) override {
    timed("zero", [&] { inner_.zero(t); });
  }
  void zero_rows(const Tensor& t, int64_t row) override {
    timed("zero_rows", [&] { inner_.zero_rows(t, row); });
  }
  void copy_rows(const Tensor& dst, int64_t dst_row, const Tensor& src, int64_t src_row, int64_t n) override {
    timed("copy_rows", [&] { inner_.copy_rows(dst, dst_row, src, src_row, n); });
  }
  void begin_step(const StepPlan& plan) override {
    timed("begin_step", [&] { inner_.begin_step(plan); });
  }
  void embed(const Tensor& out, const Tensor& table, const StepPlan& plan, float scale) override {
    timed("embed", [&] { inner_.embed(out, table, plan, scale); });
  }
  void rms_norm(const Tensor& out, const Tensor& x, const Tensor& w, float eps) override {
    timed("rms_norm", [&] { inner_.rms_norm(out, x, w, eps); });
  }
  void head_rms_norm(const Tensor& x, const Tensor& w, int head_dim, float eps) override {
    timed("head_rms_norm", [&] { inner_.head_rms_norm(x, w, head_dim, eps); });
  }
  void add(const Tensor& out, const Tensor& a, const Tensor& b) override {
    timed("add", [&] { inner_.add(out, a, b); });
  }
  void mul_sigmoid(const Tensor& x, const Tensor& gate) override {
    timed("mul_sigmoid", [&] { inner_.mul_sigmoid(x, gate); });
  }
  void silu_mul(const Tensor& out, const Tensor& gate, const Tensor& up) override {
    timed("silu_mul", [&] { inner_.silu_mul(out, gate, up); });
  }
  void gelu_tanh_mul(const Tensor& out, const Tensor& gate, const Tensor& up) override {
    timed("gelu_tanh_mul", [&] { inner_.gelu_tanh_mul(out, gate, up); });
  }
  void scale(const Tensor& x, float s) override {
    timed("scale", [&] { inner_.scale(x, s); });
  }
  void slice_cols(const Tensor& out, const Tensor& x, int64_t begin) override {
    timed("slice_cols", [&] { inner_.slice_cols(out, x, begin); });
  }
  void gather_rows(const Tensor& out, const Tensor& x, const std::vector<int32_t>& rows) override {
    timed("gather_rows", [&] { inner_.gather_rows(out, x, rows); });
  }
  void argmax(const Tensor& ids, const Tensor& x) override {
    timed("argmax", [&] { inner_.argmax(ids, x); });
  }
  void softcap(const Tensor& x, float cap) override {
    timed("softcap", [&] { inner_.softcap(x, cap); });
  }
  void activation(const Tensor& x, Activation act) override {
    timed("activation", [&] { inner_.activation(x, act); });
  }
  void mul(const Tensor& out, const Tensor& a, const Tensor& b) override {
    timed("mul", [&] { inner_.mul(out, a, b); });
  }
  void group_rms_norm(const Tensor& out, const Tensor& x, const Tensor& w, int group, float eps) override {
    timed("group_rms_norm", [&] { inner_.group_rms_norm(out, x, w, group, eps); });
  }
  void embed_rows(const Tensor& out, const std::vector<Tensor>& shards, const std::vector<int32_t>& ids) override {
    timed("embed_rows", [&] { inner_.embed_rows(out, shards, ids); });
  }
  void streams_expand(const Tensor& out, const Tensor& y) override {
    timed("streams_expand", [&] { inner_.streams_expand(out, y); });
  }
  void streams_mix(const Tensor& out, const Tensor& w, const Tensor& x) override {
    timed("streams_mix", [&] { inner_.streams_mix(out, w, x); });
  }
  void streams_inject(const Tensor& x, const Tensor& y, const Tensor& w, bool accumulate) override {
    timed("streams_inject", [&] { inner_.streams_inject(x, y, w, accumulate); });
  }
  void stream_gate(const Tensor& g, const Tensor& a, const Tensor& b) override {
    timed("stream_gate", [&] { inner_.stream_gate(g, a, b); });
  }
  void matmul(const Tensor& out, const Tensor& x, const Tensor& w) override {
    timed("matmul", [&] { inner_.matmul(out, x, w); });
  }
  void rope(const Tensor& x, int head_dim, const RopeConfig& rope, const StepPlan& plan) override {
    timed("rope", [&] { inner_.rope(x, head_dim, rope, plan); });
  }
  void attention(const Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, const KvLayerView& cache,
                 const AttentionParams& p, const StepPlan& plan) override {
    timed("attention", [&] { inner_.attention(out, q, k, v, cache, p, plan); });
  }
  void kv_write(const KvLayerView& cache, const Tensor& k, const Tensor& v, const StepPlan& plan) override {
    timed("kv_write", [&] { inner_.kv_write(cache, k, v, plan); });
  }
  void qsa_select(const Tensor& select, const Tensor& q, const Tensor& k, const Tensor& k_norm,
                  const KvLayerView& cache, const QsaParams& p, const StepPlan& plan) override {
    timed("qsa_select", [&] { inner_.qsa_select(select, q, k, k_norm, cache, p, plan); });
  }
  void conv1d_silu(const Tensor& x, const Tensor& w, const StateLayerView& state, int kernel,
                   const StepPlan& plan) override {
    timed("conv1d_silu", [&] { inner_.conv1d_silu(x, w, state, kernel, plan); });
  }
  void gated_delta_rule(const Tensor& out, const Tensor& qkv, const Tensor& a, const Tensor& b, const Tensor& a_neg,
                        const Tensor& dt_bias, const StateLayerView& state, const DeltaNetConfig& cfg,
                        const StepPlan& plan) override {
    timed("gated_delta_rule", [&] { inner_.gated_delta_rule(out, qkv, a, b, a_neg, dt_bias, state, cfg, plan); });
  }
  void dilated_conv1d_silu(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& state, int kernel,
                           int dilation, const StepPlan& plan) override {
    timed("dilated_conv1d_silu", [&] { inner_.dilated_conv1d_silu(out, x, w, state, kernel, dilation, plan); });
  }
  void gated_rms_norm(const Tensor& x, const Tensor& z, const Tensor& w, int head_dim, float eps) override {
    timed("gated_rms_norm", [&] { inner_.gated_rms_norm(x, z, w, head_dim, eps); });
  }
  void moe_route(const Tensor& ids, const Tensor& weights, const Tensor& logits, int top_k, bool norm_topk) override {
    timed("moe_route", [&] { inner_.moe_route(ids, weights, logits, top_k, norm_topk); });
  }
  void moe_experts(const Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                   const ExpertWeights& experts) override {
    timed("moe_experts", [&] { inner_.moe_experts(out, x, ids, weights, experts); });
  }

 private:
  struct Record {
    const char* op;
    Phase phase;
    int begin, end;
  };
  template <typename F>
  void timed(const char* op, F&& f) {
    if (!recording_) {
      f();
      return;
    }
    // embeddings are their own phase wherever the model calls them
    const Phase ph = (op[0] == 'e' && (std::string_view(op) == "embed" || std::string_view(op) == "embed_rows"))
                         ? Phase::kEmbed
                         : phase_;
    const int b = timer_->mark();
    f();
    records_.push_back({op, ph, b, timer_->mark()});
  }

  Ops& inner_;
  std::unique_ptr<OpTimer> timer_;
  bool recording_ = false;
  std::vector<Record> records_;
  OpProfile profile_;
};

}  // namespace kestrel
