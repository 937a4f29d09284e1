// Elementwise ops: add, mul, scale, mul_sigmoid and add_mul_sigmoid (full or [T, 1] gate),
// silu_mul, gelu_tanh_mul, activation, softcap, gather_rows, slice_cols, and argmax over rows.
#include "backend/cuda/device_util.cuh"

namespace kestrel::cuda {
namespace {

constexpr int kThreads = 256;

inline unsigned grid_for(int64_t n) { return unsigned(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535 * 8)); }

__global__ void add_kernel(float* out, const float* a, const float* b, int64_t n) {
  pdl_begin();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = a[i] + b[i];
}

// gate_cols == 1: one gate per row of `cols` elements; else gate has x's shape.
__global__ void mul_sigmoid_kernel(float* x, const float* gate, int64_t n, int64_t cols, bool per_row) {
  pdl_begin();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] *= sigmoidf(per_row ? gate[i / cols] : gate[i]);
}

// out += x * sigmoid(g), the product rounded before the sum (no FMA contraction), as
// mul_sigmoid_kernel then add_kernel compute it: the same bits in one pass. x is not written.
__global__ void add_mul_sigmoid_kernel(float* out, const float* x, const float* gate, int64_t n, int64_t cols,
                                       bool per_row) {
  pdl_begin();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = __fadd_rn(out[i], __fmul_rn(x[i], sigmoidf(per_row ? gate[i / cols] : gate[i])));
}

__global__ void silu_mul_kernel(float* out, const float* gate, const float* up, int64_t n) {
  pdl_begin();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = siluf(gate[i]) * up[i];
}

__global__ void gelu_tanh_mul_kernel(float* out, const float* gate, const float* up, int64_t n) {
  pdl_begin();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = gelu_tanhf(gate[i]) * up[i];
}

__global__ void mul_kernel(float* out, const float* a, const float* b, int64_t n) {
  pdl_begin();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = a[i] * b[i];
}

__global__ void scale_kernel(float* x, float s, int64_t n) {
  pdl_begin();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] *= s;
}

__global__ void activation_kernel(float* x, Activation act, int64_t n) {
  pdl_begin();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] = activate(x[i], act);
}

__global__ void softcap_kernel(float* x, float cap, int64_t n) {
  pdl_begin();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] = cap * tanhf(x[i] / cap);
}

// (v, i) beats (w, j): larger, or equal and earlier; a number beats NaN.
__device__ __forceinline__ bool beats(float v, int i, float w, int j) {
  if (isnan(w)) return !isnan(v) || i < j;
  return v > w || (v == w && i < j);
}

// Argmax in one launch of two stages: a row is split into ranges of kArgmaxRange elements, one
// block each (a vocabulary row of 248k values over ~60 SMs instead of one: one block per row was
// bound by its loads' latency, 0.1 ms); each block stores its range's best and counts itself done,
// and the row's last block to finish picks the best of the ranges with one warp. "Best" is a total
// order (larger value, then smaller index; NaN below every number), so the pick does not depend on
// how the ranges fall: each row's first largest value, as on the CPU.
constexpr int kArgmaxThreads = 256;
constexpr int64_t kArgmaxRange = 4096;
constexpr int kNoIndex = 0x7fffffff;

struct Best {
  float v;
  int i;  // kNoIndex: nothing seen yet
};
__device__ __forceinline__ void take(Best& b, float v, int i) {
  if (i != kNoIndex && (b.i == kNoIndex || beats(v, i, b.v, b.i))) b = {v, i};
}
__device__ __forceinline__ Best warp_best(Best b) {
  for (int o = 16; o > 0; o >>= 1)
    take(b, __shfl_xor_sync(kFullMask, b.v, o), __shfl_xor_sync(kFullMask, b.i, o));
  return b;
}

// grid: (ranges, R); block (p, r) stores the best of row r's elements [p * range, +range) in
// bests[r, p] and adds one to done[r]; the block that brings it to `ranges` writes ids[r] (0 when
// the row has only NaN) and sets done[r] back to zero for the next launch.
__global__ void argmax_kernel(int32_t* __restrict__ ids, Best* __restrict__ bests, unsigned* __restrict__ done,
                              const float* __restrict__ x, int64_t V, int64_t range) {
  pdl_begin();
  __shared__ Best warps[kArgmaxThreads / 32];
  __shared__ bool last;
  const float* row = x + int64_t(blockIdx.y) * V;
  const int64_t begin = int64_t(blockIdx.x) * range, end = min(V, begin + range);
  Best b{NAN, kNoIndex};
#pragma unroll 4
  for (int64_t i = begin + threadIdx.x; i < end; i += kArgmaxThreads) take(b, row[i], int(i));
  b = warp_best(b);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warps[warp] = b;
  __syncthreads();
  Best* row_bests = bests + int64_t(blockIdx.y) * gridDim.x;
  if (threadIdx.x == 0) {
    for (int w = 1; w < kArgmaxThreads / 32; ++w) take(b, warps[w].v, warps[w].i);
    row_bests[blockIdx.x] = b;
    __threadfence();  // the best is visible before the count that says so
    last = atomicAdd(&done[blockIdx.y], 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last || warp != 0) return;
  __threadfence();  // the other blocks' bests, counted before this block's add, are visible
  Best p{NAN, kNoIndex};
  for (int q = lane; q < int(gridDim.x); q += 32) take(p, __ldcg(&row_bests[q].v), __ldcg(&row_bests[q].i));
  p = warp_best(p);
  if (lane == 0) {
    ids[blockIdx.y] = p.i == kNoIndex ? 0 : p.i;
    done[blockIdx.y] = 0;
  }
}

// grid: R blocks; row r copies x[rows[r]] (row_bytes, a multiple of 4) to out[r].
__global__ void gather_rows_kernel(uint32_t* out, const uint32_t* x, const int32_t* rows, int64_t words) {
  pdl_begin();
  const int64_t r = blockIdx.x;
  const uint32_t* src = x + int64_t(rows[r]) * words;
  uint32_t* dst = out + r * words;
  for (int64_t i = threadIdx.x; i < words; i += blockDim.x) dst[i] = src[i];
}

// The sigmoid gate of x for `op`: true for one gate a row ([T, 1]), false for one an element;
// any other shape is refused.
bool sigmoid_gate_per_row(const char* op, const Tensor& x, const Tensor& gate) {
  const bool per_row = gate.cols == 1 && x.cols != 1;
  if (per_row) KCHECK_MSG(gate.rows == x.rows, op, ": [T, 1] gate has ", gate.rows, " rows, x ", x.rows);
  else KCHECK_MSG(x.numel() == gate.numel(), op, ": gate ", gate.numel(), " values for x ", x.numel());
  return per_row;
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
  launch(add_kernel, grid_for(n), kThreads, 0, ctx.stream, out.f32(), a.f32(), b.f32(), n);
  CUDA_CHECK_LAUNCH();
}

void mul_sigmoid(const Context& ctx, const Tensor& x, const Tensor& gate) {
  check_f32(x, "mul_sigmoid x");
  check_f32(gate, "mul_sigmoid gate");
  const bool per_row = sigmoid_gate_per_row("mul_sigmoid", x, gate);
  const int64_t n = x.numel();
  if (!n) return;
  launch(mul_sigmoid_kernel, grid_for(n), kThreads, 0, ctx.stream, x.f32(), gate.f32(), n, x.cols, per_row);
  CUDA_CHECK_LAUNCH();
}

void add_mul_sigmoid(const Context& ctx, const Tensor& out, const Tensor& x, const Tensor& gate) {
  check_f32(out, "add_mul_sigmoid out");
  check_f32(x, "add_mul_sigmoid x");
  check_f32(gate, "add_mul_sigmoid gate");
  KCHECK_MSG(out.numel() == x.numel(), "add_mul_sigmoid: out ", out.numel(), " values, x ", x.numel());
  const bool per_row = sigmoid_gate_per_row("add_mul_sigmoid", x, gate);
  const int64_t n = x.numel();
  if (!n) return;
  launch(add_mul_sigmoid_kernel, grid_for(n), kThreads, 0, ctx.stream, out.f32(), x.f32(), gate.f32(), n, x.cols,
         per_row);
  CUDA_CHECK_LAUNCH();
}

void silu_mul(const Context& ctx, const Tensor& out, const Tensor& gate, const Tensor& up) {
  check_f32(out, "silu_mul out");
  check_f32(gate, "silu_mul gate");
  check_f32(up, "silu_mul up");
  KCHECK(gate.numel() == up.numel() && out.numel() == gate.numel());
  const int64_t n = out.numel();
  if (!n) return;
  launch(silu_mul_kernel, grid_for(n), kThreads, 0, ctx.stream, out.f32(), gate.f32(), up.f32(), n);
  CUDA_CHECK_LAUNCH();
}

void gelu_tanh_mul(const Context& ctx, const Tensor& out, const Tensor& gate, const Tensor& up) {
  check_f32(out, "gelu_tanh_mul out");
  check_f32(gate, "gelu_tanh_mul gate");
  check_f32(up, "gelu_tanh_mul up");
  KCHECK_MSG(gate.numel() == up.numel() && out.numel() == gate.numel(), "gelu_tanh_mul: gate ", gate.numel(),
             " up ", up.numel(), " out ", out.numel());
  const int64_t n = out.numel();
  if (!n) return;
  launch(gelu_tanh_mul_kernel, grid_for(n), kThreads, 0, ctx.stream, out.f32(), gate.f32(), up.f32(), n);
  CUDA_CHECK_LAUNCH();
}

void mul(const Context& ctx, const Tensor& out, const Tensor& a, const Tensor& b) {
  check_f32(out, "mul out");
  check_f32(a, "mul a");
  check_f32(b, "mul b");
  KCHECK_MSG(a.numel() == b.numel() && out.numel() == a.numel(), "mul: ", a.numel(), " * ", b.numel(), " -> ",
             out.numel());
  const int64_t n = out.numel();
  if (!n) return;
  launch(mul_kernel, grid_for(n), kThreads, 0, ctx.stream, out.f32(), a.f32(), b.f32(), n);
  CUDA_CHECK_LAUNCH();
}

void scale(const Context& ctx, const Tensor& x, float s) {
  check_f32(x, "scale x");
  const int64_t n = x.numel();
  if (!n) return;
  launch(scale_kernel, grid_for(n), kThreads, 0, ctx.stream, x.f32(), s, n);
  CUDA_CHECK_LAUNCH();
}

void activation(const Context& ctx, const Tensor& x, Activation act) {
  check_f32(x, "activation x");
  const int64_t n = x.numel();
  if (!n) return;
  launch(activation_kernel, grid_for(n), kThreads, 0, ctx.stream, x.f32(), act, n);
  CUDA_CHECK_LAUNCH();
}

void slice_cols(const Context& ctx, const Tensor& out, const Tensor& x, int64_t begin) {
  KCHECK_MSG(out.rows == x.rows && out.dtype == x.dtype && begin >= 0 && begin + out.cols <= x.cols,
             "slice_cols: out [", out.rows, ", ", out.cols, "] from column ", begin, " of [", x.rows, ", ", x.cols,
             "]");
  KCHECK_MSG((out.device == Device::kCuda || out.numel() == 0) && (x.device == Device::kCuda || x.numel() == 0),
             "slice_cols: tensors must be on the CUDA device");
  if (out.numel() == 0) return;
  const size_t es = dtype_size(x.dtype);
  CUDA_CHECK(cudaMemcpy2DAsync(out.data, size_t(out.cols) * es, static_cast<const uint8_t*>(x.data) + size_t(begin) * es,
                               size_t(x.cols) * es, size_t(out.cols) * es, size_t(x.rows), cudaMemcpyDeviceToDevice,
                               ctx.stream));
}

void argmax(const Context& ctx, const Tensor& ids, const Tensor& x) {
  check_f32(x, "argmax x");
  KCHECK_MSG(ids.dtype == DType::kI32 && ids.rows == x.rows && ids.cols == 1, "argmax: ids must be I32 [", x.rows,
             ", 1]");
  KCHECK_MSG(x.rows <= INT32_MAX && x.cols > 0 && x.cols <= INT32_MAX, "argmax: bad shape [", x.rows, ", ", x.cols, "]");
  KCHECK_MSG(x.rows <= 65535, "argmax: ", x.rows, " rows in one call (the CUDA kernel takes 65535)");
  if (x.rows == 0) return;
  const int ranges = int(ceil_div(x.cols, kArgmaxRange));
  auto* bests = static_cast<Best*>(ctx.scratch->get(kSlotArgmax, size_t(x.rows) * size_t(ranges) * sizeof(Best)));
  auto* done = static_cast<unsigned*>(ctx.scratch->get_zeroed(kSlotArgmaxDone, size_t(x.rows) * sizeof(unsigned),
                                                              ctx.stream));
  launch(argmax_kernel, dim3(unsigned(ranges), unsigned(x.rows)), kArgmaxThreads, 0, ctx.stream,
         static_cast<int32_t*>(ids.data), bests, done, x.f32(), x.cols, kArgmaxRange);
  CUDA_CHECK_LAUNCH();
}

void softcap(const Context& ctx, const Tensor& x, float cap) {
  check_f32(x, "softcap x");
  KCHECK(cap > 0.0f);
  const int64_t n = x.numel();
  if (!n) return;
  launch(softcap_kernel, grid_for(n), kThreads, 0, ctx.stream, x.f32(), cap, n);
  CUDA_CHECK_LAUNCH();
}

void gather_rows(const Context& ctx, const Tensor& out, const Tensor& x, const std::vector<int32_t>& rows,
                 const int32_t* device_rows) {
  KCHECK_MSG(out.rows == int64_t(rows.size()) && out.cols == x.cols && out.dtype == x.dtype, "gather_rows: out [",
             out.rows, ", ", out.cols, "] for ", rows.size(), " rows of [", x.rows, ", ", x.cols, "]");
  for (int32_t r : rows) KCHECK_MSG(r >= 0 && r < x.rows, "gather_rows: row ", r, " outside [0, ", x.rows, ")");
  if (rows.empty()) return;
  const size_t row_bytes = size_t(x.cols) * dtype_size(x.dtype);
  KCHECK_MSG(row_bytes % 4 == 0, "gather_rows: rows of ", row_bytes, " bytes (need a multiple of 4)");
  const int32_t* d_rows =
      device_rows ? device_rows
                  : static_cast<const int32_t*>(ctx.upload_scratch(kSlotGatherRows, rows.data(), rows.size() * 4));
  launch(gather_rows_kernel, unsigned(rows.size()), 128, 0, ctx.stream, static_cast<uint32_t*>(out.data),
         static_cast<const uint32_t*>(x.data), d_rows, int64_t(row_bytes / 4));
  CUDA_CHECK_LAUNCH();
}

}  // namespace kestrel::cuda
