// One row's RMS norm (with the residual add before it) as rms_norm.cu's staged kernel computes
// it, written once for that kernel and for the kernels that end a sub-layer with the residual add
// and norm of their output in their last block (ResidualNorm, ops.h): the GEMV of an output
// projection and the MoE's one-row down kernel (residual_norm_tail below).
#pragma once

#include "backend/cuda/device_util.cuh"

namespace kestrel::cuda {

// The threads rms_norm.cu's launch_row_norm gives a row of n values.
__host__ __device__ constexpr int row_norm_threads(int64_t n) { return n >= 1024 ? 512 : n >= 256 ? 256 : 128; }

// The values each of those threads holds in registers: ceil(n / threads) rounded up to 1, 2, 4,
// 8 or 16, or 0 where that is more than 16 (launch_row_norm's loop kernels).
__host__ __device__ constexpr int row_norm_per_thread(int64_t n) {
  const int64_t threads = row_norm_threads(n), per = (n + threads - 1) / threads;
  return per <= 1 ? 1 : per <= 2 ? 2 : per <= 4 ? 4 : per <= 8 ? 8 : per <= 16 ? 16 : 0;
}

// One row of n values: (kAdd) residual rr += x, then o = rr / rms(rr) * w (without kAdd:
// o = x / rms(x) * w; w may be null), by a block of blockDim.x threads standing in for
// V = row_norm_threads(n) threads, R = row_norm_per_thread(n) values each. Thread t plays the
// V-threads t + m * blockDim.x for m < M (M = V / blockDim.x, or 1 where blockDim.x >= V; those
// past V hold nothing); V-thread u holds elements u + j * V, j < R, and sums their squares in j
// order; the V sums meet as block_sum meets V threads' values (each warp's by warp_sum, then the
// warps' in order). So the result is the same bits whatever blockDim.x, M and R are the compile-
// time bounds kR >= R, kM >= M (the loops unroll to them). kL2: read x through L2 only (it was
// stored by other blocks of the running kernel). o may be x (each element is read by the thread
// that writes it, before), never rr.
template <int kR, int kM, bool kAdd, bool kL2 = false>
__device__ __forceinline__ void row_norm(float* rr, const float* x, const float* __restrict__ w, float* o, int64_t n,
                                         float eps, int R = kR, int M = kM) {
  const int V = row_norm_threads(n), rows_n = int(n), b = int(blockDim.x), t = int(threadIdx.x);
  // element j of stand-in m, or -1 (32-bit: a row is far shorter than 2^31)
  const auto at = [&](int m, int j) {
    const int u = t + m * b, i = u + j * V;
    return m < M && j < R && u < V && i < rows_n ? i : -1;
  };
  float v[kM][kR], wv[kM][kR];
#pragma unroll
  for (int m = 0; m < kM; ++m) {
#pragma unroll
    for (int j = 0; j < kR; ++j) {
      const int i = at(m, j);
      float xi = 0.0f;
      if (i >= 0) xi = kL2 ? __ldcg(x + i) : x[i];
      v[m][j] = i >= 0 ? (kAdd ? rr[i] + xi : xi) : 0.0f;
      wv[m][j] = w && i >= 0 ? w[i] : 1.0f;
    }
  }
  double ss[kM];
#pragma unroll
  for (int m = 0; m < kM; ++m) {
    ss[m] = 0.0;
#pragma unroll
    for (int j = 0; j < kR; ++j) {
      const int i = at(m, j);
      if (i >= 0) {
        if constexpr (kAdd) rr[i] = v[m][j];
        ss[m] += double(v[m][j]) * double(v[m][j]);
      }
    }
  }
  __shared__ double partial[32];
#pragma unroll
  for (int m = 0; m < kM; ++m) ss[m] = warp_sum(ss[m]);
  __syncthreads();  // partial may still be read by a previous call
  if ((t & 31) == 0) {
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      const int vw = (t + m * b) >> 5;
      if (m < M && vw < V / 32) partial[vw] = ss[m];
    }
  }
  __syncthreads();
  double total = 0.0;
  for (int i = 0; i < V / 32; ++i) total += partial[i];  // block_sum's order
  const float s = rms_scale(total, n, eps);
#pragma unroll
  for (int m = 0; m < kM; ++m) {
#pragma unroll
    for (int j = 0; j < kR; ++j) {
      const int i = at(m, j);
      if (i >= 0) o[i] = w ? (v[m][j] * s) * wv[m][j] : v[m][j] * s;
    }
  }
}

// ---- the residual add and norm in a kernel's last block ----
// A kernel that writes a sub-layer's output y [rows, n] may end, in every thread of every block,
// with residual_norm_tail: each block counts itself done on a device counter once its stores are
// visible, and the block that counts last (all of y written) runs row_norm with the add for each
// row — add_rms_norm(residual, y, w, out)'s bits, without a launch of its own — and puts the
// counter back to zero for the next such kernel (kernels on the stream run one after another: the
// next touches the counter only after its pdl_begin, once this kernel has completed).
// Blocks of kTailThreads threads; n at most kTailMaxN (two V-threads of 8 values a thread).
constexpr int kTailThreads = 256;
constexpr int64_t kTailMaxN = 4096;
struct ResidualNormTail {
  float* residual = nullptr;    // [rows, n]
  const float* y = nullptr;     // [rows, n], written by the kernel
  const float* w = nullptr;     // [n] or null
  float* out = nullptr;         // [rows, n]
  unsigned* counter = nullptr;  // zero before the kernel, zero after
  int64_t rows = 0, n = 0;
  float eps = 0.0f;
};

// Whether residual_norm_tail takes a row of n (blocks of kTailThreads threads): up to kTailMaxN,
// where a V-thread holds at most 8 values and a thread plays at most 2 V-threads.
__host__ __device__ constexpr bool tail_norm_fits(int64_t n) { return n > 0 && n <= kTailMaxN; }
static_assert(row_norm_per_thread(kTailMaxN) <= 8 && row_norm_threads(kTailMaxN) <= 2 * kTailThreads &&
              row_norm_per_thread(1023) <= 8 && row_norm_threads(1023) <= kTailThreads);

__device__ __forceinline__ void residual_norm_tail(const ResidualNormTail& t) {
  __shared__ unsigned ticket;
  __threadfence();  // this thread's stores of y, before the block counts itself done
  __syncthreads();
  if (threadIdx.x == 0) ticket = atomicAdd(t.counter, 1u);
  __syncthreads();
  if (ticket + 1 != gridDim.x * gridDim.y * gridDim.z) return;
  __threadfence();  // every other block's y, seen through their counts
  const int R = row_norm_per_thread(t.n), V = row_norm_threads(t.n);
  const int M = V > int(blockDim.x) ? V / int(blockDim.x) : 1;
  for (int64_t r = 0; r < t.rows; ++r)
    row_norm<8, 2, true, true>(t.residual + r * t.n, t.y + r * t.n, t.w, t.out + r * t.n, t.n, t.eps, R, M);
  if (threadIdx.x == 0) *t.counter = 0;
}

}  // namespace kestrel::cuda
