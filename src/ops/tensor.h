// Tensor: a non-owning 2-D row-major view of device or host memory; Buffer owns one.
//
// Activations are [rows = tokens, cols = features]; weight matrices are [out, in] as the
// checkpoints store them; vectors are [1, n]. Ops take views; only Buffers own memory.
#pragma once

#include <cstdint>
#include <functional>

#include "core/dtype.h"
#include "core/error.h"

namespace kestrel {

enum class Device : uint8_t { kCpu, kCuda };

struct Tensor {
  DType dtype = DType::kF32;
  Device device = Device::kCpu;
  void* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;

  bool empty() const { return data == nullptr; }
  int64_t numel() const { return rows * cols; }
  size_t nbytes() const { return size_t(rows) * row_bytes(); }
  size_t row_bytes() const { return dtype_row_bytes(dtype, cols); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }
  float* f32() const {
    KCHECK(dtype == DType::kF32);
    return static_cast<float*>(data);
  }
  // Rows [begin, begin + n) of this view.
  // A T32-layout matrix's rows (kQ4_K_T32, kQ8_0_T32, kQ6_K_T32) are laid out in groups of 32
  // (the last one partial): a slice must keep whole groups, starting at a multiple of 32 rows and
  // ending at one or at the last row.
  Tensor rows_slice(int64_t begin, int64_t n) const {
    KCHECK(begin >= 0 && n >= 0 && begin + n <= rows);
    KCHECK_MSG(!dtype_is_t32_layout(dtype) || (begin % 32 == 0 && (n % 32 == 0 || begin + n == rows)),
               "rows_slice: rows [", begin, ", ", begin + n, ") of a ", dtype_name(dtype), " matrix of ", rows,
               " rows split one of its 32-row groups");
    Tensor t = *this;
    t.data = static_cast<uint8_t*>(data) + size_t(begin) * row_bytes();
    t.rows = n;
    return t;
  }
  // The same memory seen as [rows', cols'] with rows' * cols' == rows * cols (plain dtypes only).
  Tensor reshaped(int64_t r, int64_t c) const {
    KCHECK(r * c == rows * cols && !dtype_is_quantized(dtype));
    Tensor t = *this;
    t.rows = r;
    t.cols = c;
    return t;
  }
};

// Owning memory on one device. Move-only; frees through the deleter it was made with.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Tensor view, std::function<void(void*)> deleter) : view_(view), deleter_(std::move(deleter)) {}
  Buffer(Buffer&& o) noexcept : view_(o.view_), deleter_(std::move(o.deleter_)) { o.view_ = {}; }
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      reset();
      view_ = o.view_;
      deleter_ = std::move(o.deleter_);
      o.view_ = {};
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { reset(); }

  const Tensor& view() const { return view_; }
  operator const Tensor&() const { return view_; }
  bool empty() const { return view_.data == nullptr; }

  void reset() {
    if (view_.data && deleter_) deleter_(view_.data);
    view_ = {};
  }

 private:
  Tensor view_;
  std::function<void(void*)> deleter_;
};

// Host buffer helper (64-byte aligned, zero-filled).
Buffer host_buffer(DType dtype, int64_t rows, int64_t cols);

}  // namespace kestrel
