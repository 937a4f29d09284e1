// The order in which the ResidualNorm ops (ops.h) sum a row's squares, shared by every kernel that
// forms that norm: rms_norm.cu's residual_norm_kernel, the one-row GEMV that adds its output into
// the residual (gemv.cuh, ResidualOut) and the GEMVs that scale the residual as they load it
// (gemv.cuh, NormX). One order everywhere gives one scale, so the normalized rows have the same
// bits whichever kernels formed them: a one-row step that folds the norm into its GEMVs, a batch
// that launches residual_norm_kernel, deterministic mode's row alone or batched.
//  - A group: kResidualNormGroup = 16 consecutive values, value j in lane j of a half warp, squared
//    in double and summed by half_warp_sum (an xor butterfly: every lane holds the same bits).
//  - The row: group g's sum in lane g % 32, each lane's groups summed in increasing g, then
//    warp_sum over the lanes (row_sumsq). Then rms_scale, and out = (x * s) * w.
#pragma once

#include "backend/cuda/device_util.cuh"

namespace kestrel::cuda {

constexpr int kNormGroup = 16;  // ops.h's kResidualNormGroup

__device__ __forceinline__ double half_warp_sum(double v) {
#pragma unroll
  for (int o = kNormGroup / 2; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

// The row's sum of squares from its groups' sums (the whole warp calls it; every lane gets it).
// A lane's groups are loaded kBatch at a time before they are summed (in increasing g), so that
// a row of up to 32 kBatch groups (4096 values) costs one round trip to memory, not one a group.
__device__ __forceinline__ double row_sumsq(const double* __restrict__ groups, int64_t n_groups, int lane) {
  constexpr int kBatch = 8;
  double t = 0.0;
  for (int64_t g0 = lane; g0 < n_groups; g0 += 32 * kBatch) {
    double v[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) v[j] = g0 + 32 * j < n_groups ? groups[g0 + 32 * j] : 0.0;
#pragma unroll
    for (int j = 0; j < kBatch; ++j)
      if (g0 + 32 * j < n_groups) t += v[j];
  }
  return warp_sum(t);
}

// One normalized value, the expression rms_norm stores.
__device__ __forceinline__ float norm_value(float x, float s, const float* __restrict__ w, int64_t i) {
  return w ? (x * s) * w[i] : x * s;
}

}  // namespace kestrel::cuda
