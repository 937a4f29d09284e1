// The residual add and norm of a row as rms_norm.cu's add_rms_norm computes it, for the kernels
// that end a sub-layer with the residual add and norm of their output in their last block
// (ResidualNorm, ops.h): the GEMV of an output projection and the MoE's one-row down kernel.
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

// ---- the residual add and norm in a kernel's last block ----
// A kernel that writes a sub-layer's output y [rows, n] may end, in every thread of every block,
// with residual_norm_tail: each block counts itself done on a device counter once its stores are
// visible, and the block that counts last (all of y written) runs the add and norm of each row —
// add_rms_norm(residual, y, w, out)'s bits, without a launch of its own — and puts the counter
// back to zero for the next such kernel (kernels on the stream run one after another: the next
// touches the counter only after its pdl_begin, once this kernel has completed).
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

// Whether residual_norm_tail takes a row of n (blocks of kTailThreads threads): up to kTailMaxN
// values, a multiple of 4 (rows 16-byte aligned: residual_norm_tail_for checks), where a V-thread
// holds at most 8 values and a thread plays at most 2 V-threads.
__host__ __device__ constexpr bool tail_norm_fits(int64_t n) { return n > 0 && n <= kTailMaxN && n % 4 == 0; }
static_assert(row_norm_per_thread(kTailMaxN) <= 8 && row_norm_threads(kTailMaxN) <= 2 * kTailThreads &&
              kTailMaxN % (4 * kTailThreads) == 0);

// One row of n values: rr += y, then o = rr / rms(rr) * w (w may be null), as rms_norm.cu's
// rms_norm_staged_kernel<R, true> computes it with V = row_norm_threads(n) threads of
// R = row_norm_per_thread(n) values: the sums rr + y (float4 loads, y through L2 only: other
// blocks of the running kernel stored it) are kept in shared memory, where each thread sums the
// squares of the V-threads it stands in for — thread t plays V-threads t + m * blockDim.x, m < M
// (M = V / blockDim.x, or 1 where blockDim.x >= V; those past V hold nothing), V-thread u sums
// elements u + j * V in j order — and the V sums meet as block_sum meets V threads' values (each
// warp's by warp_sum, then the warps' in order): the same values, sums and order, so the same
// bits. The values pass through shared memory rather than registers because a kernel's registers
// are its most demanding code's, and a GEMV that wants more than the kernel before it leaves free
// cannot start early beside it (pdl_begin). o may be y, never rr.
__device__ __forceinline__ void residual_norm_row(float* rr, const float* y, const float* __restrict__ w, float* o,
                                                  int n, float eps) {
  constexpr int kQuads = int(kTailMaxN / 4 / kTailThreads);  // float4s a thread at most
  __shared__ __align__(16) float sv[kTailMaxN];
  const int V = row_norm_threads(n), R = row_norm_per_thread(n), b = int(blockDim.x), t = int(threadIdx.x);
  const int M = V > b ? V / b : 1, n4 = n / 4;
  float4 a[kQuads], c[kQuads];
#pragma unroll
  for (int k = 0; k < kQuads; ++k) {
    const int q = t + k * b;
    if (q < n4) {
      a[k] = reinterpret_cast<const float4*>(rr)[q];
      c[k] = __ldcg(reinterpret_cast<const float4*>(y) + q);
    }
  }
#pragma unroll
  for (int k = 0; k < kQuads; ++k) {
    const int q = t + k * b;
    if (q < n4) {
      const float4 v = make_float4(a[k].x + c[k].x, a[k].y + c[k].y, a[k].z + c[k].z, a[k].w + c[k].w);
      reinterpret_cast<float4*>(rr)[q] = v;
      reinterpret_cast<float4*>(sv)[q] = v;
    }
  }
  __syncthreads();
  double ss[2] = {0.0, 0.0};
#pragma unroll
  for (int m = 0; m < 2; ++m) {
    const int u = t + m * b;
    if (m < M && u < V) {
      for (int j = 0; j < R; ++j) {
        const int i = u + j * V;
        if (i < n) ss[m] += double(sv[i]) * double(sv[i]);
      }
    }
  }
  __shared__ double partial[32];
#pragma unroll
  for (int m = 0; m < 2; ++m) ss[m] = warp_sum(ss[m]);
  if ((t & 31) == 0) {
#pragma unroll
    for (int m = 0; m < 2; ++m) {
      const int vw = (t + m * b) >> 5;
      if (m < M && vw < V / 32) partial[vw] = ss[m];
    }
  }
  __syncthreads();
  double total = 0.0;
  for (int i = 0; i < V / 32; ++i) total += partial[i];  // block_sum's order
  const float s = rms_scale(total, n, eps);
#pragma unroll
  for (int k = 0; k < kQuads; ++k) {
    const int q = t + k * b;
    if (q < n4) {
      const float4 v = reinterpret_cast<const float4*>(sv)[q];
      float4 r;
      if (w) {
        const float4 g = reinterpret_cast<const float4*>(w)[q];
        r = make_float4((v.x * s) * g.x, (v.y * s) * g.y, (v.z * s) * g.z, (v.w * s) * g.w);
      } else {
        r = make_float4(v.x * s, v.y * s, v.z * s, v.w * s);
      }
      reinterpret_cast<float4*>(o)[q] = r;
    }
  }
  __syncthreads();  // sv and partial are read before a next row writes them
}

// Every thread of every block calls it after its last store of y. The block count and the last
// block's reads follow the grid barrier's pattern: the block's threads meet, then one thread
// fences (making what the block stored visible before its count) and counts; the last block's
// counting thread fences again before the block reads (y through L2 only).
__device__ __forceinline__ void residual_norm_tail(const ResidualNormTail& t) {
  __shared__ bool last;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    last = atomicAdd(t.counter, 1u) + 1 == gridDim.x * gridDim.y * gridDim.z;
    if (last) __threadfence();
  }
  __syncthreads();
  if (!last) return;
  for (int64_t r = 0; r < t.rows; ++r)
    residual_norm_row(t.residual + r * t.n, t.y + r * t.n, t.w, t.out + r * t.n, int(t.n), t.eps);
  if (threadIdx.x == 0) *t.counter = 0;
}

}  // namespace kestrel::cuda
