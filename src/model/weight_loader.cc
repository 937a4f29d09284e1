#include "model/weight_loader.h"

#include <cstring>
#include <sstream>

#include "backend/cpu/kernels.h"
#include "core/error.h"

namespace kestrel {
namespace {

std::string shape_str(const std::vector<int64_t>& shape) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  s << "]";
  return s.str();
}

bool is_float(DType d) { return d == DType::kBF16 || d == DType::kF16 || d == DType::kF32; }

}  // namespace

WeightLoader::WeightLoader(const Checkpoint& ckpt, Ops& ops, std::string prefix)
    : ckpt_(ckpt), ops_(ops), prefix_(std::move(prefix)) {}

bool WeightLoader::has(const std::string& name) const { return ckpt_.find(prefix_ + name) != nullptr; }
bool WeightLoader::has_raw(const std::string& full_name) const { return ckpt_.find(full_name) != nullptr; }

const TensorInfo& WeightLoader::lookup(const std::string& full, const std::vector<int64_t>& shape) {
  const TensorInfo* info = ckpt_.find(full);
  if (!info) bad_input(ckpt_.dir(), ": tensor '", full, "' is missing from the checkpoint (expected shape ",
                       shape_str(shape), ")");
  if (!is_float(info->dtype))
    bad_input(*info->file, ": tensor '", full, "' has dtype ", dtype_name(info->dtype), ", expected BF16, F16 or F32");
  if (info->shape != shape)
    bad_input(*info->file, ": tensor '", full, "' has shape ", shape_str(info->shape), ", expected ", shape_str(shape));
  if (used_.insert(full).second) {
    n_params_ += uint64_t(info->numel());
    n_bytes_ += info->nbytes;
  }
  return *info;
}

// The tensor's bytes as a host view the kernels may read element-wise. safetensors does not
// require tensors to be aligned to their element size (files from writers that do not pad the
// header are valid), and the kernels' typed loads need it: such a tensor is copied once.
Tensor WeightLoader::host_view(const TensorInfo& info, int64_t rows, int64_t cols) {
  Tensor host{.dtype = info.dtype, .device = Device::kCpu, .data = const_cast<uint8_t*>(info.data),
              .rows = rows, .cols = cols};
  if (reinterpret_cast<uintptr_t>(info.data) % dtype_size(info.dtype) == 0) return host;
  Buffer copy = host_buffer(info.dtype, rows, cols);
  std::memcpy(copy.view().data, info.data, info.nbytes);
  return keep(std::move(copy));
}

Tensor WeightLoader::matrix(const std::string& name, int64_t rows, int64_t cols, bool raw) {
  const TensorInfo& info = lookup(raw ? name : prefix_ + name, {rows, cols});
  Tensor host = host_view(info, rows, cols);
  if (ops_.device() == Device::kCpu) return host;
  return keep(ops_.upload(host));
}

std::vector<int64_t> WeightLoader::i64(const std::string& name, int64_t n) {
  const std::string full = prefix_ + name;
  const TensorInfo* info = ckpt_.find(full);
  if (!info) bad_input(ckpt_.dir(), ": tensor '", full, "' is missing from the checkpoint");
  if (info->dtype != DType::kI64 || info->numel() != n)
    bad_input(*info->file, ": tensor '", full, "' must be I64 with ", n, " elements");
  std::vector<int64_t> out(static_cast<size_t>(n));
  std::memcpy(out.data(), info->data, size_t(n) * 8);
  return out;
}

float WeightLoader::scalar(const std::string& name) {
  const TensorInfo& info = lookup(prefix_ + name, {1});
  Tensor src{.dtype = info.dtype, .device = Device::kCpu, .data = const_cast<uint8_t*>(info.data), .rows = 1, .cols = 1};
  float v = 0.0f;
  cpu::load_row(src, 0, &v);
  return v;
}

Tensor WeightLoader::stacked(const std::string& name, int64_t n, int64_t rows, int64_t cols) {
  const TensorInfo& info = lookup(prefix_ + name, {n, rows, cols});
  Tensor host{.dtype = info.dtype, .device = Device::kCpu, .data = const_cast<uint8_t*>(info.data),
              .rows = n * rows, .cols = cols};
  if (ops_.device() == Device::kCpu) return host;
  return keep(ops_.upload(host));
}

Tensor WeightLoader::f32(const std::string& name, const std::vector<int64_t>& shape,
                         const std::function<float(float)>& fn, bool as_matrix) {
  const TensorInfo& info = lookup(prefix_ + name, shape);
  const int64_t n = info.numel();
  const int64_t rows = as_matrix ? shape[0] : 1;
  Buffer host = host_buffer(DType::kF32, rows, n / rows);
  Buffer aligned;  // a copy only where the mapped bytes are misaligned
  Tensor src{.dtype = info.dtype, .device = Device::kCpu, .data = const_cast<uint8_t*>(info.data), .rows = 1, .cols = n};
  if (reinterpret_cast<uintptr_t>(info.data) % dtype_size(info.dtype) != 0) {
    aligned = host_buffer(info.dtype, 1, n);
    std::memcpy(aligned.view().data, info.data, info.nbytes);
    src.data = aligned.view().data;
  }
  cpu::load_row(src, 0, host.view().f32());
  if (fn) {
    float* p = host.view().f32();
    for (int64_t i = 0; i < n; ++i) p[i] = fn(p[i]);
  }
  if (ops_.device() == Device::kCpu) return keep(std::move(host));
  return keep(ops_.upload(host.view()));
}

Tensor WeightLoader::gather_rows(const std::string& name, int64_t src_rows, int64_t cols,
                                 const std::vector<int64_t>& rows) {
  const TensorInfo& info = lookup(prefix_ + name, {src_rows, cols});
  const size_t row_bytes = size_t(cols) * dtype_size(info.dtype);
  Buffer host = host_buffer(info.dtype, int64_t(rows.size()), cols);
  for (size_t i = 0; i < rows.size(); ++i) {
    KCHECK(rows[i] >= 0 && rows[i] < src_rows);
    std::memcpy(static_cast<uint8_t*>(host.view().data) + i * row_bytes, info.data + size_t(rows[i]) * row_bytes,
                row_bytes);
  }
  if (ops_.device() == Device::kCpu) return keep(std::move(host));
  return keep(ops_.upload(host.view()));
}

Tensor WeightLoader::keep(Buffer buffer) {
  owned_.push_back(std::move(buffer));
  return owned_.back().view();
}

}  // namespace kestrel
