// moe_route: softmax over the experts, top-k (ties to the lower index), optional renormalization.
// moe_experts: the routed gated-MLP experts (SwiGLU, or GeGLU for Gemma 4), per (token, rank)
// pair p with expert e:
//   h[p, F]   = act(gate_e x_t) * up_e x_t                       act: silu or gelu-tanh
//   y[p, H]   = (weight_p * scale_e) * down_e h[p]              scale_e: experts.expert_scale, or 1
//   out[t, H] = sum_j y[t * k + j]  in rank order     (moe_sum_kernel)
// The pairs are grouped by expert on the device (moe_group_kernel, one launch: count, scan,
// scatter; the scan also lists the experts that got a pair); then each block takes one listed
// expert's column tile and runs its pairs 8 at a time with their inputs staged in shared memory,
// so an expert's weights are read once per 8 of its pairs rather than once per pair (prefill, and
// decode batches, share experts). The grid covers min(E, pairs) experts, not all E: a decode step
// of 8 pairs launches 8 expert rows of blocks, and those past the device-side count of touched
// experts exit. A pair's sums run in the same order whatever shares its pass, so results do not
// depend on the batch. Decode steps of up to kPairMaxRows tokens skip the grouping: per-pair
// kernels, the down one also summing each token's pairs and adding the shared expert
// (moe_experts_shared), with the same bits. Unaligned shapes take the scalar per-pair kernels
// (one warp per output of one pair). Block-format experts (Q4_K, MXFP4, ...) run the grouped or
// per-pair kernels like BF16 ones, each 8 weights decoded in registers (quant_blocks.cuh). Outside
// deterministic mode and kExact, the grouped path's products of BF16 and block-format experts run
// on the tensor cores instead (moe_mma.cu).
#include "backend/cuda/moe_mma.h"
#include "backend/cuda/moe_route.cuh"
#include "backend/cuda/quant_blocks.cuh"

namespace kestrel::cuda {
namespace {

// grid: T blocks of kRouteThreads; dynamic smem: E doubles (moe_route_row, moe_route.cuh).
__global__ void __launch_bounds__(kRouteThreads) moe_route_kernel(int32_t* __restrict__ ids,       // [T, k]
                                                                  float* __restrict__ weights,     // [T, k]
                                                                  const float* __restrict__ logits,  // [T, E]
                                                                  int E, int k, bool norm_topk) {
  pdl_begin();
  extern __shared__ double prob[];  // [E]
  moe_route_row(ids, weights, logits, E, k, norm_topk, blockIdx.x, prob);
}

constexpr int kWarps = 8;

// grid: (ceil(F / kWarps), T * k); warp per hidden unit f of pair p.
template <typename W, Activation A>
__global__ void moe_gate_up_kernel(float* __restrict__ hbuf,        // [T * k, F]
                                   const float* __restrict__ x,     // [T, H]
                                   const int32_t* __restrict__ ids, // [T * k]
                                   const void* const* __restrict__ gate,  // [E] -> [F, H]
                                   const void* const* __restrict__ up,    // [E] -> [F, H]
                                   int k, int64_t H, int64_t F, bool vec) {
  pdl_begin();
  const int64_t f = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (f >= F) return;
  const int64_t p = blockIdx.y, t = p / k;
  const int e = ids[p];
  const float* xr = x + t * H;
  const float g = warp_dot(xr, static_cast<const W*>(gate[e]) + f * H, H, vec);
  const float u = warp_dot(xr, static_cast<const W*>(up[e]) + f * H, H, vec);
  if ((threadIdx.x & 31) == 0) hbuf[p * F + f] = activate(g, A) * u;
}

// grid: (ceil(H / kWarps), T * k); warp per output c of pair p. Scaled: the routing weight times
// expert_scale[e] (a template flag, so the unscaled kernel is the Qwen line's as it was).
template <typename W, bool Scaled>
__global__ void moe_down_kernel(float* __restrict__ ybuf,           // [T * k, H]
                                const float* __restrict__ hbuf,     // [T * k, F]
                                const int32_t* __restrict__ ids,    // [T * k]
                                const float* __restrict__ weights,  // [T * k]
                                const void* const* __restrict__ down,  // [E] -> [H, F]
                                const float* __restrict__ expert_scale,  // [E] or null
                                int64_t H, int64_t F, bool vec) {
  pdl_begin();
  const int64_t c = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (c >= H) return;
  const int64_t p = blockIdx.y;
  const float y = warp_dot(hbuf + p * F, static_cast<const W*>(down[ids[p]]) + c * F, F, vec);
  const float wp = Scaled ? weights[p] * expert_scale[ids[p]] : weights[p];
  if ((threadIdx.x & 31) == 0) ybuf[p * H + c] = wp * y;
}

// ---- grouping pairs by expert ----

// One block of kGroupThreads threads groups a step's pairs by expert, in one launch:
//   offsets [E + 1]     exclusive prefix sums of the experts' pair counts;
//   active [*n_active]  the experts with at least one pair, ascending (the grouped kernels' grid rows);
//   order [P]           order[offsets[e] ..] = the pairs routed to e (in no particular order within
//                       an expert: a pair's sums do not depend on its slot).
// The counts and cursors live in shared memory (dynamic: 2 E ints). A decode step has a few
// pairs, so one block is plenty, and one launch instead of a memset and three kernels matters
// there (40 MoE layers a step on the 35B-A3B).
constexpr int kGroupThreads = 1024;
__global__ void __launch_bounds__(kGroupThreads) moe_group_kernel(int32_t* __restrict__ offsets,
                                                                  int32_t* __restrict__ active,
                                                                  int32_t* __restrict__ n_active,
                                                                  int32_t* __restrict__ order,
                                                                  const int32_t* __restrict__ ids, int64_t P, int E) {
  pdl_begin();
  extern __shared__ int32_t group_smem[];
  int32_t* counts = group_smem;  // [E]
  int32_t* cursor = counts + E;  // [E]
  __shared__ int32_t part[kGroupThreads], used[kGroupThreads];
  const int tid = threadIdx.x;
  for (int e = tid; e < E; e += kGroupThreads) counts[e] = 0;
  __syncthreads();
  for (int64_t p = tid; p < P; p += kGroupThreads) atomicAdd(&counts[ids[p]], 1);
  __syncthreads();
  const int per = (E + kGroupThreads - 1) / kGroupThreads, first = tid * per;
  int32_t sum = 0, n = 0;
  for (int i = first; i < first + per && i < E; ++i) {
    sum += counts[i];
    n += counts[i] > 0 ? 1 : 0;
  }
  part[tid] = sum;
  used[tid] = n;
  __syncthreads();
  for (int d = 1; d < kGroupThreads; d <<= 1) {  // inclusive scans of the per-thread sums and expert counts
    const int32_t v = tid >= d ? part[tid - d] : 0;
    const int32_t u = tid >= d ? used[tid - d] : 0;
    __syncthreads();
    part[tid] += v;
    used[tid] += u;
    __syncthreads();
  }
  int32_t run = tid ? part[tid - 1] : 0;
  int32_t slot = tid ? used[tid - 1] : 0;
  for (int i = first; i < first + per && i < E; ++i) {
    offsets[i] = run;
    cursor[i] = run;
    run += counts[i];
    if (counts[i] > 0) active[slot++] = i;
  }
  if (tid == kGroupThreads - 1) {
    offsets[E] = part[kGroupThreads - 1];
    *n_active = used[kGroupThreads - 1];
  }
  __syncthreads();  // cursor complete
  for (int64_t p = tid; p < P; p += kGroupThreads) order[atomicAdd(&cursor[ids[p]], 1)] = int32_t(p);
}
// Experts one launch of moe_group_kernel takes (its 2 E ints of shared memory within the opt-in limit).
constexpr int kGroupMaxExperts = 16384;

// ---- grouped expert kernels ----

constexpr int kGroupRows = 8;  // pairs per pass over an expert's weights
constexpr int kTileK = 1024;   // input columns staged in shared memory at a time

// Stages rows src[row_of(r)] [kt, kt + len) for r < n into xs [kGroupRows, kTileK].
__device__ __forceinline__ void stage_rows(float* xs, const float* src, const int64_t* rows, int n, int64_t K,
                                           int64_t kt, int len) {
  for (int i = threadIdx.x * 4; i < n * len; i += blockDim.x * 4) {
    const int r = i / len, c = i - r * len;
    *reinterpret_cast<float4*>(xs + r * kTileK + c) = *reinterpret_cast<const float4*>(src + rows[r] * K + kt + c);
  }
}

// The gate and up rows f0 .. f0 + C - 1 of one expert (past F: the last row, read and dropped).
template <typename W, int C>
__device__ __forceinline__ void gate_up_rows(typename WeightRows<W>::Row (&gr)[C], typename WeightRows<W>::Row (&ur)[C],
                                             const void* gate, const void* up, int64_t f0, int64_t F, int64_t H) {
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const int64_t f = f0 + c < F ? f0 + c : F - 1;
    gr[c] = WeightRows<W>::row(gate, f, H);
    ur[c] = WeightRows<W>::row(up, f, H);
  }
}

// grid: (ceil(F / (kWarps * 2)), min(E, T * k)); each warp two hidden units f of expert
// active[blockIdx.y], for all its pairs (rows past *n_active exit). Needs H % 8 == 0 and 16-byte
// aligned rows.
template <typename W, Activation A>
__global__ void moe_gate_up_grouped_kernel(float* __restrict__ hbuf,            // [T * k, F]
                                           const float* __restrict__ x,         // [T, H]
                                           const int32_t* __restrict__ order,   // [T * k]
                                           const int32_t* __restrict__ offsets, // [E + 1]
                                           const int32_t* __restrict__ active,  // [E]
                                           const int32_t* __restrict__ n_active,  // [1]
                                           const void* const* __restrict__ gate, const void* const* __restrict__ up,
                                           int k, int64_t H, int64_t F) {
  pdl_begin();
  constexpr int C = 2;
  __shared__ __align__(16) float xs[kGroupRows * kTileK];
  __shared__ int64_t tok[kGroupRows], pair[kGroupRows];
  if (int(blockIdx.y) >= *n_active) return;
  const int e = active[blockIdx.y], begin = offsets[e], end = offsets[e + 1];
  const int lane = threadIdx.x & 31;
  const int64_t f0 = (int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5)) * C;
  using Rows = WeightRows<W>;
  typename Rows::Row gr[C], ur[C];
  gate_up_rows<W, C>(gr, ur, gate[e], up[e], f0, F, H);
  for (int p0 = begin; p0 < end; p0 += kGroupRows) {
    const int n = end - p0 < kGroupRows ? end - p0 : kGroupRows;
    __syncthreads();  // the previous pass no longer reads tok, xs
    if (threadIdx.x < n) {
      pair[threadIdx.x] = order[p0 + threadIdx.x];
      tok[threadIdx.x] = pair[threadIdx.x] / k;
    }
    float ag[kGroupRows][C], au[kGroupRows][C];
#pragma unroll
    for (int r = 0; r < kGroupRows; ++r)
#pragma unroll
      for (int c = 0; c < C; ++c) ag[r][c] = au[r][c] = 0.0f;
    for (int64_t kt = 0; kt < H; kt += kTileK) {
      const int len = int(H - kt < kTileK ? H - kt : kTileK);
      __syncthreads();
      stage_rows(xs, x, tok, n, H, kt, len);
      __syncthreads();
      if (f0 >= F) continue;
      for (int kk = lane * 8; kk < len; kk += 256) {
        float wg[C][8], wu[C][8];
#pragma unroll
        for (int c = 0; c < C; ++c) {
          Rows::load8(gr[c], kt + kk, wg[c]);
          Rows::load8(ur[c], kt + kk, wu[c]);
        }
#pragma unroll
        for (int r = 0; r < kGroupRows; ++r) {
          if (r >= n) break;
          const float4 a = *reinterpret_cast<const float4*>(xs + r * kTileK + kk);
          const float4 b = *reinterpret_cast<const float4*>(xs + r * kTileK + kk + 4);
#pragma unroll
          for (int c = 0; c < C; ++c) {
            ag[r][c] += dot8(a, b, wg[c]);
            au[r][c] += dot8(a, b, wu[c]);
          }
        }
      }
    }
    if (f0 >= F) continue;
#pragma unroll
    for (int r = 0; r < kGroupRows; ++r) {
      if (r >= n) break;
#pragma unroll
      for (int c = 0; c < C; ++c) {
        const float sg = warp_sum(ag[r][c]), su = warp_sum(au[r][c]);
        if (lane == 0 && f0 + c < F) hbuf[pair[r] * F + f0 + c] = activate(sg, A) * su;
      }
    }
  }
}

// grid: (ceil(H / (kWarps * 4)), min(E, T * k)); each warp four outputs c of expert
// active[blockIdx.y], for all its pairs: ybuf[p, c] = weight_p * down_e[c] . h[p] (rows past
// *n_active exit; weight_p times expert_scale[e] when Scaled). Needs F % 8 == 0 and 16-byte aligned rows.
template <typename W, bool Scaled>
__global__ void moe_down_grouped_kernel(float* __restrict__ ybuf,             // [T * k, H]
                                        const float* __restrict__ hbuf,       // [T * k, F]
                                        const int32_t* __restrict__ order,    // [T * k]
                                        const int32_t* __restrict__ offsets,  // [E + 1]
                                        const int32_t* __restrict__ active,   // [E]
                                        const int32_t* __restrict__ n_active,  // [1]
                                        const float* __restrict__ weights,    // [T * k]
                                        const void* const* __restrict__ down,
                                        const float* __restrict__ expert_scale,  // [E] or null
                                        int64_t H, int64_t F) {
  pdl_begin();
  constexpr int C = 4;
  __shared__ __align__(16) float xs[kGroupRows * kTileK];
  __shared__ int64_t pair[kGroupRows];
  if (int(blockIdx.y) >= *n_active) return;
  const int e = active[blockIdx.y], begin = offsets[e], end = offsets[e + 1];
  const int lane = threadIdx.x & 31;
  const int64_t c0 = (int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5)) * C;
  using Rows = WeightRows<W>;
  typename Rows::Row dr[C];
#pragma unroll
  for (int c = 0; c < C; ++c) dr[c] = Rows::row(down[e], c0 + c < H ? c0 + c : H - 1, F);
  for (int p0 = begin; p0 < end; p0 += kGroupRows) {
    const int n = end - p0 < kGroupRows ? end - p0 : kGroupRows;
    __syncthreads();
    if (threadIdx.x < n) pair[threadIdx.x] = order[p0 + threadIdx.x];
    float acc[kGroupRows][C];
#pragma unroll
    for (int r = 0; r < kGroupRows; ++r)
#pragma unroll
      for (int c = 0; c < C; ++c) acc[r][c] = 0.0f;
    for (int64_t kt = 0; kt < F; kt += kTileK) {
      const int len = int(F - kt < kTileK ? F - kt : kTileK);
      __syncthreads();
      stage_rows(xs, hbuf, pair, n, F, kt, len);
      __syncthreads();
      if (c0 >= H) continue;
      for (int kk = lane * 8; kk < len; kk += 256) {
        float wf[C][8];
#pragma unroll
        for (int c = 0; c < C; ++c) Rows::load8(dr[c], kt + kk, wf[c]);
#pragma unroll
        for (int r = 0; r < kGroupRows; ++r) {
          if (r >= n) break;
          const float4 a = *reinterpret_cast<const float4*>(xs + r * kTileK + kk);
          const float4 b = *reinterpret_cast<const float4*>(xs + r * kTileK + kk + 4);
#pragma unroll
          for (int c = 0; c < C; ++c)
            acc[r][c] += dot8(a, b, wf[c]);
        }
      }
    }
    if (c0 >= H) continue;
#pragma unroll
    for (int r = 0; r < kGroupRows; ++r) {
      if (r >= n) break;
#pragma unroll
      for (int c = 0; c < C; ++c) {
        const float sum = warp_sum(acc[r][c]);
        const float wp = Scaled ? weights[pair[r]] * expert_scale[e] : weights[pair[r]];
        if (lane == 0 && c0 + c < H) ybuf[pair[r] * H + c0 + c] = wp * sum;
      }
    }
  }
}

// The routed sum v of element i (row t) plus a shared expert's output there, when there is one:
// + shared[i] * sigmoid(gate) (gate_cols 1: one a row; H: one an element), or + shared[i]
// (gate_cols 0), the product rounded before the sum as mul_sigmoid then add compute it. The one
// expression both summing kernels end with, so the two paths agree bit for bit.
__device__ __forceinline__ float plus_shared(float v, const float* __restrict__ shared, const float* __restrict__ gate,
                                             int64_t gate_cols, int64_t t, int64_t i) {
  if (!shared) return v;
  const float a = gate_cols ? __fmul_rn(shared[i], sigmoidf(gate[gate_cols == 1 ? t : i])) : shared[i];
  return __fadd_rn(v, a);
}

// ---- per-pair expert kernels (decode steps of up to kPairMaxRows tokens) ----
// One token's k pairs have k different experts, and a few tokens' pairs share few (the
// 35B-A3B's batch of 8: 64 pairs on ~56 experts), so grouping them buys little reuse: these skip
// the grouping launch, read x and h from global memory (L1 / L2) instead of staging them, and the
// down kernel sums a token's pairs (and the shared expert) itself, which removes moe_sum_kernel's
// launch too. Measured on the 35B-A3B's shapes (GpuBench.MoeExpertsDecode, H200): T = 1
// 24.6 -> 20.8 us, T = 8 127 -> 97 us. Each lane visits k in the grouped kernels' order and each sum is rounded as they
// and moe_sum_kernel round it, so a pair's bits, and a token's output, do not depend on the path.

constexpr int64_t kPairMaxRows = 8;

// Weights a block of W holds (1 for plain dtypes).
template <typename W>
constexpr int block_elems() {
  if constexpr (requires { W::kBlockElems; }) {
    return W::kBlockElems;
  } else {
    return 1;
  }
}

// grid: (ceil(F / (kWarps * 2)), T * k); each warp two hidden units f of pair blockIdx.y, U
// steps of 8 weights a lane in flight per row (a lane's sums in the same order for any U).
// Needs H % 8 == 0 and 16-byte aligned rows.
template <typename W, Activation A, int U>
__global__ void moe_gate_up_pair_kernel(float* __restrict__ hbuf,         // [T * k, F]
                                        const float* __restrict__ x,      // [T, H]
                                        const int32_t* __restrict__ ids,  // [T * k]
                                        const void* const* __restrict__ gate, const void* const* __restrict__ up,
                                        int k, int64_t H, int64_t F) {
  pdl_begin();
  constexpr int C = 2;
  const int lane = threadIdx.x & 31;
  const int64_t f0 = (int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5)) * C;
  if (f0 >= F) return;
  const int64_t p = blockIdx.y;
  const int e = ids[p];
  const float* xr = x + (p / k) * H;
  using Rows = WeightRows<W>;
  typename Rows::Row gr[C], ur[C];
  gate_up_rows<W, C>(gr, ur, gate[e], up[e], f0, F, H);
  float ag[C] = {}, au[C] = {};
#pragma unroll U
  for (int64_t kk = int64_t(lane) * 8; kk < H; kk += 256) {
    const float4 a = *reinterpret_cast<const float4*>(xr + kk);
    const float4 b = *reinterpret_cast<const float4*>(xr + kk + 4);
    float wg[C][8], wu[C][8];
#pragma unroll
    for (int c = 0; c < C; ++c) {
      Rows::load8(gr[c], kk, wg[c]);
      Rows::load8(ur[c], kk, wu[c]);
    }
#pragma unroll
    for (int c = 0; c < C; ++c) {
      ag[c] += dot8(a, b, wg[c]);
      au[c] += dot8(a, b, wu[c]);
    }
  }
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const float sg = warp_sum(ag[c]), su = warp_sum(au[c]);
    if (lane == 0 && f0 + c < F) hbuf[p * F + f0 + c] = activate(sg, A) * su;
  }
}

// grid: (ceil(H / (kWarps * 2)), T); each warp two outputs c of token blockIdx.y:
//   out[t, c] = sum over j in order of weight_p * down_e[c] . h[p]   (p = t * k + j)
// then plus_shared, with moe_down_grouped_kernel's and moe_sum_kernel's roundings. Needs F % 8 == 0 and 16-byte
// aligned rows.
template <typename W, bool Scaled>
__global__ void moe_down_sum_pair_kernel(float* __restrict__ out,            // [T, H]
                                         const float* __restrict__ hbuf,     // [T * k, F]
                                         const int32_t* __restrict__ ids,    // [T * k]
                                         const float* __restrict__ weights,  // [T * k]
                                         const void* const* __restrict__ down,
                                         const float* __restrict__ expert_scale,  // [E] or null
                                         int k, int64_t H, int64_t F, const float* __restrict__ shared,
                                         const float* __restrict__ gate, int64_t gate_cols) {
  pdl_begin();
  constexpr int C = 2;
  const int lane = threadIdx.x & 31;
  const int64_t c0 = (int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5)) * C;
  if (c0 >= H) return;
  const int64_t t = blockIdx.y;
  using Rows = WeightRows<W>;
  float s[C] = {};
#pragma unroll 4
  for (int j = 0; j < k; ++j) {
    const int64_t p = t * k + j;
    const int e = ids[p];
    typename Rows::Row dr[C];
#pragma unroll
    for (int c = 0; c < C; ++c) dr[c] = Rows::row(down[e], c0 + c < H ? c0 + c : H - 1, F);
    const float* hr = hbuf + p * F;
    float acc[C] = {};
    for (int64_t kk = int64_t(lane) * 8; kk < F; kk += 256) {
      const float4 a = *reinterpret_cast<const float4*>(hr + kk);
      const float4 b = *reinterpret_cast<const float4*>(hr + kk + 4);
      float wf[C][8];
#pragma unroll
      for (int c = 0; c < C; ++c) Rows::load8(dr[c], kk, wf[c]);
#pragma unroll
      for (int c = 0; c < C; ++c) acc[c] += dot8(a, b, wf[c]);
    }
    const float wp = Scaled ? weights[p] * expert_scale[e] : weights[p];
#pragma unroll
    for (int c = 0; c < C; ++c) s[c] = __fadd_rn(s[c], __fmul_rn(wp, warp_sum(acc[c])));
  }
  if (lane != 0) return;
#pragma unroll
  for (int c = 0; c < C; ++c) {
    if (c0 + c >= H) break;
    const int64_t i = t * H + c0 + c;
    out[i] = plus_shared(s[c], shared, gate, gate_cols, t, i);
  }
}

// moe_down_sum_pair_kernel's sums for one-row steps, the pairs split over the warps. grid:
// (ceil(H / kDownCols), T) (launched for T = 1); block kWarps warps: outputs c0 .. c0 +
// kDownCols - 1 of token blockIdx.y. Warp w takes the pairs j = w, w + kWarps, ...: a warp's loads (kDownCols rows of one
// expert) do not wait on another pair's, so a k = 8 step reads all its down rows in one round trip
// instead of k in turn; each pair's weighted dot goes to shared memory and one thread a column
// sums them in j order, so the bits are moe_down_sum_pair_kernel's. At 8 rows it was slower
// (GpuBench.MoeExpertsDecode, 35B-A3B shapes, BF16: 95.6 -> 114.5 us), so only T = 1 takes it.
// Before pdl_begin it prefetches its rows into L2 (prefetch_row_bytes: a row's bytes; 0: none)
// while the gate/up kernel runs: the ids it reads were written by moe_route, which completed
// before the gate/up kernel (launched just before this one, with the pdl_begin that releases it)
// passed its wait. For the same reason, with plain-dtype experts a warp loads its first pair's
// first kDownEarly steps of weights into registers before the wait (the 35B-A3B's F = 512 is all
// of them), so the sums start when the wait returns. Needs F % 8 == 0 and 16-byte aligned rows.
constexpr int kDownCols = 8;
constexpr int kDownEarly = 2;
constexpr int64_t kDownPrefetchMax = int64_t(24) << 20;
template <typename W, bool Scaled>
__global__ void __launch_bounds__(kWarps * 32)
    moe_down_sum_split_kernel(float* __restrict__ out,            // [T, H]
                              const float* __restrict__ hbuf,     // [T * k, F]
                              const int32_t* __restrict__ ids,    // [T * k]
                              const float* __restrict__ weights,  // [T * k]
                              const void* const* __restrict__ down,
                              const float* __restrict__ expert_scale,  // [E] or null
                              int k, int64_t H, int64_t F, int64_t prefetch_row_bytes,
                              const float* __restrict__ shared, const float* __restrict__ gate, int64_t gate_cols) {
  constexpr int C = kDownCols;
  __shared__ float part[kMaxTopK][C];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t c0 = int64_t(blockIdx.x) * C, t = blockIdx.y;
  const int64_t n_cols = H - c0 < C ? H - c0 : C;
  const int64_t lines = (prefetch_row_bytes + 127) / 128;
  for (int64_t i = threadIdx.x; i < k * n_cols * lines; i += blockDim.x) {
    const int64_t r = i / lines;
    const char* w = static_cast<const char*>(down[ids[t * k + r / n_cols]]);
    asm volatile("prefetch.global.L2 [%0];" ::"l"(w + (c0 + r % n_cols) * prefetch_row_bytes + (i % lines) * 128));
  }
  using Rows = WeightRows<W>;
  constexpr bool kEarly = std::is_same_v<typename Rows::Row, const W*>;  // plain dtypes
  Raw8<std::conditional_t<kEarly, W, float>> early[kEarly ? kDownEarly : 1][C];
  if constexpr (kEarly) {
    if (warp < k) {
      const W* base = static_cast<const W*>(down[ids[t * k + warp]]);
#pragma unroll
      for (int s = 0; s < kDownEarly; ++s) {
        const int64_t kk = int64_t(lane) * 8 + 256 * s;
        if (kk < F)
#pragma unroll
          for (int c = 0; c < C; ++c) early[s][c] = Raw8<W>::load(base + (c0 + c < H ? c0 + c : H - 1) * F + kk);
      }
    }
  }
  pdl_begin();
  for (int j = warp; j < k; j += kWarps) {
    const int64_t p = t * k + j;
    const int e = ids[p];
    typename Rows::Row dr[C];
#pragma unroll
    for (int c = 0; c < C; ++c) dr[c] = Rows::row(down[e], c0 + c < H ? c0 + c : H - 1, F);
    const float* hr = hbuf + p * F;
    float acc[C] = {};
    int64_t first = int64_t(lane) * 8;
    if constexpr (kEarly) {
      if (j == warp) {  // the steps loaded before the wait, summed in the loop's order
#pragma unroll
        for (int s = 0; s < kDownEarly; ++s) {
          const int64_t kk = int64_t(lane) * 8 + 256 * s;
          if (kk >= F) break;
          const float4 a = *reinterpret_cast<const float4*>(hr + kk);
          const float4 b = *reinterpret_cast<const float4*>(hr + kk + 4);
#pragma unroll
          for (int c = 0; c < C; ++c) {
            float wf[8];
            early[s][c].floats(wf);
            acc[c] += dot8(a, b, wf);
          }
        }
        first += 256 * kDownEarly;
      }
    }
#pragma unroll 2
    for (int64_t kk = first; kk < F; kk += 256) {
      const float4 a = *reinterpret_cast<const float4*>(hr + kk);
      const float4 b = *reinterpret_cast<const float4*>(hr + kk + 4);
      float wf[C][8];
#pragma unroll
      for (int c = 0; c < C; ++c) Rows::load8(dr[c], kk, wf[c]);
#pragma unroll
      for (int c = 0; c < C; ++c) acc[c] += dot8(a, b, wf[c]);
    }
    const float wp = Scaled ? weights[p] * expert_scale[e] : weights[p];
#pragma unroll
    for (int c = 0; c < C; ++c) {
      const float v = __fmul_rn(wp, warp_sum(acc[c]));
      if (lane == 0) part[j][c] = v;
    }
  }
  __syncthreads();
  if (threadIdx.x >= n_cols) return;
  float s = 0.0f;
  for (int j = 0; j < k; ++j) s = __fadd_rn(s, part[j][threadIdx.x]);
  const int64_t i = t * H + c0 + threadIdx.x;
  out[i] = plus_shared(s, shared, gate, gate_cols, t, i);
}

// out[t, c] = sum over j in order of ybuf[t * k + j, c], plus_shared.
__global__ void moe_sum_kernel(float* __restrict__ out, const float* __restrict__ ybuf, int k, int64_t T, int64_t H,
                               const float* __restrict__ shared, const float* __restrict__ gate, int64_t gate_cols) {
  pdl_begin();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < T * H; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / H, c = i % H;
    float s = 0.0f;
    for (int j = 0; j < k; ++j) s += ybuf[(t * k + j) * H + c];
    out[i] = plus_shared(s, shared, gate, gate_cols, t, i);
  }
}

}  // namespace

void check_moe_route(const Tensor& ids, const Tensor& weights, const Tensor& logits, int top_k) {
  check_f32(logits, "moe_route logits");
  check_f32(weights, "moe_route weights");
  const int64_t T = logits.rows, E = logits.cols;
  KCHECK_MSG(ids.dtype == DType::kI32 && ids.rows == T && ids.cols == top_k && weights.rows == T &&
                 weights.cols == top_k,
             "moe_route: ids [", ids.rows, ", ", ids.cols, "] weights [", weights.rows, ", ", weights.cols, "] for ", T,
             " rows, top ", top_k);
  KCHECK_MSG(top_k >= 1 && top_k <= E && top_k <= kMaxTopK && E <= kMaxRouteExperts, "moe_route: top ", top_k, " of ",
             E, " experts");
}

void moe_route(const Context& ctx, const Tensor& ids, const Tensor& weights, const Tensor& logits, int top_k,
               bool norm_topk) {
  check_moe_route(ids, weights, logits, top_k);
  const int64_t T = logits.rows, E = logits.cols;
  if (T == 0) return;
  launch(moe_route_kernel, unsigned(T), kRouteThreads, size_t(E) * sizeof(double), ctx.stream, ids.as<int32_t>(),
         weights.f32(), logits.f32(), int(E), top_k, norm_topk);
  CUDA_CHECK_LAUNCH();
}

void moe_experts(const Context& ctx, const Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                 const ExpertWeights& experts, const Tensor* shared, const Tensor* shared_gate) {
  check_f32(out, "moe_experts out");
  check_f32(x, "moe_experts x");
  check_f32(weights, "moe_experts weights");
  const int64_t T = x.rows, H = x.cols;
  const int k = int(ids.cols);
  const size_t E = experts.gate.size();
  KCHECK_MSG(E > 0 && experts.up.size() == E && experts.down.size() == E, "moe_experts: ", E, " experts");
  KCHECK(out.rows == T && out.cols == H && ids.dtype == DType::kI32 && ids.rows == T && weights.rows == T &&
         weights.cols == k);
  if (experts.act != Activation::kSilu && experts.act != Activation::kGeluTanh)
    unsupported("moe_experts: expert activation other than silu / gelu-tanh on CUDA");
  const bool gelu = experts.act == Activation::kGeluTanh;
  const float* expert_scale = nullptr;  // [E] or null
  if (!experts.expert_scale.empty()) {
    check_f32(experts.expert_scale, "moe_experts expert_scale");
    KCHECK_MSG(experts.expert_scale.numel() == int64_t(E), "moe_experts: ", experts.expert_scale.numel(),
               " expert scales for ", E, " experts");
    expert_scale = experts.expert_scale.f32();
  }
  const int64_t F = experts.gate[0].rows;
  // gate and up share one dtype, down may have another (llama.cpp's _M recipes give ffn_down more
  // bits than ffn_gate / ffn_up); each is one dtype over the layer's experts (one GGUF tensor).
  const DType wt = experts.gate[0].dtype, wt_down = experts.down[0].dtype;
  std::vector<const void*> ptrs;
  ptrs.reserve(3 * E);
  bool vec_h = H % 8 == 0 && aligned16(x.data), vec_f = F % 8 == 0;
  for (const auto* list : {&experts.gate, &experts.up, &experts.down}) {
    const DType want = list == &experts.down ? wt_down : wt;
    for (const Tensor& w : *list) {
      if (w.dtype != want)
        unsupported("moe_experts: ", list == &experts.down ? "down" : "gate and up", " experts of one layer in ",
                    dtype_name(w.dtype), " and ", dtype_name(want), " on CUDA (each projection takes one dtype; gate and up the same)");
      KCHECK_MSG(w.device == Device::kCuda, "moe_experts: expert weights are not on the CUDA device");
      ptrs.push_back(w.data);
      vec_h = vec_h && aligned16(w.data);
      vec_f = vec_f && aligned16(w.data);
    }
  }
  for (size_t e = 0; e < E; ++e) {
    KCHECK(experts.gate[e].rows == F && experts.gate[e].cols == H && experts.up[e].rows == F &&
           experts.up[e].cols == H && experts.down[e].rows == H && experts.down[e].cols == F);
  }
  const Tensor* gate = shared_gate && !shared_gate->empty() ? shared_gate : nullptr;
  if (shared) {
    check_f32(*shared, "moe_experts shared");
    KCHECK_MSG(shared->rows == T && shared->cols == H, "moe_experts: shared expert output [", shared->rows, ",",
               shared->cols, "] for [", T, ",", H, "]");
    if (gate) {
      check_f32(*gate, "moe_experts shared gate");
      KCHECK_MSG(gate->rows == T && (gate->cols == 1 || gate->cols == H), "moe_experts: shared gate [", gate->rows,
                 ",", gate->cols, "] for [", T, ",", H, "]");
    }
  }
  if (T == 0) return;
  const void* const* table = ctx.tables->get(ptrs, ctx.stream);  // [gate E | up E | down E]
  const int64_t P = T * k;
  KCHECK_MSG(P <= 65535, "moe_experts: ", P, " (token, expert) pairs in one step (the CUDA kernel takes 65535)");
  auto* hbuf = static_cast<float*>(ctx.scratch->get(kSlotMoeHidden, size_t(P * F) * 4));
  vec_f = vec_f && aligned16(hbuf);
  const float* shared_f = shared ? shared->f32() : nullptr;
  const float* gate_f = gate ? gate->f32() : nullptr;
  const int64_t gate_cols = gate ? gate->cols : 0;
  if (vec_h && vec_f && T <= kPairMaxRows && k <= kMaxTopK) {  // per-pair kernels: no grouping, no separate sum
    dispatch_any_weight(wt, "moe_experts", [&]<typename W>() {
      const dim3 grid(unsigned(ceil_div(F, kWarps * 2)), unsigned(P));
      // Super-block formats (Q4_K, Q5_K, Q6_K) at one row: four steps in flight, not two (a
      // step is about a quarter of BF16's bytes). Measured on the 35B-A3B's experts (GpuBench.
      // MoeExpertsDecode, Q4_K gate/up and Q6_K down, T = 1): 23.9 -> 16.7 us; four were slower at
      // 8 rows (121.8 -> 126.5) and for Q8_0 (22.4 -> 24.4), the same for BF16.
      const auto run = [&]<int U>() {
        if (gelu) {
          launch(moe_gate_up_pair_kernel<W, Activation::kGeluTanh, U>, grid, kWarps * 32, 0, ctx.stream, hbuf,
                 x.f32(), ids.as<const int32_t>(), table, table + E, k, H, F);
        } else {
          launch(moe_gate_up_pair_kernel<W, Activation::kSilu, U>, grid, kWarps * 32, 0, ctx.stream, hbuf, x.f32(),
                 ids.as<const int32_t>(), table, table + E, k, H, F);
        }
      };
      if constexpr (block_elems<W>() == quant::kQK_K) {
        if (T == 1) run.template operator()<4>(); else run.template operator()<2>();
      } else {
        run.template operator()<2>();
      }
      CUDA_CHECK_LAUNCH();
    });
    dispatch_any_weight(wt_down, "moe_experts", [&]<typename W>() {
      const auto run = [&]<bool Scaled>(const float* scale) {
        if (T == 1) {
          // The prefetch while gate/up runs, when the step's down rows fit the L2 with room to
          // spare (16 MB on the 35B-A3B's shapes). The split kernel with it, on those shapes
          // (GpuBench.MoeExpertsDecode, BF16, T = 1, gate/up and down): 20.8 -> 17.7 us.
          const int64_t row_bytes = dtype_row_bytes(wt_down, F);
          const int64_t prefetch = P * H * row_bytes <= kDownPrefetchMax ? row_bytes : 0;
          launch(moe_down_sum_split_kernel<W, Scaled>, dim3(unsigned(ceil_div(H, kDownCols)), 1u), kWarps * 32, 0,
                 ctx.stream, out.f32(), hbuf, ids.as<const int32_t>(), weights.f32(), table + 2 * E, scale, k, H, F,
                 prefetch, shared_f, gate_f, gate_cols);
        } else {
          launch(moe_down_sum_pair_kernel<W, Scaled>, dim3(unsigned(ceil_div(H, kWarps * 2)), unsigned(T)),
                 kWarps * 32, 0, ctx.stream, out.f32(), hbuf, ids.as<const int32_t>(), weights.f32(), table + 2 * E,
                 scale, k, H, F, shared_f, gate_f, gate_cols);
        }
      };
      if (expert_scale) {
        run.template operator()<true>(expert_scale);
      } else {
        run.template operator()<false>(nullptr);
      }
      CUDA_CHECK_LAUNCH();
    });
    return;
  }
  auto* ybuf = static_cast<float*>(ctx.scratch->get(kSlotMoePartial, size_t(P * H) * 4));
  if (vec_h && vec_f) {
    // group the pairs by expert: offsets [E + 1] | active [E] | n_active [1] | order [P]
    KCHECK_MSG(E <= size_t(kGroupMaxExperts), "moe_experts: ", E, " experts (the CUDA kernels take up to ",
               kGroupMaxExperts, ")");
    auto* idx = static_cast<int32_t*>(ctx.scratch->get(kSlotMoeIndex, (2 * E + 2 + size_t(P)) * 4));
    int32_t *offsets = idx, *active = offsets + E + 1, *n_active = active + E, *order = n_active + 1;
    const size_t group_smem = 2 * E * 4;
    if (group_smem > 48 * 1024)
      CUDA_CHECK(cudaFuncSetAttribute(moe_group_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(group_smem)));
    launch(moe_group_kernel, 1, kGroupThreads, group_smem, ctx.stream, offsets, active, n_active, order,
           ids.as<const int32_t>(), P, int(E));
    CUDA_CHECK_LAUNCH();
    // At most min(E, P) experts have pairs: the rest of the grid would only read offsets and exit.
    const unsigned expert_rows = unsigned(std::min<int64_t>(int64_t(E), P));
    // BF16 and block-format experts: the tensor-core kernels (moe_mma.cu), outside deterministic
    // mode and kExact.
    const bool mma = moe_mma_enabled(ctx);
    if (mma && moe_mma_supported(wt, H)) {
      launch_moe_gate_up_mma(ctx, wt, hbuf, x.f32(), order, offsets, active, n_active, table, table + E, k, H, F,
                             expert_rows, gelu ? Activation::kGeluTanh : Activation::kSilu);
    } else {
      dispatch_any_weight(wt, "moe_experts", [&]<typename W>() {
        const dim3 grid(unsigned(ceil_div(F, kWarps * 2)), expert_rows);
        if (gelu) {
          launch(moe_gate_up_grouped_kernel<W, Activation::kGeluTanh>, grid, kWarps * 32, 0, ctx.stream, hbuf,
                 x.f32(), order, offsets, active, n_active, table, table + E, k, H, F);
        } else {
          launch(moe_gate_up_grouped_kernel<W, Activation::kSilu>, grid, kWarps * 32, 0, ctx.stream, hbuf, x.f32(),
                 order, offsets, active, n_active, table, table + E, k, H, F);
        }
        CUDA_CHECK_LAUNCH();
      });
    }
    if (mma && moe_mma_supported(wt_down, F)) {
      launch_moe_down_mma(ctx, wt_down, ybuf, hbuf, order, offsets, active, n_active, weights.f32(), table + 2 * E,
                          expert_scale, H, F, expert_rows);
    } else {
      dispatch_any_weight(wt_down, "moe_experts", [&]<typename W>() {
        const dim3 down_grid(unsigned(ceil_div(H, kWarps * 4)), expert_rows);
        if (expert_scale) {
          launch(moe_down_grouped_kernel<W, true>, down_grid, kWarps * 32, 0, ctx.stream, ybuf, hbuf, order, offsets,
                 active, n_active, weights.f32(), table + 2 * E, expert_scale, H, F);
        } else {
          launch(moe_down_grouped_kernel<W, false>, down_grid, kWarps * 32, 0, ctx.stream, ybuf, hbuf, order, offsets,
                 active, n_active, weights.f32(), table + 2 * E, nullptr, H, F);
        }
        CUDA_CHECK_LAUNCH();
      });
    }
  } else {
    for (DType dt : {wt, wt_down})
      if (dtype_is_quantized(dt))
        unsupported("moe_experts: ", dtype_name(dt), " experts need 16-byte aligned activations and expert rows on CUDA");
    dispatch_weight(wt, "moe_experts", [&]<typename W>() {
      const dim3 grid(unsigned(ceil_div(F, kWarps)), unsigned(P));
      if (gelu) {
        launch(moe_gate_up_kernel<W, Activation::kGeluTanh>, grid, kWarps * 32, 0, ctx.stream, hbuf, x.f32(),
               ids.as<const int32_t>(), table, table + E, k, H, F, vec_h);
      } else {
        launch(moe_gate_up_kernel<W, Activation::kSilu>, grid, kWarps * 32, 0, ctx.stream, hbuf, x.f32(),
               ids.as<const int32_t>(), table, table + E, k, H, F, vec_h);
      }
      CUDA_CHECK_LAUNCH();
    });
    dispatch_weight(wt_down, "moe_experts", [&]<typename W>() {
      const dim3 down_grid(unsigned(ceil_div(H, kWarps)), unsigned(P));
      if (expert_scale) {
        launch(moe_down_kernel<W, true>, down_grid, kWarps * 32, 0, ctx.stream, ybuf, hbuf, ids.as<const int32_t>(),
               weights.f32(), table + 2 * E, expert_scale, H, F, vec_f);
      } else {
        launch(moe_down_kernel<W, false>, down_grid, kWarps * 32, 0, ctx.stream, ybuf, hbuf, ids.as<const int32_t>(),
               weights.f32(), table + 2 * E, nullptr, H, F, vec_f);
      }
      CUDA_CHECK_LAUNCH();
    });
  }
  launch(moe_sum_kernel, unsigned(std::min<int64_t>(ceil_div(T * H, 256), 65535)), 256, 0, ctx.stream, out.f32(), ybuf,
         k, T, H, shared_f, gate_f, gate_cols);
  CUDA_CHECK_LAUNCH();
}

}  // namespace kestrel::cuda
