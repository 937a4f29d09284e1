// A measurement for docs/cuda.md's persistent-kernel plan: what a dependent step of a chain costs
// as a kernel boundary (a launch in a CUDA graph under programmatic dependent launch, as a decode
// step's kernels run) against a grid barrier inside one persistent kernel. GpuBench.StageChain
// prints it; nothing in a forward pass uses it.
#pragma once

#include <cstddef>

namespace kestrel::cuda {

struct StageChainTiming {
  double launches_us = 0;  // device time a stage, each stage its own launch in a graph
  double barrier_us = 0;   // device time a stage, the stages separated by a grid barrier
  int blocks = 0;          // blocks of either form (one a multiprocessor)
  bool same_result = false;  // both forms computed the same chain (the barrier ordered the stages)
};

// `stages` dependent stages over one block a multiprocessor, each streaming its own
// `bytes_per_stage` (a GEMV-like read; 0: no work but the dependency), timed with CUDA events over
// `reps` runs of the whole chain after warm-up runs. A barrier that waits too long (blocks not
// co-resident) gives up rather than hang, and the forms then differ: same_result false.
StageChainTiming time_stage_chain(int stages, size_t bytes_per_stage, int reps);

}  // namespace kestrel::cuda
