// ProfilingOps: a backend wrapped so that every op is timed on the backend's own clock (device
// events on the GPU) and attributed to its name and to the phase the model code marked
// (PhaseScope) — `kestrel bench --profile`. The model is loaded through the wrapper.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "ops/forwarding_ops.h"

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

class ProfilingOps final : public ForwardingOps {
 public:
  explicit ProfilingOps(Ops& inner) : ForwardingOps(inner), timer_(inner.make_timer()) {}

  // Starts or stops recording (recording adds a clock mark per op).
  void set_recording(bool on) { recording_ = on; }
  // Folds the marks recorded so far into the profile (waits for the device).
  void collect();
  const OpProfile& profile() const { return profile_; }
  void clear() { profile_ = {}; }

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
    // embeddings are their own phase wherever the model calls them
    const Phase ph = name == "embed" || name == "embed_rows" ? Phase::kEmbed : phase_;
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
  bool recording_ = false;
  std::vector<Record> records_;
  OpProfile profile_;
};

}  // namespace kestrel
