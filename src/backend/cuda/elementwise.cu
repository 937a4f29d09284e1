// Elementwise ops: add, mul_sigmoid (full or [T, 1] gate), silu_mul, softcap, gather_rows.
#include "backend/cuda/device_util.cuh"

namespace kestrel::cuda {
namespace {

constexpr int kThreads = 256;

inline unsigned grid_for(int64_t n) { return unsigned(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535 * 8)); }

__global__ void add_kernel(float* out, const float* a, const float* b, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = a[i] + b[i];
}

// gate_cols == 1: one gate per row of `cols` elements; else gate has x's shape.
__global__ void mul_sigmoid_kernel(float* x, const float* gate, int64_t n, int64_t cols, bool per_row) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] *= sigmoidf(per_row ? gate[i / cols] : gate[i]);
}

__global__ void silu_mul_kernel(float* out, const float* gate, const float* up, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = siluf(gate[i]) * up[i];
}

__global__ void softcap_kernel(float* x, float cap, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] = cap * tanhf(x[i] / cap);
}

// grid: R blocks; row r copies x[rows[r]] (row_bytes, a multiple of 4) to out[r].
__global__ void gather_rows_kernel(uint32_t* out, const uint32_t* x, const int32_t* rows, int64_t words) {
  const int64_t r = blockIdx.x;
  const uint32_t* src = x + int64_t(rows[r]) * words;
  uint32_t* dst = out + r * words;
  for (int64_t i = threadIdx.x; i < words; i += blockDim.x) dst[i] = src[i];
}

}  // namespace

void add(const Context& ctx, const Tensor& out, const Tensor& a, const Tensor& b) {
  check_f32(out, "add out");
  check_f32(a, "add a");
  check_f32(b, "add b");
  KCHECK_MSG(a.numel() == b.numel() && out.numel() == a.numel(), "add: ", a.numel(), " + ", b.numel(), " -> ",
             out.numel());
  const int64_t n = out.numel();
  if (!n) return;
  add_kernel<<<grid_for(n), kThreads, 0, ctx.stream>>>(out.f32(), a.f32(), b.f32(), n);
  CUDA_CHECK_LAUNCH();
}

void mul_sigmoid(const Context& ctx, const Tensor& x, const Tensor& gate) {
  check_f32(x, "mul_sigmoid x");
  check_f32(gate, "mul_sigmoid gate");
  const bool per_row = gate.cols == 1 && x.cols != 1;
  if (per_row) KCHECK_MSG(gate.rows == x.rows, "mul_sigmoid: [T, 1] gate has ", gate.rows, " rows, x ", x.rows);
  else KCHECK_MSG(x.numel() == gate.numel(), "mul_sigmoid: gate ", gate.numel(), " values for x ", x.numel());
  const int64_t n = x.numel();
  if (!n) return;
  mul_sigmoid_kernel<<<grid_for(n), kThreads, 0, ctx.stream>>>(x.f32(), gate.f32(), n, x.cols, per_row);
  CUDA_CHECK_LAUNCH();
}

void silu_mul(const Context& ctx, const Tensor& out, const Tensor& gate, const Tensor& up) {
  check_f32(out, "silu_mul out");
  check_f32(gate, "silu_mul gate");
  check_f32(up, "silu_mul up");
  KCHECK(gate.numel() == up.numel() && out.numel() == gate.numel());
  const int64_t n = out.numel();
  if (!n) return;
  silu_mul_kernel<<<grid_for(n), kThreads, 0, ctx.stream>>>(out.f32(), gate.f32(), up.f32(), n);
  CUDA_CHECK_LAUNCH();
}

void softcap(const Context& ctx, const Tensor& x, float cap) {
  check_f32(x, "softcap x");
  KCHECK(cap > 0.0f);
  const int64_t n = x.numel();
  if (!n) return;
  softcap_kernel<<<grid_for(n), kThreads, 0, ctx.stream>>>(x.f32(), cap, n);
  CUDA_CHECK_LAUNCH();
}

void gather_rows(const Context& ctx, const Tensor& out, const Tensor& x, const std::vector<int32_t>& rows) {
  KCHECK_MSG(out.rows == int64_t(rows.size()) && out.cols == x.cols && out.dtype == x.dtype, "gather_rows: out [",
             out.rows, ", ", out.cols, "] for ", rows.size(), " rows of [", x.rows, ", ", x.cols, "]");
  for (int32_t r : rows) KCHECK_MSG(r >= 0 && r < x.rows, "gather_rows: row ", r, " outside [0, ", x.rows, ")");
  if (rows.empty()) return;
  const size_t row_bytes = size_t(x.cols) * dtype_size(x.dtype);
  KCHECK_MSG(row_bytes % 4 == 0, "gather_rows: rows of ", row_bytes, " bytes (need a multiple of 4)");
  const int32_t* d_rows =
      static_cast<const int32_t*>(ctx.upload_scratch(kSlotGatherRows, rows.data(), rows.size() * 4));
  gather_rows_kernel<<<unsigned(rows.size()), 128, 0, ctx.stream>>>(
      static_cast<uint32_t*>(out.data), static_cast<const uint32_t*>(x.data), d_rows, int64_t(row_bytes / 4));
  CUDA_CHECK_LAUNCH();
}

}  // namespace kestrel::cuda
