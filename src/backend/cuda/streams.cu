// Residual-stream ops of hyper-connections (Qwen4-Exp): x [T, n * H] holds n streams of width H.
//   streams_expand: every stream = y                       (thread per output element)
//   streams_mix:    out = mean over s of w_s * x_s          (thread per output element, sum in double)
//   streams_inject: x_s = (x_s or 0) + w[:, s] * y          (thread per element of x)
//   stream_gate:    g[t, s] = sigmoid(signed sqrt(<a_s, b_s> / sqrt(H)))   (warp per (t, s), double)
// Each element's arithmetic is the CPU oracle's (products rounded to F32 before they are added, as
// the CPU build, compiled without FMA contraction, does), and depends on its own row only.
#include "backend/cuda/device_util.cuh"

namespace kestrel::cuda {
namespace {

constexpr int kThreads = 256;

inline unsigned grid_for(int64_t n) { return unsigned(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535 * 8)); }

__global__ void streams_expand_kernel(float* __restrict__ out,      // [T, n * H]
                                      const float* __restrict__ y,  // [T, H]
                                      int64_t T, int64_t H, int64_t n) {
  pdl_begin();
  const int64_t cols = n * H;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < T * cols; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / cols, c = i - t * cols;
    out[i] = y[t * H + c % H];
  }
}

__global__ void streams_mix_kernel(float* __restrict__ out,       // [T, H]
                                   const float* __restrict__ w,   // [T, n * H]
                                   const float* __restrict__ x,   // [T, n * H]
                                   int64_t T, int64_t H, int64_t n) {
  pdl_begin();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < T * H; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / H, c = i - t * H;
    const float* wr = w + t * n * H + c;
    const float* xr = x + t * n * H + c;
    double acc = 0.0;
    for (int64_t s = 0; s < n; ++s) acc += double(__fmul_rn(wr[s * H], xr[s * H]));
    out[i] = float(acc / double(n));
  }
}

__global__ void streams_inject_kernel(float* __restrict__ x,        // [T, n * H]
                                      const float* __restrict__ y,  // [T, H]
                                      const float* __restrict__ w,  // [T, n]
                                      int64_t T, int64_t H, int64_t n, bool accumulate) {
  pdl_begin();
  const int64_t cols = n * H;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < T * cols; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / cols, c = i - t * cols, s = c / H;
    const float v = __fmul_rn(y[t * H + (c - s * H)], w[t * n + s]);
    x[i] = accumulate ? x[i] + v : v;
  }
}

// One warp per (t, s); kWarps warps per block.
constexpr int kWarps = 8;
__global__ void stream_gate_kernel(float* __restrict__ g,        // [T, n]
                                   const float* __restrict__ a,  // [T, n * H]
                                   const float* __restrict__ b,  // [T, n * H]
                                   int64_t T, int64_t H, int64_t n) {
  pdl_begin();
  const int64_t item = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (item >= T * n) return;
  const int lane = threadIdx.x & 31;
  const float* as = a + item * H;  // row t, stream s: (t * n + s) * H
  const float* bs = b + item * H;
  double d = 0.0;
  for (int64_t i = lane; i < H; i += 32) d += double(as[i]) * double(bs[i]);
  d = warp_sum(d);
  if (lane != 0) return;
  d *= 1.0 / sqrt(double(H));
  const double r = sqrt(fmax(fabs(d), 1e-6)) * (d > 0 ? 1.0 : d < 0 ? -1.0 : 0.0);
  g[item] = float(1.0 / (1.0 + exp(-r)));
}

}  // namespace

void streams_expand(const Context& ctx, const Tensor& out, const Tensor& y) {
  check_f32(out, "streams_expand out");
  check_f32(y, "streams_expand y");
  const int64_t H = y.cols;
  KCHECK_MSG(H > 0 && out.rows == y.rows && out.cols % H == 0, "streams_expand: out [", out.rows, ", ", out.cols,
             "] from y [", y.rows, ", ", H, "]");
  const int64_t n = out.cols / H;
  if (out.numel() == 0) return;
  launch(streams_expand_kernel, grid_for(out.numel()), kThreads, 0, ctx.stream, out.f32(), y.f32(), y.rows, H, n);
  CUDA_CHECK_LAUNCH();
}

void streams_mix(const Context& ctx, const Tensor& out, const Tensor& w, const Tensor& x) {
  check_f32(out, "streams_mix out");
  check_f32(w, "streams_mix w");
  check_f32(x, "streams_mix x");
  const int64_t H = out.cols;
  KCHECK_MSG(H > 0 && x.cols % H == 0 && w.cols == x.cols && w.rows == x.rows && out.rows == x.rows,
             "streams_mix: out [", out.rows, ", ", H, "] w [", w.rows, ", ", w.cols, "] x [", x.rows, ", ", x.cols, "]");
  if (out.numel() == 0) return;
  launch(streams_mix_kernel, grid_for(out.numel()), kThreads, 0, ctx.stream, out.f32(), w.f32(), x.f32(), x.rows, H,
         x.cols / H);
  CUDA_CHECK_LAUNCH();
}

void streams_inject(const Context& ctx, const Tensor& x, const Tensor& y, const Tensor& w, bool accumulate) {
  check_f32(x, "streams_inject x");
  check_f32(y, "streams_inject y");
  check_f32(w, "streams_inject w");
  const int64_t H = y.cols, n = w.cols;
  KCHECK_MSG(x.cols == n * H && x.rows == y.rows && w.rows == y.rows, "streams_inject: x [", x.rows, ", ", x.cols,
             "] y [", y.rows, ", ", H, "] w [", w.rows, ", ", n, "]");
  if (x.numel() == 0) return;
  launch(streams_inject_kernel, grid_for(x.numel()), kThreads, 0, ctx.stream, x.f32(), y.f32(), w.f32(), y.rows, H, n,
         accumulate);
  CUDA_CHECK_LAUNCH();
}

void stream_gate(const Context& ctx, const Tensor& g, const Tensor& a, const Tensor& b) {
  check_f32(g, "stream_gate g");
  check_f32(a, "stream_gate a");
  check_f32(b, "stream_gate b");
  const int64_t n = g.cols;
  KCHECK_MSG(n > 0 && a.cols % n == 0 && b.cols == a.cols && g.rows == a.rows && b.rows == a.rows,
             "stream_gate: g [", g.rows, ", ", n, "] a [", a.rows, ", ", a.cols, "] b [", b.rows, ", ", b.cols, "]");
  const int64_t items = g.numel();
  if (items == 0) return;
  launch(stream_gate_kernel, unsigned(ceil_div(items, kWarps)), kWarps * 32, 0, ctx.stream, g.f32(), a.f32(), b.f32(),
         a.rows, a.cols / n, n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace kestrel::cuda
