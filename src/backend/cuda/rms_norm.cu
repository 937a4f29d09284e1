// RMSNorm variants: rms_norm over whole rows (add_rms_norm: with the residual add fused in;
// embed_rms_norm: with the embedding gather before it), head_rms_norm over head_dim groups,
// gated_rms_norm (norm * w * silu(z)) over head_dim groups, and group_rms_norm (column blocks of a
// row, a weight per column: hyper-connection streams). Sums of squares in double, as the
// CPU oracle does; out may alias x (each element is read before it is written, by one thread).
#include "backend/cuda/device_util.cuh"

namespace kestrel::cuda {
namespace {

// grid: rows; one block per row of n.
__global__ void rms_norm_kernel(float* out,             // [rows, n]
                                const float* x,         // [rows, n]
                                const float* __restrict__ w,  // [n] or null
                                int64_t n, float eps) {
  pdl_begin();
  const float* xr = x + blockIdx.x * n;
  float* o = out + blockIdx.x * n;
  double ss = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) ss += double(xr[i]) * double(xr[i]);
  ss = block_sum(ss);
  const float s = rms_scale(ss, n, eps);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) o[i] = w ? (xr[i] * s) * w[i] : xr[i] * s;
}

// grid: rows; one block per row of n. residual += x, then out = the rms_norm_kernel of the new
// residual: each thread adds, stores and squares the same elements rms_norm_kernel's thread would,
// so the sums and the result are bit-identical to add then rms_norm. out may alias x (a thread
// reads its x elements before it writes them), never residual.
__global__ void add_rms_norm_kernel(float* residual,             // [rows, n]
                                    const float* x,              // [rows, n]
                                    const float* __restrict__ w, // [n] or null
                                    float* out,                  // [rows, n]
                                    int64_t n, float eps) {
  pdl_begin();
  float* rr = residual + blockIdx.x * n;
  const float* xr = x + blockIdx.x * n;
  float* o = out + blockIdx.x * n;
  double ss = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float r = rr[i] + xr[i];
    rr[i] = r;
    ss += double(r) * double(r);
  }
  ss = block_sum(ss);
  const float s = rms_scale(ss, n, eps);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) o[i] = w ? (rr[i] * s) * w[i] : rr[i] * s;
}

// The staged kernels' sums and scaling of a thread's R values v (weights wv; element i of the row
// is v[j] for i = threadIdx.x + j * blockDim.x): with kKeep each value is also stored in keep[i]
// (the new residual, the gathered embedding), and out[i] gets it normalized.
template <int R, bool kKeep>
__device__ __forceinline__ void staged_norm_finish(const float (&v)[R], const float (&wv)[R], float* keep, float* o,
                                                   const float* __restrict__ w, int64_t n, float eps) {
  double ss = 0.0;
#pragma unroll
  for (int j = 0; j < R; ++j) {
    const int64_t i = threadIdx.x + int64_t(j) * blockDim.x;
    if (i < n) {
      if constexpr (kKeep) keep[i] = v[j];
      ss += double(v[j]) * double(v[j]);
    }
  }
  ss = block_sum(ss);
  const float s = rms_scale(ss, n, eps);
#pragma unroll
  for (int j = 0; j < R; ++j) {
    const int64_t i = threadIdx.x + int64_t(j) * blockDim.x;
    if (i < n) o[i] = w ? (v[j] * s) * wv[j] : v[j] * s;
  }
}

// The same two kernels with each thread's R elements held in registers between the sum and the
// scaling (n <= R * blockDim.x): every load is issued before the first store, where the loops
// above wait on each load in turn (out may alias x, so a store orders the loads after it). A
// thread takes the same elements in the same order as above: the same sums, the same bits. Decode
// rows are short (a few thousand values), so that wait was most of these kernels' time.
template <int R, bool kAdd>
__global__ void rms_norm_staged_kernel(float* residual,             // [rows, n] (kAdd) or null
                                       const float* x,              // [rows, n]
                                       const float* __restrict__ w, // [n] or null
                                       float* out,                  // [rows, n]
                                       int64_t n, float eps) {
  pdl_begin();
  const float* xr = x + blockIdx.x * n;
  float* rr = kAdd ? residual + blockIdx.x * n : nullptr;
  float* o = out + blockIdx.x * n;
  float v[R], wv[R];
#pragma unroll
  for (int j = 0; j < R; ++j) {
    const int64_t i = threadIdx.x + int64_t(j) * blockDim.x;
    v[j] = i < n ? (kAdd ? rr[i] + xr[i] : xr[i]) : 0.0f;
    wv[j] = w && i < n ? w[i] : 1.0f;
  }
  staged_norm_finish<R, kAdd>(v, wv, rr, o, w, n, eps);
}

// embed followed by rms_norm_staged_kernel<R, false>, in one block a row: each thread gathers,
// scales and stores the embedding elements that thread of the norm would load (embed_kernel's
// arithmetic), then sums and scales them as the norm does: the same x, sums and out bits.
template <int R, typename W>
__global__ void embed_rms_norm_staged_kernel(float* __restrict__ x,              // [rows, n]
                                             float* __restrict__ out,            // [rows, n]
                                             const W* __restrict__ table,        // [V, n]
                                             const int32_t* __restrict__ tokens, // [rows]
                                             const float* __restrict__ w,        // [n] or null
                                             int64_t V, int64_t n, float scale, float eps) {
  pdl_begin();
  const int32_t id = tokens[blockIdx.x];
  const bool known = id >= 0 && id < V;  // the entry point checked the ids; never read out of bounds regardless
  const W* src = table + int64_t(known ? id : 0) * n;
  float* xr = x + blockIdx.x * n;
  float* o = out + blockIdx.x * n;
  float v[R], wv[R];
#pragma unroll
  for (int j = 0; j < R; ++j) {
    const int64_t i = threadIdx.x + int64_t(j) * blockDim.x;
    float e = i < n && known ? to_f32(src[i]) : 0.0f;
    v[j] = scale != 1.0f ? e * scale : e;
    wv[j] = w && i < n ? w[i] : 1.0f;
  }
  staged_norm_finish<R, true>(v, wv, xr, o, w, n, eps);
}

// The block size of a row norm over rows of n (the staged kernels' sums depend on it).
int row_norm_threads(int64_t n) { return n >= 1024 ? 512 : n >= 256 ? 256 : 128; }

// fn.template operator()<R>() with the staged kernels' R for `per` elements a thread (per <= 16):
// the smallest of 1, 2, 4, 8, 16 that holds them.
template <typename Fn>
void with_staged_count(int64_t per, Fn&& fn) {
  if (per <= 1) fn.template operator()<1>();
  else if (per <= 2) fn.template operator()<2>();
  else if (per <= 4) fn.template operator()<4>();
  else if (per <= 8) fn.template operator()<8>();
  else fn.template operator()<16>();
}

// rms_norm / add_rms_norm over rows of n: the staged kernel where a thread's elements fit in
// 16 registers, the loop kernels beyond.
void launch_row_norm(cudaStream_t stream, float* residual, const float* x, const float* w, float* out, int64_t rows,
                     int64_t n, float eps) {
  const int threads = row_norm_threads(n);
  const int64_t per = ceil_div(n, threads);
  const unsigned grid = unsigned(rows);
  auto staged = [&]<int R>() {
    if (residual) launch(rms_norm_staged_kernel<R, true>, grid, threads, 0, stream, residual, x, w, out, n, eps);
    else launch(rms_norm_staged_kernel<R, false>, grid, threads, 0, stream, nullptr, x, w, out, n, eps);
  };
  if (per <= 16) with_staged_count(per, staged);
  else if (residual) launch(add_rms_norm_kernel, grid, threads, 0, stream, residual, x, w, out, n, eps);
  else launch(rms_norm_kernel, grid, threads, 0, stream, out, x, w, n, eps);
  CUDA_CHECK_LAUNCH();
}

// One warp per group of d values; z (gate) null for the plain head norm.
__global__ void group_rms_norm_kernel(float* x,                      // [groups, d]
                                      const float* __restrict__ z,   // [groups, d] or null
                                      const float* __restrict__ w,   // [d] or null
                                      int64_t groups, int d, float eps) {
  pdl_begin();
  const int64_t g = blockIdx.x * int64_t(blockDim.x / 32) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (g >= groups) return;
  float* v = x + g * d;
  double ss = 0.0;
  for (int i = lane; i < d; i += 32) ss += double(v[i]) * double(v[i]);
  ss = warp_sum(ss);
  const float s = rms_scale(ss, d, eps);
  for (int i = lane; i < d; i += 32) {
    float r = w ? (v[i] * s) * w[i] : v[i] * s;
    if (z) r *= siluf(z[g * d + i]);
    v[i] = r;
  }
}

// grid: rows * (cols / group) blocks, one per group of `group` values; the weight is per column of
// the row, so group g uses w[(g % groups_per_row) * group, +group).
__global__ void col_group_rms_norm_kernel(float* out,                   // [rows, cols]
                                          const float* x,               // [rows, cols]
                                          const float* __restrict__ w,  // [cols] or null
                                          int64_t group, int64_t groups_per_row, float eps) {
  pdl_begin();
  const int64_t g = blockIdx.x;
  const float* xg = x + g * group;
  float* o = out + g * group;
  const float* wg = w ? w + (g % groups_per_row) * group : nullptr;
  double ss = 0.0;
  for (int64_t i = threadIdx.x; i < group; i += blockDim.x) ss += double(xg[i]) * double(xg[i]);
  ss = block_sum(ss);
  const float s = rms_scale(ss, group, eps);
  for (int64_t i = threadIdx.x; i < group; i += blockDim.x) o[i] = wg ? (xg[i] * s) * wg[i] : xg[i] * s;
}

// group_rms_norm_kernel with a lane's R values (d <= 32 R) in registers from the sum to the
// scaling, and the weights and gates loaded with them; same elements, same order, same bits.
template <int R>
__global__ void group_rms_norm_staged_kernel(float* x,                      // [groups, d]
                                             const float* __restrict__ z,   // [groups, d] or null
                                             const float* __restrict__ w,   // [d] or null
                                             int64_t groups, int d, float eps) {
  pdl_begin();
  const int64_t g = blockIdx.x * int64_t(blockDim.x / 32) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (g >= groups) return;
  float* v = x + g * d;
  float xv[R], wv[R], zv[R];
#pragma unroll
  for (int j = 0; j < R; ++j) {
    const int i = lane + 32 * j;
    xv[j] = i < d ? v[i] : 0.0f;
    wv[j] = w && i < d ? w[i] : 1.0f;
    zv[j] = z && i < d ? z[g * d + i] : 0.0f;
  }
  double ss = 0.0;
#pragma unroll
  for (int j = 0; j < R; ++j)
    if (lane + 32 * j < d) ss += double(xv[j]) * double(xv[j]);
  ss = warp_sum(ss);
  const float s = rms_scale(ss, d, eps);
#pragma unroll
  for (int j = 0; j < R; ++j) {
    const int i = lane + 32 * j;
    if (i >= d) continue;
    float r = w ? (xv[j] * s) * wv[j] : xv[j] * s;
    if (z) r *= siluf(zv[j]);
    v[i] = r;
  }
}

void launch_group_norm(cudaStream_t stream, float* x, const float* z, const float* w, int64_t groups, int d,
                       float eps) {
  if (groups == 0) return;
  constexpr int kWarps = 8;
  const unsigned grid = unsigned(ceil_div(groups, kWarps));
  if (d <= 32) launch(group_rms_norm_staged_kernel<1>, grid, kWarps * 32, 0, stream, x, z, w, groups, d, eps);
  else if (d <= 64) launch(group_rms_norm_staged_kernel<2>, grid, kWarps * 32, 0, stream, x, z, w, groups, d, eps);
  else if (d <= 128) launch(group_rms_norm_staged_kernel<4>, grid, kWarps * 32, 0, stream, x, z, w, groups, d, eps);
  else if (d <= 256) launch(group_rms_norm_staged_kernel<8>, grid, kWarps * 32, 0, stream, x, z, w, groups, d, eps);
  else launch(group_rms_norm_kernel, grid, kWarps * 32, 0, stream, x, z, w, groups, d, eps);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void rms_norm(const Context& ctx, const Tensor& out, const Tensor& x, const Tensor& w, float eps) {
  check_f32(out, "rms_norm out");
  check_f32(x, "rms_norm x");
  KCHECK_MSG(out.rows == x.rows && out.cols == x.cols, "rms_norm: out [", out.rows, ", ", out.cols, "] x [", x.rows,
             ", ", x.cols, "]");
  KCHECK(w.empty() || (w.dtype == DType::kF32 && w.numel() == x.cols));
  if (x.rows == 0) return;
  launch_row_norm(ctx.stream, nullptr, x.f32(), w.empty() ? nullptr : w.f32(), out.f32(), x.rows, x.cols, eps);
}

bool embed_rms_norm(const Context& ctx, const Tensor& x, const Tensor& out, const Tensor& table, const StepPlan& plan,
                    float scale, const Tensor& w, float eps) {
  const int64_t n = table.cols;
  const int threads = row_norm_threads(n);
  const int64_t per = ceil_div(n, threads);
  if (dtype_is_quantized(table.dtype) || per > 16) return false;  // embed then rms_norm
  check_f32(x, "embed_rms_norm x");
  check_f32(out, "embed_rms_norm out");
  check_step(ctx, plan);
  KCHECK_MSG(x.rows == plan.n_rows() && x.cols == n && out.rows == x.rows && out.cols == n, "embed_rms_norm: x [",
             x.rows, ", ", x.cols, "], out [", out.rows, ", ", out.cols, "] for ", plan.n_rows(),
             " tokens of a [", table.rows, ", ", n, "] table");
  KCHECK_MSG(out.data != x.data, "embed_rms_norm: out must not be x");
  KCHECK(w.empty() || (w.dtype == DType::kF32 && w.numel() == n));
  if (x.rows == 0) return true;
  for (int32_t id : plan.tokens) KCHECK_MSG(id >= 0 && id < table.rows, "token id ", id, " outside the vocabulary");
  const float* wp = w.empty() ? nullptr : w.f32();
  dispatch_weight(table.dtype, "embed_rms_norm", [&]<typename W>() {
    auto go = [&]<int R>() {
      launch(embed_rms_norm_staged_kernel<R, W>, unsigned(x.rows), threads, 0, ctx.stream, x.f32(), out.f32(),
             table.as<const W>(), ctx.step.tokens, wp, table.rows, n, scale, eps);
    };
    with_staged_count(per, go);
    CUDA_CHECK_LAUNCH();
  });
  return true;
}

void add_rms_norm(const Context& ctx, const Tensor& residual, const Tensor& x, const Tensor& w, const Tensor& out,
                  float eps) {
  check_f32(residual, "add_rms_norm residual");
  check_f32(x, "add_rms_norm x");
  check_f32(out, "add_rms_norm out");
  KCHECK_MSG(x.rows == residual.rows && x.cols == residual.cols && out.rows == residual.rows &&
                 out.cols == residual.cols,
             "add_rms_norm: residual [", residual.rows, ", ", residual.cols, "] x [", x.rows, ", ", x.cols, "] out [",
             out.rows, ", ", out.cols, "]");
  KCHECK_MSG(out.data != residual.data, "add_rms_norm: out must not be the residual");
  KCHECK(w.empty() || (w.dtype == DType::kF32 && w.numel() == residual.cols));
  if (residual.rows == 0) return;
  launch_row_norm(ctx.stream, residual.f32(), x.f32(), w.empty() ? nullptr : w.f32(), out.f32(), residual.rows,
                  residual.cols, eps);
}

void head_rms_norm(const Context& ctx, const Tensor& x, const Tensor& w, int head_dim, float eps) {
  check_f32(x, "head_rms_norm x");
  KCHECK_MSG(head_dim > 0 && x.cols % head_dim == 0, "head_rms_norm: ", x.cols, " cols, head_dim ", head_dim);
  KCHECK(w.empty() || (w.dtype == DType::kF32 && w.numel() == head_dim));
  launch_group_norm(ctx.stream, x.f32(), nullptr, w.empty() ? nullptr : w.f32(), x.numel() / head_dim, head_dim,
                    eps);
}

void gated_rms_norm(const Context& ctx, const Tensor& x, const Tensor& z, const Tensor& w, int head_dim, float eps) {
  check_f32(x, "gated_rms_norm x");
  check_f32(z, "gated_rms_norm z");
  KCHECK_MSG(x.numel() == z.numel() && head_dim > 0 && x.cols % head_dim == 0, "gated_rms_norm: x ", x.numel(),
             " z ", z.numel(), " head_dim ", head_dim);
  KCHECK(w.dtype == DType::kF32 && w.numel() == head_dim);
  launch_group_norm(ctx.stream, x.f32(), z.f32(), w.f32(), x.numel() / head_dim, head_dim, eps);
}

void group_rms_norm(const Context& ctx, const Tensor& out, const Tensor& x, const Tensor& w, int group, float eps) {
  check_f32(out, "group_rms_norm out");
  check_f32(x, "group_rms_norm x");
  KCHECK_MSG(out.rows == x.rows && out.cols == x.cols && group > 0 && x.cols % group == 0, "group_rms_norm: out [",
             out.rows, ", ", out.cols, "] x [", x.rows, ", ", x.cols, "] group ", group);
  KCHECK(w.empty() || (w.dtype == DType::kF32 && w.numel() == x.cols));
  const int64_t groups = x.numel() / group;
  if (groups == 0) return;
  const int threads = group >= 1024 ? 512 : group >= 256 ? 256 : group >= 128 ? 128 : 32;
  launch(col_group_rms_norm_kernel, unsigned(groups), threads, 0, ctx.stream, out.f32(), x.f32(),
         w.empty() ? nullptr : w.f32(), group, x.cols / group, eps);
  CUDA_CHECK_LAUNCH();
}

}  // namespace kestrel::cuda
