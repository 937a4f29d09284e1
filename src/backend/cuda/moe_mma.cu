// The grouped expert products on the tensor cores (moe_mma.h). A prefill step's pairs reach an
// expert by the dozen (the 35B-A3B's 512-token chunk: 4096 pairs over 256 experts), so an expert
// is a small GEMM: [pairs, H] by its [F, H] gate and up, then [pairs, F] by its [H, F] down. The
// CUDA-core grouped kernels (moe.cu) spent 93 of a 122 ms 512-token step there (2026-12-01).
//
// A block of kWarps warps takes one listed expert and kCols output rows of its matrix (16 a warp)
// and walks the expert's pairs kPairs at a time. Per pass the inputs of those pairs are staged
// kChunk columns at a time in shared memory as S BF16 terms (t1 = bf16(v), t2 = bf16(v - t1),
// t3 = bf16(v - t1 - t2): split_bf16_kernel's split, S = 3 / 2 / 1 for bf16x3 / bf16x2 / bf16),
// and each warp runs m16n8k16 mmas with A = 16 weight rows by 16 inputs (BF16, exact) and
// B = 16 inputs by 8 pairs of one term, F32 accumulators: the first term's products in one set,
// the smaller ones (the other terms, the weight's lo part) in another (Terms::kCor). The
// order inside an mma's k is free as long as A and B agree, so a lane (g = lane / 4, c = lane % 4)
// takes the 8 consecutive inputs 8c .. 8c + 7 of each 32: one 16-byte load of weight row g, one
// of row g + 8, one of each pair's staged term; the first mma of the 32 takes their elements
// 0-3, the second 4-7. Staged rows are 320 bytes apart (64 modulo 128), so the eight lanes of a
// 16-byte shared-load phase hit distinct banks.
//
// Block-format experts (Q4_K, Q6_K, Q8_0, ...) take the same kernels: a lane decodes its 8
// weights of each row to ggml's values (quant_blocks.cuh's load8) and rounds them to BF16 hi and,
// at bf16x3, lo = the rest, so the products are matmul_quant's prefill ones: w_hi x1, w_hi x2 and
// w_lo x1 at bf16x3 (two staged terms), w_hi x1 + w_hi x2 at bf16x2, w_hi x1 at bf16. Each 8
// weights are decoded once a pass of 32 pairs, where the CUDA-core kernels decode them once per 8.
//
// A pair's sums do not depend on its pass's other pairs (an mma's element depends on its A row
// and B column only), but the order of the k loop differs from the CUDA-core kernels', so these
// results are not bit-identical to the per-pair kernels' (decode steps); that is why
// moe_mma_enabled keeps deterministic mode and kExact off them.
//
// The same block code runs a dense block-format matmul of a few rows (block_matmul_mma_kernel:
// one "expert", the rows as its pairs, a pass of 32 rows a grid row, the inputs split in ranges
// so that the grid fills the GPU), which otherwise would dequantize the whole matrix to BF16 tiles
// for cuBLAS every step (matmul_quant.cu).
#include <algorithm>
#include <cstdlib>

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/gemv.cuh"
#include "backend/cuda/mma.cuh"
#include "backend/cuda/moe_mma.h"
#include "backend/cuda/quant_blocks.cuh"

namespace kestrel::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kCols = kWarps * 16;  // output rows of the expert's matrix a block
constexpr int kPairs = 32;          // pairs a pass: four n8 tiles
constexpr int kChunk = 128;         // input columns staged at a time
constexpr int kStride = kChunk + 32;  // BF16 a staged row (320 bytes)
constexpr int kSplitBlocksPerSm = 4;  // block_matmul_mma_kernel's grid, at least, when K allows

struct Pass {
  int64_t src_row[kPairs];  // the staged input row of each pair: its token, pair / k (k 1: the pair)
  int64_t pair[kPairs];
};

// xs[s][r][0, len) = term s of src row src_row[r], columns [kt, kt + len); zeros for r >= n
// (their products land in sums nobody stores). len is a multiple of 32.
template <int S>
__device__ __forceinline__ void stage_terms(__nv_bfloat16* xs, const float* __restrict__ src, const Pass& ps, int n,
                                            int64_t K, int64_t kt, int len) {
  const int quads = len / 4;
  for (int i = threadIdx.x; i < kPairs * quads; i += kWarps * 32) {
    const int r = i / quads, c = (i - r * quads) * 4;
    float rest[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (r < n) {
      const float4 v = *reinterpret_cast<const float4*>(src + ps.src_row[r] * K + kt + c);
      rest[0] = v.x;
      rest[1] = v.y;
      rest[2] = v.z;
      rest[3] = v.w;
    }
#pragma unroll
    for (int s = 0; s < S; ++s) {
      __nv_bfloat16 t[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        t[j] = __float2bfloat16_rn(rest[j]);
        rest[j] -= __bfloat162float(t[j]);
      }
      *reinterpret_cast<uint2*>(xs + (s * kPairs + r) * kStride + c) = *reinterpret_cast<const uint2*>(t);
    }
  }
}

// Whether W (__nv_bfloat16, or a quant_blocks.cuh tag) is a block format.
template <typename W>
constexpr bool kBlockFormat = requires { W::kBlockBytes; };

// How the kernels take weights of type W: the activation terms staged for precision S and
// whether the weight is split into hi + lo.
template <typename W, int S>
struct Terms {
  static constexpr bool kQuant = kBlockFormat<W>;
  static constexpr bool kLo = kQuant && S == 3;  // w_lo x1 as well
  static constexpr int kStaged = kQuant ? (S < 2 ? S : 2) : S;
  // Products beyond w_hi x1 (the staged terms past the first, w_lo x1) go into accumulators of
  // their own: an mma's F32 sum is aligned to its largest addend and truncated, so a ~2^-8 smaller
  // product added into the main sums would lose a main-sized ulp each time, ~6 times a 32-input step
  // at bf16x3 (T 96, H 2080: 1.35e-5 of the result, where the per-term cuBLAS GEMMs, each its own
  // sums, stay within 1e-5).
  static constexpr bool kCor = kStaged > 1 || kLo;
};

// A lane's 8 weights k .. k + 7 of a row as 4 packed BF16 pairs: hi (the weight, or its value
// rounded) and, when kLo, lo (the value minus hi, rounded).
template <typename W, bool kLo>
__device__ __forceinline__ void load_weights(typename WeightRows<W>::Row row, int64_t k, uint4& hi, uint4& lo) {
  if constexpr (kBlockFormat<W>) {
    float f[8];
    W::load8(row, k, f);
    uint32_t h[4], l[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const __nv_bfloat162 hb = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
      h[i] = bf16x2_bits(hb);
      if constexpr (kLo)
        l[i] = bf16x2_bits(__floats2bfloat162_rn(f[2 * i] - __low2float(hb), f[2 * i + 1] - __high2float(hb)));
    }
    hi = make_uint4(h[0], h[1], h[2], h[3]);
    if constexpr (kLo) lo = make_uint4(l[0], l[1], l[2], l[3]);
  } else {
    hi = __ldg(reinterpret_cast<const uint4*>(row + k));
  }
}

// The two mma A fragments of 32 inputs from rows g (wl) and g + 8 (wh): inputs 0-3 of each
// lane's 8, then 4-7.
__device__ __forceinline__ void fragments(const uint4& wl, const uint4& wh, uint32_t (&a1)[4], uint32_t (&a2)[4]) {
  a1[0] = wl.x, a1[1] = wh.x, a1[2] = wl.y, a1[3] = wh.y;
  a2[0] = wl.z, a2[1] = wh.z, a2[2] = wl.w, a2[3] = wh.w;
}

// A lane's weights of one 32-input step of M matrices' rows g (wl) and g + 8 (wh), with their lo
// parts when the weight is split.
template <int M>
struct StepWeights {
  uint4 wl[M], wh[M], wl_lo[M], wh_lo[M];
};
template <typename W, int M, bool kLo>
__device__ __forceinline__ void load_step(StepWeights<M>& sw, const typename WeightRows<W>::Row* lo,
                                          const typename WeightRows<W>::Row* hi, int64_t k) {
#pragma unroll
  for (int m = 0; m < M; ++m) {
    load_weights<W, kLo>(lo[m], k, sw.wl[m], sw.wl_lo[m]);
    load_weights<W, kLo>(hi[m], k, sw.wh[m], sw.wh_lo[m]);
  }
}

// Accumulates M matrices' 16 rows (this warp's: lo = row g, hi = row g + 8) times the staged
// pairs over one chunk: acc[m][j] is the 16 x 8 tile of matrix m and pairs 8j .. 8j + 7 of the
// first term's products, cor[m][j] the same tile of the others' (Terms::kCor). BF16
// weights arrive in sw already for the chunk's first step (the caller loads them before staging)
// and each step loads the next one's before its mmas, so a load's latency hides behind a step of
// mmas; block formats are loaded and decoded at their step (the decode would wait on the loads).
template <typename W, int M, int S>
__device__ __forceinline__ void chunk_products(float (&acc)[M][kPairs / 8][4], float (&cor)[M][kPairs / 8][4],
                                               StepWeights<M>& sw,
                                               const typename WeightRows<W>::Row* lo,
                                               const typename WeightRows<W>::Row* hi, const __nv_bfloat16* xs, int n,
                                               int64_t kt, int len) {
  using Tm = Terms<W, S>;
  const int lane = threadIdx.x & 31, g = lane >> 2, c8 = (lane & 3) * 8;
  for (int kc = 0; kc < len; kc += 32) {
    if constexpr (Tm::kQuant) load_step<W, M, Tm::kLo>(sw, lo, hi, kt + kc + c8);
    uint32_t a1[M][4], a2[M][4], l1[M][4], l2[M][4];  // l: the weights' lo parts (Tm::kLo)
#pragma unroll
    for (int m = 0; m < M; ++m) {
      fragments(sw.wl[m], sw.wh[m], a1[m], a2[m]);
      if constexpr (Tm::kLo) fragments(sw.wl_lo[m], sw.wh_lo[m], l1[m], l2[m]);
    }
    if constexpr (!Tm::kQuant) {
      if (kc + 32 < len) load_step<W, M, false>(sw, lo, hi, kt + kc + 32 + c8);
    }
#pragma unroll
    for (int j = 0; j < kPairs / 8; ++j) {
      if (8 * j >= n) break;  // uniform: n is the block's
#pragma unroll
      for (int s = 0; s < Tm::kStaged; ++s) {
        const uint4 b = *reinterpret_cast<const uint4*>(xs + (s * kPairs + 8 * j + g) * kStride + kc + c8);
#pragma unroll
        for (int m = 0; m < M; ++m) {
          float(&sum)[4] = s == 0 ? acc[m][j] : cor[m][j];
          mma16816(sum, a1[m], b.x, b.y);
          mma16816(sum, a2[m], b.z, b.w);
          if constexpr (Tm::kLo) {
            if (s == 0) {
              mma16816(cor[m][j], l1[m], b.x, b.y);
              mma16816(cor[m][j], l2[m], b.z, b.w);
            }
          }
        }
      }
    }
  }
}

// One block's work: M (1 or 2) matrices [N, K] of expert active[blockIdx.y] (w0, and w1 when M is
// 2), rows blockIdx.x * kCols .., over the pairs order[begin, end) (pairs begin .. end - 1 when
// order is null), pair p's inputs being row p / k of src, over the inputs [k0, k1) of K (multiples
// of kChunk, k1 = K or one); store(pair, row, sum0, sum1) writes each (pair, row) result (sum1 is 0
// when M is 1).
template <typename W, int M, int S, typename Store>
__device__ __forceinline__ void grouped_products(const void* w0, const void* w1, const float* __restrict__ src,
                                                 const int32_t* __restrict__ order, int begin, int end, int k,
                                                 int64_t K, int64_t k0, int64_t k1, int64_t N, Store&& store) {
  constexpr int kStaged = Terms<W, S>::kStaged;
  constexpr bool kCor = Terms<W, S>::kCor;
  __shared__ __align__(16) __nv_bfloat16 xs[kStaged * kPairs * kStride];
  __shared__ Pass ps;
  const int lane = threadIdx.x & 31, g = lane >> 2, c2 = (lane & 3) * 2;
  const int64_t row_lo = int64_t(blockIdx.x) * kCols + (threadIdx.x >> 5) * 16 + g, row_hi = row_lo + 8;
  using Rows = WeightRows<W>;
  typename Rows::Row lo[M], hi[M];
#pragma unroll
  for (int m = 0; m < M; ++m) {  // rows past N: the last row, read and dropped
    const void* w = m == 0 ? w0 : w1;
    lo[m] = Rows::row(w, row_lo < N ? row_lo : N - 1, K);
    hi[m] = Rows::row(w, row_hi < N ? row_hi : N - 1, K);
  }
  for (int p0 = begin; p0 < end; p0 += kPairs) {
    const int n = end - p0 < kPairs ? end - p0 : kPairs;
    __syncthreads();  // the previous pass no longer reads ps
    if (threadIdx.x < n) {
      const int64_t p = order ? order[p0 + threadIdx.x] : p0 + threadIdx.x;
      ps.pair[threadIdx.x] = p;
      ps.src_row[threadIdx.x] = p / k;
    }
    float acc[M][kPairs / 8][4], cor[M][kPairs / 8][4];
#pragma unroll
    for (int m = 0; m < M; ++m)
#pragma unroll
      for (int j = 0; j < kPairs / 8; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[m][j][i] = cor[m][j][i] = 0.0f;
    StepWeights<M> sw;
    for (int64_t kt = k0; kt < k1; kt += kChunk) {
      const int len = int(k1 - kt < kChunk ? k1 - kt : kChunk);
      // BF16: the chunk's first weights in flight while the inputs are staged
      if constexpr (!Terms<W, S>::kQuant) load_step<W, M, false>(sw, lo, hi, kt + (lane & 3) * 8);
      __syncthreads();  // ps written; the previous chunk's products done with xs
      stage_terms<kStaged>(xs, src, ps, n, K, kt, len);
      __syncthreads();
      chunk_products<W, M, S>(acc, cor, sw, lo, hi, xs, n, kt, len);
    }
    // C fragment: acc[m][j][0, 1] = (row g, pairs 8j + c2, + 1), [2, 3] = (row g + 8, the same pairs)
#pragma unroll
    for (int j = 0; j < kPairs / 8; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = 8 * j + c2 + (i & 1);
        const int64_t row = i < 2 ? row_lo : row_hi;
        const float s0 = kCor ? acc[0][j][i] + cor[0][j][i] : acc[0][j][i];
        const float s1 = M == 1 ? 0.0f : kCor ? acc[M - 1][j][i] + cor[M - 1][j][i] : acc[M - 1][j][i];
        if (r < n && row < N) store(ps.pair[r], row, s0, s1);
      }
    }
  }
}

// grid: (ceil(F / kCols), expert rows); kWarps * 32 threads.
template <typename W, Activation A, int S>
__global__ void __launch_bounds__(kWarps * 32)
    moe_gate_up_mma_kernel(float* __restrict__ hbuf,              // [T * k, F]
                           const float* __restrict__ x,           // [T, H]
                           const int32_t* __restrict__ order,     // [T * k]
                           const int32_t* __restrict__ offsets,   // [E + 1]
                           const int32_t* __restrict__ active,    // [E]
                           const int32_t* __restrict__ n_active,  // [1]
                           const void* const* __restrict__ gate, const void* const* __restrict__ up, int k,
                           int64_t H, int64_t F) {
  pdl_begin();
  if (int(blockIdx.y) >= *n_active) return;
  const int e = active[blockIdx.y];
  grouped_products<W, 2, S>(gate[e], up[e], x, order, offsets[e], offsets[e + 1], k, H, 0, H, F,
                            [&](int64_t p, int64_t f, float g, float u) { hbuf[p * F + f] = activate(g, A) * u; });
}

// grid: (ceil(H / kCols), expert rows); kWarps * 32 threads.
template <typename W, bool Scaled, int S>
__global__ void __launch_bounds__(kWarps * 32)
    moe_down_mma_kernel(float* __restrict__ ybuf,               // [T * k, H]
                        const float* __restrict__ hbuf,         // [T * k, F]
                        const int32_t* __restrict__ order,      // [T * k]
                        const int32_t* __restrict__ offsets,    // [E + 1]
                        const int32_t* __restrict__ active,     // [E]
                        const int32_t* __restrict__ n_active,   // [1]
                        const float* __restrict__ weights,      // [T * k]
                        const void* const* __restrict__ down,
                        const float* __restrict__ expert_scale,  // [E] or null
                        int64_t H, int64_t F) {
  pdl_begin();
  if (int(blockIdx.y) >= *n_active) return;
  const int e = active[blockIdx.y];
  grouped_products<W, 1, S>(down[e], nullptr, hbuf, order, offsets[e], offsets[e + 1], 1, F, 0, F, H,
                            [&](int64_t p, int64_t c, float y, float) {
                              const float wp = Scaled ? weights[p] * expert_scale[e] : weights[p];
                              ybuf[p * H + c] = wp * y;
                            });
}

// grid: (ceil(N / kCols), ceil(T / kPairs), ceil(K / ks)); kWarps * 32 threads. out[z] = x w^T over
// the inputs [z * ks, (z + 1) * ks) for a block-format (or BF16) w [N, K]: block (i, j, z) takes rows
// i * kCols .. of w and rows j * kPairs .. of x (ks a multiple of kChunk; out [gridDim.z, T, N]).
template <typename W, int S>
__global__ void __launch_bounds__(kWarps * 32)
    block_matmul_mma_kernel(float* __restrict__ out,      // [splits, T, N]
                            const float* __restrict__ x,  // [T, K]
                            const void* __restrict__ w,   // [N, K]
                            int64_t T, int64_t K, int64_t N, int64_t ks) {
  pdl_begin();
  const int begin = int(blockIdx.y) * kPairs, end = int(T - begin < kPairs ? T : begin + kPairs);
  const int64_t k0 = int64_t(blockIdx.z) * ks, k1 = K - k0 < ks ? K : k0 + ks;
  float* part = out + int64_t(blockIdx.z) * T * N;
  grouped_products<W, 1, S>(w, nullptr, x, nullptr, begin, end, 1, K, k0, k1, N,
                            [&](int64_t t, int64_t n, float y, float) { part[t * N + n] = y; });
}

// Calls fn.template operator()<S>() with S the precision's activation terms.
template <typename Fn>
void with_terms(MatmulPrecision p, Fn&& fn) {
  switch (p) {
    case MatmulPrecision::kBf16: fn.template operator()<1>(); break;
    case MatmulPrecision::kBf16x2: fn.template operator()<2>(); break;
    default: fn.template operator()<3>(); break;
  }
}

}  // namespace

bool moe_mma_enabled(const Context& ctx) {
  static const bool env_on = [] {
    const char* v = std::getenv("KESTREL_CUDA_MOE_MMA");
    return !(v && v[0] == '0');
  }();
  return env_on && !ctx.deterministic && ctx.matmul_precision != MatmulPrecision::kExact;
}

bool moe_mma_supported(DType dt, int64_t K) {
  switch (dt) {
    case DType::kBF16:
    case DType::kQ8_0:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kMXFP4: return K > 0 && K % 32 == 0 && K % dtype_block_elems(dt) == 0;
    default: return false;  // F16 / F32 (not exact in BF16), and device-only layouts
  }
}

namespace {
// Calls fn.template operator()<W>() with W the experts' weight type (BF16 or a block format's tag).
template <typename Fn>
void with_weight(DType dt, Fn&& fn) {
  if (dt == DType::kBF16) fn.template operator()<__nv_bfloat16>();
  else dispatch_quant(dt, "moe_experts", std::forward<Fn>(fn));
}
}  // namespace

void launch_moe_gate_up_mma(const Context& ctx, DType dt, float* hbuf, const float* x, const int32_t* order,
                            const int32_t* offsets, const int32_t* active, const int32_t* n_active,
                            const void* const* gate, const void* const* up, int k, int64_t H, int64_t F,
                            unsigned expert_rows, Activation act) {
  const dim3 grid(unsigned(ceil_div(F, kCols)), expert_rows);
  with_weight(dt, [&]<typename W>() {
    with_terms(ctx.matmul_precision, [&]<int S>() {
      if (act == Activation::kGeluTanh)
        launch(moe_gate_up_mma_kernel<W, Activation::kGeluTanh, S>, grid, kWarps * 32, 0, ctx.stream, hbuf, x, order,
               offsets, active, n_active, gate, up, k, H, F);
      else
        launch(moe_gate_up_mma_kernel<W, Activation::kSilu, S>, grid, kWarps * 32, 0, ctx.stream, hbuf, x, order,
               offsets, active, n_active, gate, up, k, H, F);
    });
  });
  CUDA_CHECK_LAUNCH();
}

void launch_moe_down_mma(const Context& ctx, DType dt, float* ybuf, const float* hbuf, const int32_t* order,
                         const int32_t* offsets, const int32_t* active, const int32_t* n_active,
                         const float* weights, const void* const* down, const float* expert_scale, int64_t H,
                         int64_t F, unsigned expert_rows) {
  const dim3 grid(unsigned(ceil_div(H, kCols)), expert_rows);
  with_weight(dt, [&]<typename W>() {
    with_terms(ctx.matmul_precision, [&]<int S>() {
      if (expert_scale)
        launch(moe_down_mma_kernel<W, true, S>, grid, kWarps * 32, 0, ctx.stream, ybuf, hbuf, order, offsets, active,
               n_active, weights, down, expert_scale, H, F);
      else
        launch(moe_down_mma_kernel<W, false, S>, grid, kWarps * 32, 0, ctx.stream, ybuf, hbuf, order, offsets, active,
               n_active, weights, down, expert_scale, H, F);
    });
  });
  CUDA_CHECK_LAUNCH();
}

void launch_block_matmul_mma(const Context& ctx, float* out, const float* x, const void* w, DType dt, int64_t T,
                             int64_t K, int64_t N) {
  KCHECK_MSG(T <= int64_t(65535) * kPairs, "matmul: ", T, " rows for the tensor-core block-format kernel");
  // A few rows give a grid of N / 64 blocks (192 for a 12288-row matrix), a warp or two a
  // multiprocessor, each waiting on its loads: 148 us for a 9-row Q4_K 12288x4096 on an H100, where
  // the 8-row GEMV takes 29 (2026-12-05). So the inputs are split into ranges of whole chunks until
  // the grid has kSplitBlocksPerSm blocks a multiprocessor, each range's products written to its own
  // partial [T, N] and the partials summed in order (sum_terms: the same bits run to run).
  const unsigned cols = unsigned(ceil_div(N, kCols)), rows = unsigned(ceil_div(T, kPairs));
  const int64_t chunks = ceil_div(K, kChunk);
  const int64_t want = ceil_div(kSplitBlocksPerSm * int64_t(sm_count()), int64_t(cols) * rows);
  const int64_t ks = ceil_div(chunks, std::clamp<int64_t>(want, 1, chunks)) * kChunk;
  const int64_t splits = ceil_div(K, ks);
  float* dst = out;
  if (splits > 1) dst = static_cast<float*>(ctx.scratch->get(kSlotMatmulPartial, size_t(splits * T * N) * 4));
  const dim3 grid(cols, rows, unsigned(splits));
  with_weight(dt, [&]<typename W>() {
    with_terms(ctx.matmul_precision, [&]<int S>() {
      launch(block_matmul_mma_kernel<W, S>, grid, kWarps * 32, 0, ctx.stream, dst, x, w, T, K, N, ks);
    });
  });
  CUDA_CHECK_LAUNCH();
  if (splits > 1) launch_sum_terms(ctx.stream, out, dst, T * N, int(splits));
}

}  // namespace kestrel::cuda
