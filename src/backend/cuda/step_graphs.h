// The CUDA side of step graphs (ops/step_graphs.h): the plan's device arrays at addresses fixed by
// the step's shape, and the recorded graphs by key. CudaOps owns one of each.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/cuda/context.h"
#include "ops/step_graphs.h"

namespace kestrel::cuda {

// begin_step's device copy of a StepPlan. Layout (int32 units) in one device buffer:
//   max_position (+3 pad) | tokens T | positions T | row_seq T | seqs 6*S | logit_rows R | block_tables
// so every array's address depends on (T, S, R) alone; only the block tables (last) vary in length
// within a shape. The host side is pinned staging, copied with one async copy per step; the next
// upload first waits for that copy. Growing either buffer advances the graph epoch.
class PlanBuffer {
 public:
  explicit PlanBuffer(GraphGuard& guard) : guard_(guard) {}
  PlanBuffer(const PlanBuffer&) = delete;
  PlanBuffer& operator=(const PlanBuffer&) = delete;
  ~PlanBuffer();

  // Stages and copies `plan` on `stream`; returns the device view of it.
  StepView upload(const StepPlan& plan, cudaStream_t stream);
  // The logit rows of the last upload (host copy), so gather_rows can use the device copy.
  const std::vector<int32_t>& logit_rows() const { return logit_rows_; }

 private:
  GraphGuard& guard_;
  int32_t* host_ = nullptr;  // pinned
  void* dev_ = nullptr;
  size_t cap_ = 0;  // int32 elements in each
  cudaEvent_t copied_ = nullptr;
  std::vector<int32_t> logit_rows_;
};

// Recorded graphs (instantiated), each with the step shape and memory epoch it was recorded at.
class GraphCache {
 public:
  GraphCache() = default;
  GraphCache(const GraphCache&) = delete;
  GraphCache& operator=(const GraphCache&) = delete;
  ~GraphCache();

  struct Shape {
    int32_t rows = 0, seqs = 0, logit_rows = 0;
    bool operator==(const Shape&) const = default;
  };
  // The graph for `key` if it has this shape and epoch and covers a step whose largest position
  // is max_position; a stale one (older epoch, other shape, positions past its limit) is dropped.
  cudaGraphExec_t find(const StepGraphKey& key, const Shape& shape, uint64_t epoch, int32_t max_position);
  // Keeps `exec` for `key` (replacing any graph it had), valid for positions <= position_limit.
  void add(const StepGraphKey& key, const Shape& shape, uint64_t epoch, int32_t position_limit, cudaGraphExec_t exec);
  void drop(const void* owner);
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    StepGraphKey key;
    Shape shape;
    uint64_t epoch = 0;
    int32_t position_limit = 0;
    cudaGraphExec_t exec = nullptr;
  };
  std::vector<Entry> entries_;
};

}  // namespace kestrel::cuda
