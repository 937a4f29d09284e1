// ProfilingOps: a backend wrapped so that every op is timed on the backend's own clock (device
// events on the GPU) and attributed to its name and to the phase the model code marked
// (PhaseScope) — `kestrel bench --profile`. The model is loaded through the wrapper.
// Step graphs (ops/step_graphs.h) pass through to the backend while nothing is recorded, so
// bench's timed runs replay graphs; a recorded step runs eagerly, every op timed.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "core/error.h"
#include "ops/forwarding_ops.h"
#include "ops/step_graphs.h"

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
  // Floating-point operations of the matrix products (2 per multiply-add of matmul, matmul_multi,
  // matmul_gated (and matmul_gated_and_route's product) and the experts of moe_experts /
  // moe_experts_shared, as their shapes ask, whatever the weights' storage), over the recorded steps.
  double matmul_flops = 0;
};

class ProfilingOps final : public ForwardingOps, public StepGraphs {
 public:
  explicit ProfilingOps(Ops& inner)
      : ForwardingOps(inner), timer_(inner.make_timer()), graphs_(dynamic_cast<StepGraphs*>(&inner)),
        inner_name_(inner.name()) {}

  std::string graphs_off_reason() const override {
    if (!graphs_) return cat("the ", inner_name_, " backend records no step graphs");
    if (recording_) return "profiling (a recorded step times every op)";
    return graphs_->graphs_off_reason();
  }
  bool replay_step(const StepGraphKey& key, const StepPlan& plan) override {
    return graphs_off_reason().empty() && graphs_->replay_step(key, plan);
  }
  void begin_capture(const StepGraphKey& key, const StepPlan& plan) override {
    KCHECK_MSG(graphs_off_reason().empty(), "step graph capture while ", graphs_off_reason());
    graphs_->begin_capture(key, plan);
  }
  std::string end_capture() override { return graphs_->end_capture(); }
  void abort_capture() override {
    if (graphs_) graphs_->abort_capture();
  }
  void drop_graphs(const void* owner) override {
    if (graphs_) graphs_->drop_graphs(owner);
  }

  // Starts or stops recording (recording adds a clock mark per op).
  void set_recording(bool on) { recording_ = on; }
  // Folds the marks recorded so far into the profile (waits for the device).
  void collect();
  const OpProfile& profile() const { return profile_; }
  void clear() { profile_ = {}; }

  // The matrix products also count their floating-point operations while recording.
  void matmul(const Tensor& out, const Tensor& x, const Tensor& w) override {
    if (recording_) profile_.matmul_flops += 2.0 * double(x.rows) * double(out.cols) * double(x.cols);
    ForwardingOps::matmul(out, x, w);
  }
  void matmul_multi(const Tensor& x, std::span<const MatmulTarget> targets) override {
    if (recording_)
      for (const MatmulTarget& t : targets) profile_.matmul_flops += 2.0 * double(x.rows) * double(t.out.cols) * double(x.cols);
    ForwardingOps::matmul_multi(x, targets);
  }
  void matmul_gated(const Tensor& out, const Tensor& gate, const Tensor& up, const Tensor& w, Activation act) override {
    if (recording_) profile_.matmul_flops += 2.0 * double(gate.rows) * double(w.rows) * double(gate.cols);
    ForwardingOps::matmul_gated(out, gate, up, w, act);
  }
  void gated_mlp(const Tensor& y, const Tensor& x, const Tensor& gate, const Tensor& up, const Tensor& down,
                 Activation act, const Tensor& g, const Tensor& u) override {
    if (recording_)
      profile_.matmul_flops += 2.0 * double(x.rows) * (2.0 * double(gate.rows) * double(x.cols) +
                                                       double(down.rows) * double(down.cols));
    ForwardingOps::gated_mlp(y, x, gate, up, down, act, g, u);
  }
  void matmul_gated_and_route(const Tensor& out, const Tensor& gate, const Tensor& up, const Tensor& w, Activation act,
                              const Tensor& ids, const Tensor& weights, const Tensor& logits, int top_k,
                              bool norm_topk) override {
    if (recording_) profile_.matmul_flops += 2.0 * double(gate.rows) * double(w.rows) * double(gate.cols);
    ForwardingOps::matmul_gated_and_route(out, gate, up, w, act, ids, weights, logits, top_k, norm_topk);
  }
  void moe_experts(const Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                   const ExpertWeights& experts) override {
    count_experts(ids, experts);
    ForwardingOps::moe_experts(out, x, ids, weights, experts);
  }
  void moe_experts_shared(const Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                          const ExpertWeights& experts, const Tensor& shared, const Tensor& shared_gate) override {
    count_experts(ids, experts);
    ForwardingOps::moe_experts_shared(out, x, ids, weights, experts, shared, shared_gate);
  }

 private:
  // Each (row, expert) pair runs one expert's gate, up and down projections.
  void count_experts(const Tensor& ids, const ExpertWeights& experts) {
    if (!recording_) return;
    double per_pair = 0;
    for (const std::vector<Tensor>* m : {&experts.gate, &experts.up, &experts.down})
      if (!m->empty()) per_pair += 2.0 * double(m->front().numel());
    profile_.matmul_flops += double(ids.numel()) * per_pair;
  }

 protected:
  void run(const char* op, const std::function<void()>& fn) override {
    if (!recording_) {
      fn();
      return;
    }
    const std::string_view name(op);
    // A long recording (a server) is folded in between steps, so its memory stays bounded; the
    // gap before this step is the one thing such a fold does not count.
    if (name == "begin_step" && records_.size() > kFoldRecords) collect();
    // embeddings are their own phase wherever the model calls them (with the first layer's norm
    // where one launch does both)
    const Phase ph = name == "embed" || name == "embed_rms_norm" || name == "embed_rows" || name == "token_windows" ||
                             name == "ngram_embed"
                         ? Phase::kEmbed
                         : phase_;
    const int b = timer_->mark();
    fn();
    records_.push_back({op, ph, b, timer_->mark()});
  }

 private:
  static constexpr size_t kFoldRecords = 200000;
  struct Record {
    const char* op;
    Phase phase;
    int begin, end;
  };

  std::unique_ptr<OpTimer> timer_;
  StepGraphs* graphs_;  // the backend's, or null
  const char* inner_name_;
  bool recording_ = false;
  std::vector<Record> records_;
  OpProfile profile_;
};

}  // namespace kestrel
