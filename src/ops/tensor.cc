#include "ops/tensor.h"

#include <cstdlib>
#include <cstring>
#include <new>

namespace kestrel {

Buffer host_buffer(DType dtype, int64_t rows, int64_t cols) {
  KCHECK(rows >= 0 && cols >= 0);
  size_t bytes = size_t(rows) * dtype_row_bytes(dtype, cols);
  size_t rounded = (bytes + 63) / 64 * 64;
  void* p = rounded ? std::aligned_alloc(64, rounded) : nullptr;
  if (rounded && !p) throw std::bad_alloc();
  if (p) std::memset(p, 0, rounded);
  Tensor t{.dtype = dtype, .device = Device::kCpu, .data = p, .rows = rows, .cols = cols};
  return Buffer(t, [](void* q) { std::free(q); });
}

}  // namespace kestrel
