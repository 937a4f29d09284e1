// Workspace: per-step scratch activations from a bump arena that is rewound each step, so the
// steady-state decode loop allocates nothing.
#pragma once

#include <vector>

#include "ops/ops.h"

namespace kestrel {

class Workspace {
 public:
  explicit Workspace(Ops& ops) : ops_(ops) {}
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  // Rewinds; if the last step spilled into several chunks, they become one large chunk.
  void reset();
  // Scratch [rows, cols] of dtype, 256-byte aligned, contents undefined.
  Tensor take(DType dtype, int64_t rows, int64_t cols);
  // Activations: the backend's activation dtype (F32, or F64 in the CPU oracle's float64 mode).
  Tensor take(int64_t rows, int64_t cols) { return take(ops_.activation_dtype(), rows, cols); }

 private:
  Ops& ops_;
  std::vector<Buffer> chunks_;
  size_t used_ = 0;        // bytes used in the last chunk
  size_t total_used_ = 0;  // bytes taken since reset, over all chunks
};

}  // namespace kestrel
