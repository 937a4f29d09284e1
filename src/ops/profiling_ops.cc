#include "ops/profiling_ops.h"

#include <chrono>

namespace kestrel {
namespace {

// The CPU backend's ops return when their work is done: the host clock times them.
class HostTimer final : public OpTimer {
 public:
  int mark() override {
    marks_.push_back(std::chrono::steady_clock::now());
    return int(marks_.size()) - 1;
  }
  std::vector<double> take() override {
    std::vector<double> t(marks_.size());
    for (size_t i = 0; i < marks_.size(); ++i) t[i] = std::chrono::duration<double>(marks_[i] - marks_[0]).count();
    marks_.clear();
    return t;
  }

 private:
  std::vector<std::chrono::steady_clock::time_point> marks_;
};

}  // namespace

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::kEmbed: return "embedding";
    case Phase::kAttention: return "attention";
    case Phase::kDeltaNet: return "deltanet";
    case Phase::kFfn: return "mlp/moe";
    case Phase::kHead: return "head";
    case Phase::kOther: return "other";
  }
  return "?";
}

std::unique_ptr<OpTimer> Ops::make_timer() { return std::make_unique<HostTimer>(); }

void Ops::to_host_f32(const Tensor& src, float* dst) {
  if (src.dtype == DType::kF32) {
    to_host(src, dst);
    return;
  }
  KCHECK_MSG(src.dtype == DType::kF64, "to_host_f32: activations of dtype ", dtype_name(src.dtype));
  std::vector<double> wide(size_t(src.numel()));
  to_host(src, wide.data());
  for (size_t i = 0; i < wide.size(); ++i) dst[i] = float(wide[i]);
}

void ProfilingOps::collect() {
  if (records_.empty()) return;
  const std::vector<double> t = timer_->take();
  double first = t[size_t(records_.front().begin)], last = first;
  for (const Record& r : records_) {
    const double s = t[size_t(r.end)] - t[size_t(r.begin)];
    auto& op = profile_.by_op[r.op];
    op.seconds += s;
    ++op.calls;
    auto& ph = profile_.by_phase[int(r.phase)];
    ph.seconds += s;
    ++ph.calls;
    profile_.in_ops += s;
    if (std::string_view(r.op) == "begin_step") ++profile_.steps;
    last = std::max(last, t[size_t(r.end)]);
  }
  profile_.span += last - first;
  records_.clear();
}

}  // namespace kestrel
