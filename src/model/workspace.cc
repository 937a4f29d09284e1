#include "model/workspace.h"

#include <algorithm>

namespace kestrel {

void Workspace::reset() {
  if (chunks_.size() > 1) {
    size_t want = total_used_;
    chunks_.clear();
    chunks_.push_back(ops_.alloc(DType::kU8, 1, int64_t(want)));
  }
  used_ = 0;
  total_used_ = 0;
}

Tensor Workspace::take(DType dtype, int64_t rows, int64_t cols) {
  const size_t bytes = (size_t(rows) * size_t(cols) * dtype_size(dtype) + 255) / 256 * 256;
  if (chunks_.empty() || used_ + bytes > size_t(chunks_.back().view().cols)) {
    size_t last = chunks_.empty() ? 0 : size_t(chunks_.back().view().cols);
    size_t size = std::max<size_t>({bytes, 2 * last, size_t(1) << 20});
    chunks_.push_back(ops_.alloc(DType::kU8, 1, int64_t(size)));
    used_ = 0;
  }
  Tensor t = chunks_.back().view();
  t.data = static_cast<uint8_t*>(t.data) + used_;
  t.dtype = dtype;
  t.rows = rows;
  t.cols = cols;
  used_ += bytes;
  total_used_ += bytes;
  return t;
}

}  // namespace kestrel
