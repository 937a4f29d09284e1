// StepGraphs: recording the device work of one forward step once and replaying it (CUDA graphs),
// so a decode step costs one launch instead of one per op. A backend that can do this (CudaOps)
// implements it beside Ops; the Runner finds it with dynamic_cast, so a wrapper such as
// ProfilingOps (which must see every op) turns graphs off simply by not being one.
//
// What a graph holds: every kernel with its arguments as they were when it was recorded — the
// device addresses of weights, activations (the model's Workspace), scratch, the KV cache and the
// plan's device arrays, and every launch size. Replaying is therefore only correct when (a) the
// plan has the recorded shape (rows, sequences, logit rows: the key's `rows` for a decode step)
// and (b) no device memory was freed or moved since the recording. (a) is the caller's promise
// (it keys graphs by the step's shape); (b) the backend checks with a memory epoch that every
// free, scratch growth and plan-buffer growth advances: a replay of a graph older than the epoch
// is refused and the graph dropped. Everything else a step needs from the host (token ids,
// positions, sequences, block tables, logit rows, the longest position that sizes split-KV
// attention) travels in the plan's device arrays, uploaded before each replay at fixed addresses.
//
// While a capture is open, an op that would need the host inside the step (growing scratch,
// uploading a host index array, a device synchronize, deterministic attention's host-chosen
// splits) throws Error(kUnsupported) naming itself; the caller then abandons the capture
// (abort_capture), runs the step eagerly and reports why (never a wrong graph).
#pragma once

#include <cstdint>
#include <string>

#include "ops/step_plan.h"

namespace kestrel {

struct StepGraphKey {
  const void* owner = nullptr;  // whose cache and logits the graph writes (the Runner)
  int32_t rows = 0;             // the step's rows (= sequences = logit rows for a decode step)
  bool operator==(const StepGraphKey&) const = default;
};

class StepGraphs {
 public:
  virtual ~StepGraphs() = default;

  // Empty when graphs may be used; else why not (switched off, deterministic mode, ...).
  virtual std::string graphs_off_reason() const = 0;
  // Uploads `plan` (as Ops::begin_step does) and launches the graph recorded for `key`. False,
  // with nothing queued, when there is none or it is older than the memory epoch (it is dropped).
  virtual bool replay_step(const StepGraphKey& key, const StepPlan& plan) = 0;
  // Uploads `plan` and opens a capture: the ops queued until end_capture are recorded, not run;
  // the forward pass's own begin_step(plan) then only checks that it sees this plan.
  virtual void begin_capture(const StepGraphKey& key, const StepPlan& plan) = 0;
  // Closes the capture, keeps the graph for `key` and launches it once (the step then ran).
  // Returns empty on success; else why there is no graph (nothing ran: run the step eagerly).
  virtual std::string end_capture() = 0;
  // Closes a capture that an exception interrupted, discarding what was recorded.
  virtual void abort_capture() = 0;
  // Drops every graph recorded for `owner` (a Runner going away).
  virtual void drop_graphs(const void* owner) = 0;
};

}  // namespace kestrel
