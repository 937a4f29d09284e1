// sample_candidates: each row of logits reduced to the first M tokens of its sampling order and the
// mass of its weights (ops/ops.h), bit for bit the CPU's (backend/cpu/sample_candidates.cc): the
// arithmetic is ops/sampling_math.h's, every rounding spelled out.
//
// A block of kMassLanes threads a row:
//   1. the top key (the largest s = scaled(logit, t));
//   2. the mass: thread j sums the weights of tokens j, j + 256, ... in order, then the lanes fold
//      as a tree — the host's lane_sum;
//   3. the M-th largest key by a radix select over the 32 order bits of s (-0 as +0: the order
//      ties them), four passes of 8 bits with shared-memory histograms;
//   4. the tokens above it, and those at it (the lower ids first), gathered and sorted by (key, id)
//      with a bitonic sort in shared memory, the first M written out.
// When more than kSortCap tokens share the threshold's key with those above it, the tokens at it
// are taken in id order by a block scan instead of all of them being sorted.
#include "backend/cuda/device_util.cuh"
#include "ops/sampling_math.h"

namespace kestrel::cuda {
namespace {

constexpr int kThreads = sampling::kMassLanes;  // one thread a lane of the mass
constexpr int kSortCap = 4096;                  // keys sorted in shared memory (32 KB)
constexpr int kMaxCandidates = kSortCap;
static_assert(kThreads == 256, "one radix digit a thread, one mass lane a thread");

// The order's key of s: larger for earlier tokens (-0 and +0 equal).
__device__ __forceinline__ uint32_t order_key(float s) {
  return uint32_t(sampling::ordered_bits(int32_t(float_bits(s == 0.0f ? 0.0f : s)))) ^ 0x80000000u;
}
// (key, id) as one 64-bit value, larger for earlier tokens: the lower id first on equal keys.
__device__ __forceinline__ uint64_t full_key(uint32_t key, int64_t i) {
  return (uint64_t(key) << 32) | uint64_t(0xffffffffu - uint32_t(i));
}

// fn(i, v[i]) for this thread's tokens i = threadIdx.x + j * kThreads in increasing i, kUnroll
// loads issued before any of their uses: one block works a row, so its 8 warps hide the L2 latency
// only with several loads in flight each (one at a time, a pass over 248k tokens took ~100 us).
constexpr int kUnroll = 8;
template <typename Fn>
__device__ __forceinline__ void for_each_token(const float* __restrict__ v, int64_t V, Fn&& fn) {
  int64_t i = threadIdx.x;
  for (; i + int64_t(kUnroll - 1) * kThreads < V; i += int64_t(kUnroll) * kThreads) {
    float vs[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) vs[u] = v[i + int64_t(u) * kThreads];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) fn(i + int64_t(u) * kThreads, vs[u]);
  }
  for (; i < V; i += kThreads) fn(i, v[i]);
}

// Block-wide inclusive prefix sum of one int a thread (kThreads threads); `tmp` holds
// kThreads / 32 ints. Returns the thread's inclusive sum; *total gets the block's.
__device__ int block_scan(int v, int* tmp, int* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int n = __shfl_up_sync(kFullMask, v, o);
    if (lane >= o) v += n;
  }
  if (lane == 31) tmp[warp] = v;
  __syncthreads();
  int before = 0, all = 0;
  for (int w = 0; w < kThreads / 32; ++w) {
    if (w < warp) before += tmp[w];
    all += tmp[w];
  }
  __syncthreads();
  *total = all;
  return v + before;
}

__global__ void __launch_bounds__(kThreads) sample_candidates_kernel(int32_t* __restrict__ ids_out,     // [R, M]
                                                                     float* __restrict__ scaled_out,    // [R, M]
                                                                     double* __restrict__ mass_out,     // [R]
                                                                     const float* __restrict__ x,       // [R, V]
                                                                     const float* __restrict__ temps,   // [R]
                                                                     float* __restrict__ s_buf,         // [R, V]
                                                                     int64_t V, int M) {
  pdl_begin();
  __shared__ uint64_t keys[kSortCap];
  __shared__ double lanes[kThreads];
  __shared__ unsigned hist[256];
  __shared__ int scan_tmp[kThreads / 32];
  __shared__ float top_s[kThreads / 32];
  __shared__ uint32_t sel_prefix;
  __shared__ int sel_need, n_keys;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t r = blockIdx.x;
  const float* l = x + r * V;
  const float t = temps[r];
  float* sr = s_buf + r * V;  // s, computed once: each thread reads back what it wrote until step 4's output
  auto s_of = [&](int64_t i) { return sr[i]; };
  // Every pass below visits this thread's tokens through for_each_token: the same tokens, in the
  // same order (the mass lane's sum is in increasing i).

  // 1. s, and the top: the largest s (its sign of zero does not change a weight: s - (+-0) = s)
  float mx = -INFINITY;
  for_each_token(l, V, [&](int64_t i, float li) {
    const float v = sampling::scaled(li, t);
    sr[i] = v;
    mx = fmaxf(mx, v);
  });
  mx = warp_max(mx);
  if (lane == 0) top_s[warp] = mx;
  __syncthreads();
  mx = top_s[0];
  for (int w = 1; w < kThreads / 32; ++w) mx = fmaxf(mx, top_s[w]);

  // 2. the mass: lane tid in increasing i, then the tree fold
  double acc = 0.0;
  for_each_token(sr, V, [&](int64_t, float si) {
    acc = sampling::addd(acc, double(sampling::exp_nonpositive(sampling::sub(si, mx))));
  });
  lanes[tid] = acc;
  __syncthreads();
  for (int w = kThreads / 2; w >= 1; w >>= 1) {
    if (tid < w) lanes[tid] = sampling::addd(lanes[tid], lanes[tid + w]);
    __syncthreads();
  }
  if (tid == 0) mass_out[r] = lanes[0];

  // 3. the M-th largest key: radix select, most significant byte first
  if (tid == 0) {
    sel_prefix = 0;
    sel_need = M;
  }
  uint32_t mask = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    hist[tid] = 0;  // kThreads == 256 bins
    __syncthreads();
    const uint32_t prefix = sel_prefix;
    for_each_token(sr, V, [&](int64_t, float si) {
      const uint32_t k = order_key(si);
      if ((k & mask) == prefix) atomicAdd(&hist[(k >> shift) & 255u], 1u);
    });
    __syncthreads();
    if (tid == 0) {
      int need = sel_need, d = 255;
      for (; d > 0; --d) {
        if (int(hist[d]) >= need) break;
        need -= int(hist[d]);
      }
      sel_prefix = prefix | (uint32_t(d) << shift);
      sel_need = need;
    }
    mask |= 255u << shift;
    __syncthreads();
  }
  const uint32_t cut = sel_prefix;  // the M-th largest key; sel_need of the tokens at it are taken
  const int need_at = sel_need;

  // 4. gather: every token above the cut, and those at it when they fit; else the first need_at
  //    of those at it in id order
  if (tid == 0) n_keys = 0;
  __syncthreads();
  int at_cut = 0;
  for_each_token(sr, V, [&](int64_t, float si) { at_cut += order_key(si) == cut ? 1 : 0; });
  int total_at = 0;
  block_scan(at_cut, scan_tmp, &total_at);
  const int above = M - need_at;
  const bool all_at = above + total_at <= kSortCap;
  for_each_token(sr, V, [&](int64_t i, float si) {
    const uint32_t k = order_key(si);
    if (k > cut || (all_at && k == cut)) keys[atomicAdd(&n_keys, 1)] = full_key(k, i);
  });
  __syncthreads();
  if (!all_at) {  // the lower ids at the cut, in order, a block's worth of tokens at a time
    int taken = 0;
    for (int64_t base = 0; base < V && taken < need_at; base += kThreads) {
      const int64_t i = base + tid;
      const bool at = i < V && order_key(s_of(i)) == cut;
      int chunk = 0;
      const int pos = block_scan(at ? 1 : 0, scan_tmp, &chunk) - 1;
      if (at && taken + pos < need_at) keys[above + taken + pos] = full_key(cut, i);
      taken += chunk;
    }
    if (tid == 0) n_keys = M;
    __syncthreads();
  }
  const int n = n_keys;
  int pow2 = 1;
  while (pow2 < n) pow2 <<= 1;
  for (int i = n + tid; i < pow2; i += kThreads) keys[i] = 0;  // below every real key
  __syncthreads();
  // bitonic sort, descending
  for (int size = 2; size <= pow2; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int i = tid; i < pow2 / 2; i += kThreads) {
        const int lo = 2 * i - (i & (stride - 1)), hi = lo + stride;
        const bool desc = (lo & size) == 0;
        const uint64_t a = keys[lo], b = keys[hi];
        if ((a < b) == desc) {
          keys[lo] = b;
          keys[hi] = a;
        }
      }
      __syncthreads();
    }
  }
  for (int j = tid; j < M; j += kThreads) {
    const int64_t i = int64_t(0xffffffffu - uint32_t(keys[j]));
    ids_out[r * M + j] = int32_t(i);
    scaled_out[r * M + j] = s_of(i);
  }
}

}  // namespace

void sample_candidates(const Context& ctx, const Tensor& ids, const Tensor& scaled, const Tensor& mass, const Tensor& x,
                       std::span<const float> temperatures) {
  check_f32(x, "sample_candidates logits");
  const int64_t R = x.rows, V = x.cols, M = ids.cols;
  KCHECK_MSG(ids.dtype == DType::kI32 && scaled.dtype == DType::kF32 && mass.dtype == DType::kF64 &&
                 ids.rows == R && scaled.rows == R && scaled.cols == M && mass.rows == R && mass.cols == 1,
             "sample_candidates: ids [", ids.rows, ", ", ids.cols, "] ", dtype_name(ids.dtype), ", scaled [", scaled.rows,
             ", ", scaled.cols, "] ", dtype_name(scaled.dtype), ", mass [", mass.rows, ", ", mass.cols, "] ",
             dtype_name(mass.dtype), " for ", R, " rows (I32 [R, M], F32 [R, M], F64 [R, 1])");
  KCHECK_MSG(M >= 1 && M <= V && M <= kMaxCandidates, "sample_candidates: ", M, " candidates of a row of ", V,
             " (the CUDA kernel takes up to ", kMaxCandidates, ")");
  KCHECK_MSG(V <= INT32_MAX && R <= 65535, "sample_candidates: [", R, ", ", V, "] logits (the CUDA kernel takes 65535 rows of up to 2^31 - 1)");
  KCHECK_MSG(int64_t(temperatures.size()) == R, "sample_candidates: ", temperatures.size(), " temperatures for ", R,
             " rows");
  for (size_t r = 0; r < temperatures.size(); ++r)
    KCHECK_MSG(temperatures[r] > 0.0f, "sample_candidates: row ", r, " has temperature ", temperatures[r], " (> 0 expected)");
  if (R == 0) return;
  const auto* d_temps =
      static_cast<const float*>(ctx.upload_scratch(kSlotSampleTemps, temperatures.data(), temperatures.size() * 4));
  auto* s_buf = static_cast<float*>(ctx.scratch->get(kSlotSampleKeys, size_t(R) * size_t(V) * 4));
  launch(sample_candidates_kernel, unsigned(R), kThreads, 0, ctx.stream, ids.as<int32_t>(), scaled.f32(),
         mass.as<double>(), x.f32(), d_temps, s_buf, V, int(M));
  CUDA_CHECK_LAUNCH();
}

}  // namespace kestrel::cuda
