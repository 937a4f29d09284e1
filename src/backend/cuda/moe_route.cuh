// An MoE layer's route for one row (moe_route's kernel), as a block's device function: moe.cu's
// route kernel runs it, and matmul.cu's kernel that runs the layer's shared expert's down
// projection runs it in extra blocks of the same launch (matmul_gated_and_route).
#pragma once

#include "backend/cuda/device_util.cuh"

namespace kestrel::cuda {

constexpr int kMaxTopK = 64;
constexpr int kMaxRouteExperts = 4096;

// A block of kRouteThreads threads routes row t of logits [T, E]; prob: E doubles of shared
// memory (the kernel's dynamic shared memory). The softmax in double, then each expert's rank in
// the order (probability descending, index ascending) counted against all E (a NaN probability
// ranks last): the k experts of rank < k land in their slots directly, with no k rounds of a
// warp-wide argmax (which were most of the kernel's time at E = 256).
constexpr int kRouteThreads = 256;
// The static shared memory moe_route_row declares (chosen, part, part_max below).
constexpr size_t kRouteStaticSmem =
    sizeof(double) * (kMaxTopK + kRouteThreads / 32) + sizeof(float) * (kRouteThreads / 32);
__device__ __forceinline__ void moe_route_row(int32_t* __restrict__ ids,         // [T, k]
                                              float* __restrict__ weights,       // [T, k]
                                              const float* __restrict__ logits,  // [T, E]
                                              int E, int k, bool norm_topk, int64_t t, double* prob) {
  __shared__ double chosen[kMaxTopK];
  __shared__ double part[kRouteThreads / 32];
  __shared__ float part_max[kRouteThreads / 32];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  constexpr int kWarpsR = kRouteThreads / 32;
  const float* l = logits + t * E;
  float mx = -INFINITY;
  for (int e = tid; e < E; e += kRouteThreads) mx = fmaxf(mx, l[e]);
  mx = warp_max(mx);
  if (lane == 0) part_max[warp] = mx;
  __syncthreads();
  mx = part_max[0];
  for (int w = 1; w < kWarpsR; ++w) mx = fmaxf(mx, part_max[w]);
  double sum = 0.0;
  for (int e = tid; e < E; e += kRouteThreads) {
    prob[e] = exp(double(l[e]) - double(mx));
    sum += prob[e];
  }
  sum = warp_sum(sum);
  if (lane == 0) part[warp] = sum;
  __syncthreads();
  sum = 0.0;
  for (int w = 0; w < kWarpsR; ++w) sum += part[w];  // the warps in a fixed order
  for (int e = tid; e < E; e += kRouteThreads) {
    const double v = prob[e] / sum;
    prob[e] = v != v ? -1.0 : v;  // NaN: below every probability, so the ranks stay a permutation
  }
  __syncthreads();
  for (int e = tid; e < E; e += kRouteThreads) {
    const double p = prob[e];
    int rank = 0;
    for (int o = 0; o < E; ++o) {
      const double q = prob[o];
      rank += (q > p || (q == p && o < e)) ? 1 : 0;
    }
    if (rank < k) {
      ids[t * k + rank] = e;
      chosen[rank] = p;
    }
  }
  __syncthreads();
  if (tid == 0) {
    double denom = 0.0;
    for (int j = 0; j < k; ++j) denom += chosen[j];
    for (int j = 0; j < k; ++j) weights[t * k + j] = float(norm_topk ? chosen[j] / denom : chosen[j]);
  }
}

}  // namespace kestrel::cuda
