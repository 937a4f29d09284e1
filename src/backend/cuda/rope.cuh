// The RoPE pieces rope.cu's kernels and the tiled decode attention (attention_tile.cu, which can
// norm and rotate q and k itself: TileQk) share, so that both give the same bits: the pairs'
// inverse frequencies, a pair's rotation, and a warp's head norm and rotation.
#pragma once

#include "backend/cuda/device_util.cuh"

namespace kestrel::cuda {

constexpr int kMaxPairs = 256;
struct InvFreqs {
  float v[kMaxPairs];  // rope_inv_freq of each rotating pair, formed on the host like the CPU's
};

// The per-pair inverse frequencies of a RoPE config (rope_inv_freq, as the CPU forms them).
InvFreqs inv_freqs(const RopeConfig& cfg);

// A pair's rotation, its roundings spelled out so that every kernel gives the same bits:
// x' = a c - b s, y' = b c + a s, the second product rounded first.
__device__ __forceinline__ void rotate_pair(float a, float b, float c, float s, float& x, float& y) {
  x = __fmaf_rn(a, c, -__fmul_rn(b, s));
  y = __fmaf_rn(b, c, __fmul_rn(a, s));
}

// A warp's head of d = 32 R values, lane + 32 j in xv[j]: loaded from src and, when w is given,
// RMS-normalized as group_rms_norm_staged_kernel does (a lane's values in order, the double sum
// over the warp).
template <int R>
__device__ __forceinline__ void warp_load_norm_head(float (&xv)[R], const float* src, const float* __restrict__ w,
                                                    int d, float eps) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int j = 0; j < R; ++j) xv[j] = src[lane + 32 * j];
  if (!w) return;
  float wv[R];
#pragma unroll
  for (int j = 0; j < R; ++j) wv[j] = w[lane + 32 * j];
  double ss = 0.0;
#pragma unroll
  for (int j = 0; j < R; ++j) ss += double(xv[j]) * double(xv[j]);
  ss = warp_sum(ss);
  const float sc = rms_scale(ss, d, eps);
#pragma unroll
  for (int j = 0; j < R; ++j) xv[j] = (xv[j] * sc) * wv[j];
}

// The head in xv rotated at position pos (pairs (i, i + span) for i < half, as rope_kernel does)
// through the warp's shared copy hs [d]: put(i, value) for every dim i the rotation gives (both of
// a pair's dims from the lane of its first) and every dim outside the pairs. A lane puts only dims
// no other lane reads, so put may write hs itself (the rotation in place).
template <int R, typename Put>
__device__ __forceinline__ void warp_rope_head(const float (&xv)[R], float* hs, float pos, int half, int span,
                                               const InvFreqs& freqs, Put&& put) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int j = 0; j < R; ++j) hs[lane + 32 * j] = xv[j];
  __syncwarp();
#pragma unroll
  for (int j = 0; j < R; ++j) {
    const int i = lane + 32 * j;
    if (i < half) {
      const float angle = pos * freqs.v[i];
      const float c = float(cos(double(angle))), s = float(sin(double(angle)));
      float a, b;
      rotate_pair(hs[i], hs[i + span], c, s, a, b);
      put(i, a);
      put(i + span, b);
    } else if (i < span || i >= span + half) {
      put(i, xv[j]);
    }
  }
}

}  // namespace kestrel::cuda
