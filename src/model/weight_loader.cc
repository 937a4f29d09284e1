#include "model/weight_loader.h"

#include <cstdlib>
#include <cstring>
#include <optional>
#include <sstream>

#include "backend/cpu/kernels.h"
#include "core/error.h"
#include "quant/quant.h"

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

// A block format kestrel can dequantize (and so widen, or compute with where a backend can).
bool is_loadable_block(DType d) {
  if (!dtype_is_quantized(d)) return false;
  const std::optional<GgmlType> t = dtype_to_ggml(d);
  return t && quant::has_kernels(*t);
}

// The alignment the kernels' typed loads need: the element size, or for a block format that of
// its blocks (which hold an f16 scale, except MXFP4 whose blocks are bytes).
size_t required_alignment(DType d) {
  if (!dtype_is_quantized(d)) return dtype_size(d);
  return d == DType::kMXFP4 ? 1 : 2;
}

}  // namespace

WeightLoader::WeightLoader(const Checkpoint& ckpt, Ops& ops, std::string prefix)
    : ckpt_(ckpt), ops_(ops), prefix_(std::move(prefix)) {}

bool WeightLoader::has(const std::string& name) const { return ckpt_.find(prefix_ + name) != nullptr; }
bool WeightLoader::has_raw(const std::string& full_name) const { return ckpt_.find(full_name) != nullptr; }

DType WeightLoader::op_weight_dtype(DType stored) const {
  if (!dtype_is_quantized(stored) || ops_.supports_weight_dtype(stored)) return stored;
  return DType::kF32;
}

const TensorInfo& WeightLoader::lookup(const std::string& full, const std::vector<int64_t>& shape, bool op_weight) {
  const TensorInfo* info = ckpt_.find(full);
  if (!info) bad_input(ckpt_.dir(), ": tensor '", full, "' is missing from the checkpoint (expected shape ",
                       shape_str(shape), ")");
  if (!is_float(info->dtype) && !is_loadable_block(info->dtype))
    bad_input(*info->file, ": tensor '", full, "' has dtype ", dtype_name(info->dtype),
              ", expected BF16, F16, F32 or a block format (Q8_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, MXFP4)");
  if (info->shape != shape)
    bad_input(*info->file, ": tensor '", full, "' has shape ", shape_str(info->shape), ", expected ", shape_str(shape));
  if (used_.insert(full).second) {
    n_params_ += uint64_t(info->numel());
    const int64_t cols = shape.empty() ? 1 : shape.back();
    if (op_weight) n_bytes_ += uint64_t(info->numel() / cols) * dtype_row_bytes(op_weight_dtype(info->dtype), cols);
    else n_bytes_ += info->nbytes;
  }
  return *info;
}

// The tensor's bytes as a host view the kernels may read. safetensors does not require tensors
// to be aligned to their element size (files from writers that do not pad the header are valid),
// and the kernels' typed loads need it: such a tensor is copied once. `widen`: a block-format
// tensor dequantized to F32 (ggml's dequantize_row, the blocks in row order).
WeightLoader::HostTensor WeightLoader::host_view(const TensorInfo& info, int64_t rows, int64_t cols, bool widen) {
  Tensor view{.dtype = info.dtype, .device = Device::kCpu, .data = const_cast<uint8_t*>(info.data),
              .rows = rows, .cols = cols};
  KCHECK(view.nbytes() == info.nbytes);
  if (widen && dtype_is_quantized(info.dtype)) {
    Buffer f32 = host_buffer(DType::kF32, rows, cols);
    quant::dequantize_row(*dtype_to_ggml(info.dtype), info.data, rows * cols, f32.view().f32());
    return {f32.view(), std::move(f32)};
  }
  if (reinterpret_cast<uintptr_t>(info.data) % required_alignment(info.dtype) == 0) return {view, Buffer{}};
  Buffer copy = host_buffer(info.dtype, rows, cols);
  std::memcpy(copy.view().data, info.data, info.nbytes);
  return {copy.view(), std::move(copy)};
}

Tensor WeightLoader::on_backend(HostTensor host, bool matmul_only) {
  KCHECK_MSG(!dtype_is_quantized(host.view.dtype) || ops_.supports_weight_dtype(host.view.dtype), "a ",
             dtype_name(host.view.dtype), " weight for the ", ops_.name(), " backend, which cannot take it");
  if (ops_.device() != Device::kCpu)  // the host copy is freed
    return keep(matmul_only ? ops_.upload_matrix(host.view) : ops_.upload(host.view));
  if (!host.owned.empty()) keep(std::move(host.owned));
  return host.view;
}

Tensor WeightLoader::op_weight(const std::string& name, int64_t rows, int64_t cols, bool raw) {
  return weight(name, rows, cols, raw, /*matmul_only=*/false);
}

Tensor WeightLoader::matmul_weight(const std::string& name, int64_t rows, int64_t cols, bool raw) {
  return weight(name, rows, cols, raw, /*matmul_only=*/true);
}

Tensor WeightLoader::head_weight(const std::string& name, int64_t rows, int64_t cols) {
  static const bool matmul_layout = [] {
    const char* v = std::getenv("KESTREL_HEAD_MATMUL_LAYOUT");
    return !(v && v[0] == '0');
  }();
  return weight(name, rows, cols, /*raw=*/true, /*matmul_only=*/matmul_layout);
}

Tensor WeightLoader::weight(const std::string& name, int64_t rows, int64_t cols, bool raw, bool matmul_only) {
  const TensorInfo& info = lookup(raw ? name : prefix_ + name, {rows, cols}, /*op_weight=*/true);
  return on_backend(host_view(info, rows, cols, /*widen=*/op_weight_dtype(info.dtype) != info.dtype), matmul_only);
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
  const TensorInfo& info = lookup(prefix_ + name, {1}, /*op_weight=*/false);
  if (!is_float(info.dtype))  // a one-element tensor cannot be a whole block
    bad_input(*info.file, ": tensor '", prefix_ + name, "' has dtype ", dtype_name(info.dtype),
              ", expected BF16, F16 or F32");
  Tensor src{
      .dtype = info.dtype, .device = Device::kCpu, .data = const_cast<uint8_t*>(info.data), .rows = 1, .cols = 1};
  float v = 0.0f;
  cpu::load_row(src, 0, &v);
  return v;
}

Tensor WeightLoader::op_weight_stack(const std::string& name, int64_t n, int64_t rows, int64_t cols) {
  const TensorInfo& info = lookup(prefix_ + name, {n, rows, cols}, /*op_weight=*/true);
  return on_backend(host_view(info, n * rows, cols, /*widen=*/op_weight_dtype(info.dtype) != info.dtype));
}

Tensor WeightLoader::f32(const std::string& name, const std::vector<int64_t>& shape,
                         const std::function<float(float)>& fn, bool as_matrix) {
  const TensorInfo& info = lookup(prefix_ + name, shape, /*op_weight=*/false);
  const int64_t n = info.numel();
  const int64_t rows = as_matrix ? shape[0] : 1;
  Buffer host = host_buffer(DType::kF32, rows, n / rows);
  Buffer aligned;  // a copy only where the mapped bytes are misaligned
  Tensor src{
      .dtype = info.dtype, .device = Device::kCpu, .data = const_cast<uint8_t*>(info.data), .rows = 1, .cols = n};
  if (reinterpret_cast<uintptr_t>(info.data) % required_alignment(info.dtype) != 0) {
    aligned = host_buffer(info.dtype, 1, n);
    std::memcpy(aligned.view().data, info.data, info.nbytes);
    src.data = aligned.view().data;
  }
  cpu::load_row(src, 0, host.view().f32());  // block formats: dequantized
  if (fn) {
    float* p = host.view().f32();
    for (int64_t i = 0; i < n; ++i) p[i] = fn(p[i]);
  }
  if (ops_.device() == Device::kCpu) return keep(std::move(host));
  return keep(ops_.upload(host.view()));
}

Tensor WeightLoader::op_weight_rows(const std::string& name, int64_t src_rows, int64_t cols,
                                    const std::vector<int64_t>& rows) {
  return gathered_rows(name, src_rows, cols, rows, /*matmul_only=*/false);
}

Tensor WeightLoader::matmul_weight_rows(const std::string& name, int64_t src_rows, int64_t cols,
                                        const std::vector<int64_t>& rows) {
  return gathered_rows(name, src_rows, cols, rows, /*matmul_only=*/true);
}

Tensor WeightLoader::gathered_rows(const std::string& name, int64_t src_rows, int64_t cols,
                                   const std::vector<int64_t>& rows, bool matmul_only) {
  const TensorInfo& info = lookup(prefix_ + name, {src_rows, cols}, /*op_weight=*/true);
  const DType dtype = op_weight_dtype(info.dtype);
  const size_t src_row_bytes = dtype_row_bytes(info.dtype, cols);
  Buffer host = host_buffer(dtype, int64_t(rows.size()), cols);
  const Tensor out = host.view();
  for (size_t i = 0; i < rows.size(); ++i) {
    KCHECK(rows[i] >= 0 && rows[i] < src_rows);
    const uint8_t* src = info.data + size_t(rows[i]) * src_row_bytes;
    uint8_t* dst = static_cast<uint8_t*>(out.data) + i * out.row_bytes();
    if (dtype == info.dtype) {
      std::memcpy(dst, src, src_row_bytes);
    } else {  // a block format this backend cannot take: widened
      quant::dequantize_row(*dtype_to_ggml(info.dtype), src, cols, reinterpret_cast<float*>(dst));
    }
  }
  return on_backend({out, std::move(host)}, matmul_only);
}

Tensor WeightLoader::keep(Buffer buffer) {
  owned_.push_back(std::move(buffer));
  return owned_.back().view();
}

}  // namespace kestrel
