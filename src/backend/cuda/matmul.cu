// matmul: out[T, N] = x[T, K] . w[N, K]^T, activations F32, weights BF16/F16/F32 or a ggml
// block format (Q8_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, MXFP4), F32 out.
//
// Block formats run one GEMV kernel for all formats (gemv_multi_quant_kernel): Q4_K and Q6_K
// their own (quant_gemv_q4k.cuh, quant_gemv_q6k.cuh: weights streamed by the copy engine; Q6_K
// when its rows are a multiple of 8 super-blocks), Q8_0 and other Q6_K the unit GEMV of
// quant_gemv.cuh, the others the plain GEMV code with each 8 weights decoded in registers to
// ggml's dequantized values (quant_blocks.cuh), so a layer's mixed-format projections share one
// launch; prefill dequantizes the weight to BF16 in tiles of at most 64 MiB a term (two terms, hi and lo, at the default 3-term precision)
// and runs cuBLAS on them (matmul_quant).
//
// Plain dtypes take two paths:
//  - small T (decode, T <= kGemvMaxRows), F16 weights, MatmulPrecision::kExact and deterministic
//    mode (any T): GEMV kernels, each warp four output columns, F32 activations times the weights
//    as stored, F32 accumulation. They read each weight row once per group of up to 8 rows
//    (staged in shared memory), which is what decode is bound by, and give every row the same
//    bits as alone, whatever the number of rows: that is the deterministic mode's matmul.
//  - BF16 weights and larger T (prefill): cuBLAS on the tensor cores, BF16 x BF16 with F32
//    accumulation and output. The weights are exact in BF16; the activations are split into
//    BF16 terms t1 = bf16(x), t2 = bf16(x - t1), t3 = bf16(x - t1 - t2) and multiplied once per
//    term (out = w.t1 + w.t2 + w.t3). With 3 terms (the default) the inputs are as exact as F32;
//    1 term is plain BF16 activations. Up to 256 rows the terms are stacked into one GEMM (the
//    weights read once); beyond, one GEMM per term. See docs/cuda.md for what each costs in parity and time.
//    F32 weights use cublasSgemm in the default math mode, which never rounds to TF32.
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled: the driver's encoder, fetched through the runtime

#include <mutex>
#include <utility>

#include "backend/cuda/moe_route.cuh"
#include "backend/cuda/quant_gemv_q4k.cuh"
#include "backend/cuda/quant_gemv_q6k.cuh"

namespace kestrel::cuda {
namespace {

constexpr int kGemvMaxRows = 8;  // rows per GEMV pass, and the largest T that takes the GEMV path
constexpr int kGemvWarps = 8;    // output columns per block

// Calls fn.template operator()<R>() with R = rows, the row count of one GEMV pass (1 ..
// kGemvMaxRows; more take kGemvMaxRows), so each kernel is launched in its instantiation for R.
template <typename Fn>
void with_rows(int64_t rows, Fn&& fn) {
  static_assert(kGemvMaxRows == 8);
  with_1_to_8(rows, std::forward<Fn>(fn));
}

// Decode of one row, the bandwidth-bound case: each warp computes kGemv1Cols consecutive
// columns, so one load of x serves them all and each lane keeps 4 weight loads in flight.
// grid: ceil(N / (kGemvWarps * kGemv1Cols)); needs K % 8 == 0 and 16-byte aligned rows.
constexpr int kGemv1Cols = 4;
// Before pdl_begin() (device_util.cuh), while the kernel before it still runs: an L2 prefetch of
// the start of each weight row the block will read (columns [n_first, n_first + n_cols) of a
// matrix of N rows of row_bytes), at most kPrefetchRowMax bytes a row and, over the matrix,
// about kPrefetchTotal bytes, so a wide matrix's prefetch does not evict what the running kernel
// uses from the 50 MB L2. It hides the first loads' DRAM latency, which is most of a small
// GEMV's time (docs/cuda.md, "Launches"); the arithmetic is untouched.
constexpr int64_t kPrefetchRowMax = 4096;
constexpr int64_t kPrefetchTotal = int64_t(16) << 20;
__device__ __forceinline__ void prefetch_rows(const void* w, int64_t row_bytes, int64_t n_first, int64_t n_cols,
                                              int64_t N, int64_t row_max = kPrefetchRowMax) {
  if (n_first >= N) return;
  if (n_cols > N - n_first) n_cols = N - n_first;
  int64_t per_row = kPrefetchTotal / N;
  if (per_row < 128) per_row = 128;
  if (per_row > row_max) per_row = row_max;
  if (per_row > row_bytes) per_row = row_bytes;
  const int64_t lines = (per_row + 127) / 128;
  const char* base = static_cast<const char*>(w) + n_first * row_bytes;
  for (int64_t i = threadIdx.x; i < n_cols * lines; i += blockDim.x)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(base + (i / lines) * row_bytes + (i % lines) * 128));
}

// Where the GEMV's activations come from, 4 at a time from element i of the row-major [T, K]
// input: PlainX reads x; ActMulX forms act(gate) * up as it loads them, the expression
// silu_mul_kernel / gelu_tanh_mul_kernel store, so a gated MLP's down projection gets the same
// bits without that launch and its round trip through memory (matmul_gated).
struct PlainX {
  const float* x;
  __device__ __forceinline__ float4 load4(int64_t i) const { return *reinterpret_cast<const float4*>(x + i); }
  __host__ __device__ PlainX rows_from(int64_t i) const { return {x + i}; }
};
template <Activation A>
struct ActMulX {
  const float* gate;
  const float* up;
  __device__ __forceinline__ static float act_mul(float g, float u) {
    if constexpr (A == Activation::kGeluTanh) return gelu_tanhf(g) * u;
    else return siluf(g) * u;
  }
  __device__ __forceinline__ float4 load4(int64_t i) const {
    const float4 g = *reinterpret_cast<const float4*>(gate + i), u = *reinterpret_cast<const float4*>(up + i);
    return make_float4(act_mul(g.x, u.x), act_mul(g.y, u.y), act_mul(g.z, u.z), act_mul(g.w, u.w));
  }
  __host__ __device__ ActMulX rows_from(int64_t i) const { return {gate + i, up + i}; }
};

// The work of block `block` of gemv1_kernel (a device function so matmul_multi's kernel runs
// exactly the same code for each of its matrices). U: steps of the k loop a lane has in flight
// (U > 2: U * C weight loads issued before the sums that use them), C the columns a warp takes
// (kGemv1Cols, or fewer); the sums are the same for any U and C (each column's in k order).
template <typename W, typename XS = PlainX, int U = 2, int C = kGemv1Cols>
__device__ __forceinline__ void gemv1_block(float* __restrict__ out, const XS x, const void* __restrict__ w, int64_t K,
                                            int64_t N, int64_t block) {
  using Rows = WeightRows<W>;
  const int lane = threadIdx.x & 31;
  const int64_t n0 = (block * kGemvWarps + (threadIdx.x >> 5)) * C;
  if (n0 >= N) return;
  typename Rows::Row wr[C];
#pragma unroll
  for (int c = 0; c < C; ++c) wr[c] = Rows::row(w, n0 + c < N ? n0 + c : N - 1, K);  // tail: read, drop
  float acc[C] = {};
  if constexpr (U > 2) {  // U steps' loads issued before their sums: the same sums in the same order
    for (int64_t k0 = int64_t(lane) * 8; k0 < K; k0 += 256 * U) {
      float4 a[U], b[U];
      float wf[U][C][8];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t k = k0 + 256 * u;
        if (k >= K) break;
        a[u] = x.load4(k);
        b[u] = x.load4(k + 4);
#pragma unroll
        for (int c = 0; c < C; ++c) Rows::load8(wr[c], k, wf[u][c]);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (k0 + 256 * u >= K) break;
#pragma unroll
        for (int c = 0; c < C; ++c) acc[c] += dot8(a[u], b[u], wf[u][c]);
      }
    }
  } else {
#pragma unroll U
    for (int64_t k = int64_t(lane) * 8; k < K; k += 256) {
      const float4 a = x.load4(k);
      const float4 b = x.load4(k + 4);
      float wf[C][8];
#pragma unroll
      for (int c = 0; c < C; ++c) Rows::load8(wr[c], k, wf[c]);
#pragma unroll
      for (int c = 0; c < C; ++c)
        acc[c] += dot8(a, b, wf[c]);
    }
  }
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const float sum = warp_sum(acc[c]);
    if (lane == 0 && n0 + c < N) out[n0 + c] = sum;
  }
}

// A matrix of few columns (a grid of at most one block a multiprocessor: the 35B-A3B's 2048 x
// 4096 output projections are 64 blocks) keeps too few bytes in flight at U = 2 to stream at
// the DRAM's rate (N x U x 512 bytes: 2 MB there); those take U = kGemv1DeepUnroll steps of
// kGemv1DeepCols columns a warp (twice the blocks, registers for two a multiprocessor) and
// prefetch up to kPrefetchSmallRowMax bytes a row (the whole 16 MB of such a matrix) while the
// kernel before them runs.
constexpr int kGemv1DeepUnroll = 4, kGemv1DeepCols = 2;
constexpr int64_t kPrefetchSmallRowMax = 8192;
// Whether a one-row GEMV launch of `blocks` blocks (at kGemv1Cols columns a warp) is such a grid.
bool small_gemv_grid(int64_t blocks) { return blocks <= sm_count(); }
template <typename W, typename XS, int U, int C>
__global__ void gemv1_kernel(float* __restrict__ out,  // [1, N]
                             const XS x,               // [1, K]
                             const W* __restrict__ w,  // [N, K]
                             int64_t K, int64_t N, int64_t prefetch_row_max) {
  prefetch_rows(w, K * int64_t(sizeof(W)), int64_t(blockIdx.x) * kGemvWarps * C, kGemvWarps * C, N, prefetch_row_max);
  pdl_begin();
  gemv1_block<W, XS, U, C>(out, x, w, K, N, blockIdx.x);
}

// R rows at once (2 <= R <= 8), the small-batch decode case: x's rows are staged in shared
// memory a tile of kGemvTileK columns at a time, and each warp computes kGemv1Cols columns for all
// R rows from one read of their weights. Each lane visits k in the same order as gemv1_kernel and
// sums the same expression, so a row's result is bit-identical to computing it alone.
// grid: ceil(N / (kGemvWarps * kGemv1Cols)); needs K % 8 == 0 and 16-byte aligned rows.
constexpr int kGemvTileK = 1024;
template <typename W, int R, typename XS = PlainX>
__device__ __forceinline__ void gemv_rows_block(float* __restrict__ out, const XS x, const void* __restrict__ w,
                                                int64_t K, int64_t N, int64_t block,
                                                float* __restrict__ xs) {  // shared [R * kGemvTileK]
  using Rows = WeightRows<W>;
  const int lane = threadIdx.x & 31;
  const int64_t n0 = (block * kGemvWarps + (threadIdx.x >> 5)) * kGemv1Cols;
  typename Rows::Row wr[kGemv1Cols];
#pragma unroll
  for (int c = 0; c < kGemv1Cols; ++c) wr[c] = Rows::row(w, n0 + c < N ? n0 + c : N - 1, K);  // tail: read, drop
  float acc[R][kGemv1Cols];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int c = 0; c < kGemv1Cols; ++c) acc[r][c] = 0.0f;
  for (int64_t kt = 0; kt < K; kt += kGemvTileK) {
    const int len = int(K - kt < kGemvTileK ? K - kt : kGemvTileK);  // a multiple of 8
    __syncthreads();  // the previous tile is no longer read
    for (int i = threadIdx.x * 4; i < R * len; i += blockDim.x * 4) {
      const int r = i / len, k = i - r * len;  // len % 4 == 0: a float4 never crosses rows
      *reinterpret_cast<float4*>(xs + r * kGemvTileK + k) = x.load4(r * K + kt + k);
    }
    __syncthreads();
    if (n0 >= N) continue;
#pragma unroll 2
    for (int k = lane * 8; k < len; k += 256) {
      float wf[kGemv1Cols][8];
#pragma unroll
      for (int c = 0; c < kGemv1Cols; ++c) Rows::load8(wr[c], kt + k, wf[c]);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const float4 a = *reinterpret_cast<const float4*>(xs + r * kGemvTileK + k);
        const float4 b = *reinterpret_cast<const float4*>(xs + r * kGemvTileK + k + 4);
#pragma unroll
        for (int c = 0; c < kGemv1Cols; ++c)
          acc[r][c] += dot8(a, b, wf[c]);
      }
    }
  }
  if (n0 >= N) return;
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int c = 0; c < kGemv1Cols; ++c) {
      const float sum = warp_sum(acc[r][c]);
      if (lane == 0 && n0 + c < N) out[int64_t(r) * N + n0 + c] = sum;
    }
  }
}

template <typename W, int R, typename XS>
__global__ void gemv_rows_kernel(float* __restrict__ out,  // [R, N]
                                 const XS x,               // [R, K]
                                 const W* __restrict__ w,  // [N, K]
                                 int64_t K, int64_t N) {
  prefetch_rows(w, K * int64_t(sizeof(W)), int64_t(blockIdx.x) * kGemvWarps * kGemv1Cols, kGemvWarps * kGemv1Cols, N);
  pdl_begin();
  __shared__ __align__(16) float xs[R * kGemvTileK];
  gemv_rows_block<W, R, XS>(out, x, w, K, N, blockIdx.x, xs);
}

// matmul_multi: up to kMultiMax matrices against the same rows in one launch. Blocks
// [block_end[m - 1], block_end[m]) are matrix m's blocks of gemv1_kernel / gemv_rows_kernel, run
// through the same device functions, so every output is bit-identical to its own matmul.
constexpr int kMultiMax = 4;
struct MultiTargets {
  const void* w[kMultiMax];
  float* out[kMultiMax];
  int64_t n[kMultiMax];
  int64_t block_end[kMultiMax];
  int64_t block_cols[kMultiMax];  // output columns (weight rows) one block takes
  int64_t row_bytes[kMultiMax];   // bytes of one weight row (the prefetch before pdl_begin)
  DType dtype[kMultiMax];  // block formats: each matrix its own (gemv_multi_quant_kernel)
  int count;
};

// Deep (R = 1): the grid is at most a block a multiprocessor, so each block runs gemv1_kernel's
// small-grid code (kGemv1DeepUnroll steps of kGemv1DeepCols columns a warp, whole rows
// prefetched): the router and shared-expert projections of an MoE layer (1281 columns).
template <typename W, int R, bool Deep = false>
__global__ void gemv_multi_kernel(MultiTargets t, const float* __restrict__ x, int64_t K) {
  int m = 0;  // from the kernel's parameters only: nothing a previous kernel writes
  while (m + 1 < t.count && int64_t(blockIdx.x) >= t.block_end[m]) ++m;
  const int64_t block = int64_t(blockIdx.x) - (m ? t.block_end[m - 1] : 0);
  const void* w = t.w[m];
  prefetch_rows(w, t.row_bytes[m], block * t.block_cols[m], t.block_cols[m], t.n[m],
                Deep ? kPrefetchSmallRowMax : kPrefetchRowMax);
  pdl_begin();
  if constexpr (R == 1 && Deep) {
    gemv1_block<W, PlainX, kGemv1DeepUnroll, kGemv1DeepCols>(t.out[m], PlainX{x}, w, K, t.n[m], block);
  } else if constexpr (R == 1) {
    gemv1_block<W>(t.out[m], PlainX{x}, w, K, t.n[m], block);
  } else {
    __shared__ __align__(16) float xs[R * kGemvTileK];
    gemv_rows_block<W, R>(t.out[m], PlainX{x}, w, K, t.n[m], block, xs);
  }
}

// The block-format GEMV: as gemv_multi_kernel, each matrix decoded by its own format (a branch
// uniform over the block), so a Q4_K_M layer's Q4_K and Q6_K projections share one launch, and
// matmul of one block-format matrix is this kernel with one target. Q4_K and Q6_K take the
// copy-engine GEMVs (Q6_K where q6k_gemv::supported(K)); Q8_0 and other Q6_K the unit GEMV of
// quant_gemv.cuh (a lane per 32 elements, scales folded out of the inner sums); Q5_0, Q5_1,
// Q5_K and MXFP4 the GEMV code above with each 8 weights decoded by load8.
template <typename Q, int R>
__device__ __forceinline__ void gemv_quant_block(const MultiTargets& t, int m, const float* __restrict__ x, int64_t K,
                                                 int64_t block, float* __restrict__ xs) {
  if constexpr (R == 1) gemv1_block<Q>(t.out[m], PlainX{x}, t.w[m], K, t.n[m], block);
  else gemv_rows_block<Q, R>(t.out[m], PlainX{x}, t.w[m], K, t.n[m], block, xs);
}

// Output columns per warp of the block GEMV over R rows (Q4_K: 32, Q6_K on the copy engine: 16,
// each warp 1/P of their super-blocks, block_gemv_geometry.h, whatever R): the unit GEMV (Q8_0,
// other Q6_K) takes 2 for one row
// (twice the warps of 4: more loads in flight, a smaller last wave; measured 9B Q4_K_M decode
// 173 -> 190 t/s) and 4 for R > 1 (each row's activations read once for 4 columns: 2 measured
// 323 -> 196 GB/s at T = 8); the load8 formats 4. A column's sums do not depend on it.
template <int R>
constexpr int kUnitCols = R == 1 ? 2 : 4;
inline bool is_unit_format(DType dt) { return dt == DType::kQ4_K || dt == DType::kQ6_K || dt == DType::kQ8_0; }
// Output columns one block of the block-format GEMV takes for a matrix of format dt over R rows.
inline int64_t gemv_quant_block_cols(DType dt, int64_t R, int64_t K) {
  if (dt == DType::kQ4_K) return q4k_gemv::block_columns(K);
  if (dt == DType::kQ6_K && q6k_gemv::supported(K)) return q6k_gemv::block_columns(K);
  return kGemvWarps * (is_unit_format(dt) && R == 1 ? kUnitCols<1> : kGemv1Cols);
}
// Dynamic shared memory of the block-format GEMV over R rows: the Q4_K GEMV's rings and scale
// tables when a matrix is Q4_K (99 KiB for one row, 224 KiB for 8), the Q6_K GEMV's (80 KiB,
// 202 KiB), else R rows of the activation tile. The kernels are opted in to the largest once.
static_assert(kGemvWarps == q4k_gemv::kWarps && kGemvWarps == q6k_gemv::kWarps,
              "the copy-engine GEMVs' blocks are the GEMV's");
constexpr size_t kQuantGemvSmemMax = size_t(227) << 10;
inline size_t gemv_quant_smem(int R, bool q4k, bool q6k) {
  size_t bytes = R > 1 ? size_t(R) * kGemvTileK * sizeof(float) : 16;
  if (q4k) bytes = std::max(bytes, q4k_gemv::smem_bytes(R));
  if (q6k) bytes = std::max(bytes, q6k_gemv::smem_bytes(R));
  return bytes;
}

// The tensor maps of a launch's matrices that the copy-engine GEMVs read as tensors (Q4_K for
// one row, Q6_K for any), indexed like MultiTargets.
struct TmaMaps {
  CUtensorMap map[kMultiMax];
};

// kUnitsOnly: every matrix is Q4_K, Q6_K or Q8_0 (a Q4_K_M or Q8_0 model's launches), so the
// kernel holds only those GEMVs and, for one row, is capped at 128 registers (2 blocks per SM,
// as many as the Q4_K GEMV's 99 KiB allow; it takes 121 without spilling, the Q6_K GEMV's
// 80 KiB likewise. An older Q4_K kernel, capped at 80 for 3 blocks, spilled and measured
// slower); R > 1 is not capped
// (at 128 registers it spilled ~140 bytes and T = 8 ran at 60% of the speed; uncapped it needs
// up to 255, no spills).
// The general kernel holds every format. A matrix's code, and so its bits, is the same in both.
template <int R, bool kUnitsOnly>
__global__ void __launch_bounds__(kGemvWarps * 32, kUnitsOnly && R == 1 ? 2 : 1)
    gemv_multi_quant_kernel(MultiTargets t, const __grid_constant__ TmaMaps maps, const float* __restrict__ x,
                            int64_t K) {
  int m = 0;  // from the kernel's parameters only: nothing a previous kernel writes
  while (m + 1 < t.count && int64_t(blockIdx.x) >= t.block_end[m]) ++m;
  const int64_t block = int64_t(blockIdx.x) - (m ? t.block_end[m - 1] : 0);
  // gemv_quant_smem(R, ..) bytes: the copy-engine GEMVs' rings, or the other formats' activation tile
  extern __shared__ __align__(16) uint8_t gemv_smem[];
  float* const xs = reinterpret_cast<float*>(gemv_smem);
  const DType dt = t.dtype[m];
  if (dt == DType::kQ4_K) {  // copies its weights before pdl_begin() itself
    gemv_q4k_block<R>(t.out[m], x, t.w[m], &maps.map[m], K, t.n[m], block, gemv_smem);
    return;
  }
  if (dt == DType::kQ6_K && q6k_gemv::supported(K)) {  // likewise
    gemv_q6k_block<R>(t.out[m], x, &maps.map[m], K, t.n[m], block, gemv_smem);
    return;
  }
  prefetch_rows(t.w[m], t.row_bytes[m], block * t.block_cols[m], t.block_cols[m], t.n[m]);
  pdl_begin();
  if (dt == DType::kQ6_K) gemv_units_block<UQ6_K, R, kGemvWarps, kUnitCols<R>>(t.out[m], x, t.w[m], K, t.n[m], block, xs);
  else if (kUnitsOnly || dt == DType::kQ8_0) gemv_units_block<UQ8_0, R, kGemvWarps, kUnitCols<R>>(t.out[m], x, t.w[m], K, t.n[m], block, xs);
  else if constexpr (!kUnitsOnly) {
    switch (dt) {
      case DType::kQ5_0: gemv_quant_block<QQ5_0, R>(t, m, x, K, block, xs); break;
      case DType::kQ5_1: gemv_quant_block<QQ5_1, R>(t, m, x, K, block, xs); break;
      case DType::kQ5_K: gemv_quant_block<QQ5_K, R>(t, m, x, K, block, xs); break;
      default: gemv_quant_block<QMXFP4, R>(t, m, x, K, block, xs); break;
    }
  }
}

// Rows [row0, row0 + rows) of a block-format matrix [N, K] as BF16 [rows, K]: hi = ggml's
// dequantized value rounded to BF16, lo (if asked for) = the rest rounded to BF16, so hi + lo is
// within 2^-16 of the value. The prefill path's weight tile.
__global__ void dequantize_bf16_kernel(__nv_bfloat16* __restrict__ hi,  // [rows, K]
                                       __nv_bfloat16* __restrict__ lo,  // [rows, K] or null
                                       const uint8_t* __restrict__ w,   // [N, row_bytes]
                                       DType dt, size_t row_bytes, int64_t row0, int64_t rows, int64_t K) {
  pdl_begin();
  const int64_t groups = rows * (K / 8);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < groups; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / (K / 8), k = (i - r * (K / 8)) * 8;
    float f[8];
    load8_block(dt, w + size_t(row0 + r) * row_bytes, k, f);
    __nv_bfloat162 h[4], l[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      h[j] = __floats2bfloat162_rn(f[2 * j], f[2 * j + 1]);
      l[j] = __floats2bfloat162_rn(f[2 * j] - __low2float(h[j]), f[2 * j + 1] - __high2float(h[j]));
    }
    *reinterpret_cast<uint4*>(hi + r * K + k) = *reinterpret_cast<const uint4*>(h);
    if (lo) *reinterpret_cast<uint4*>(lo + r * K + k) = *reinterpret_cast<const uint4*>(l);
  }
}

// Any K and alignment (row-slice views with odd K): one warp per column, lanes stride by 1.
// grid: (ceil(N / kGemvWarps), ceil(T / kGemvMaxRows)); block: kGemvWarps warps.
template <typename W>
__global__ void gemv_scalar_kernel(float* __restrict__ out,      // [T, N]
                                   const float* __restrict__ x,  // [T, K]
                                   const W* __restrict__ w,      // [N, K]
                                   int64_t T, int64_t K, int64_t N) {
  pdl_begin();
  const int lane = threadIdx.x & 31;
  const int64_t n = int64_t(blockIdx.x) * kGemvWarps + (threadIdx.x >> 5);
  if (n >= N) return;
  const int64_t row0 = int64_t(blockIdx.y) * kGemvMaxRows;
  const int rows = T - row0 < kGemvMaxRows ? int(T - row0) : kGemvMaxRows;
  const W* wr = w + n * K;
  const float* xr = x + row0 * K;
  float acc[kGemvMaxRows];
#pragma unroll
  for (int r = 0; r < kGemvMaxRows; ++r) acc[r] = 0.0f;
  for (int64_t k = lane; k < K; k += 32) {
    const float wv = to_f32(wr[k]);
#pragma unroll
    for (int r = 0; r < kGemvMaxRows; ++r)
      if (r < rows) acc[r] += xr[r * K + k] * wv;
  }
#pragma unroll
  for (int r = 0; r < kGemvMaxRows; ++r) {
    const float s = warp_sum(acc[r]);
    if (lane == 0 && r < rows) out[(row0 + r) * N + n] = s;
  }
}

// terms[j][i] = bf16(x[i] - sum of the earlier terms), j < n_terms; terms: [n_terms, n].
__global__ void split_bf16_kernel(__nv_bfloat16* __restrict__ terms, const float* __restrict__ x, int64_t n,
                                  int n_terms) {
  pdl_begin();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float rest = x[i];
    for (int j = 0; j < n_terms; ++j) {
      const __nv_bfloat16 t = __float2bfloat16_rn(rest);
      terms[j * n + i] = t;
      rest -= __bfloat162float(t);
    }
  }
}

// Every full group of kGemvMaxRows rows in one launch (more than 8 rows: deterministic mode and
// kExact prefill). grid: (groups, ceil(N / (kGemvWarps * kGemv1Cols))), the groups fastest, so
// the blocks of all groups for one tile of weight rows are resident together and the tile is read
// from DRAM about once, then from L2 — a launch a group read the whole matrix once per group.
// Block (g, b) runs gemv_rows_block for rows [8g, 8g + 8) and column block b: the code a launch of
// that group runs, so every row's bits are the same.
template <typename W, typename XS>
__global__ void gemv_groups_kernel(float* __restrict__ out,  // [groups * 8, N]
                                   const XS x,               // [groups * 8, K]
                                   const W* __restrict__ w,  // [N, K]
                                   int64_t K, int64_t N) {
  if (blockIdx.x == 0)
    prefetch_rows(w, K * int64_t(sizeof(W)), int64_t(blockIdx.y) * kGemvWarps * kGemv1Cols, kGemvWarps * kGemv1Cols, N);
  pdl_begin();
  __shared__ __align__(16) float xs[kGemvMaxRows * kGemvTileK];
  const int64_t r0 = int64_t(blockIdx.x) * kGemvMaxRows;
  gemv_rows_block<W, kGemvMaxRows, XS>(out + r0 * N, x.rows_from(r0 * K), w, K, N, blockIdx.y, xs);
}

template <typename W, int R, typename XS>
void launch_gemv_rows(cudaStream_t stream, float* out, const XS x, const W* w, int64_t K, int64_t N) {
  launch(gemv_rows_kernel<W, R, XS>, unsigned(ceil_div(N, kGemvWarps * kGemv1Cols)), kGemvWarps * 32, 0, stream, out, x,
         w, K, N);
  CUDA_CHECK_LAUNCH();
}

// The vectorized GEMV over T rows (K % 8 == 0, 16-byte aligned rows): groups of 8 rows (then the
// remainder), each group one pass over the weights; two or more full groups share a launch
// (gemv_groups_kernel), which reads the weights from DRAM about once for all of them.
template <typename W, typename XS>
void launch_gemv_vec(cudaStream_t stream, float* out, const XS x, const W* w, int64_t T, int64_t K, int64_t N) {
  int64_t r0 = 0;
  if (const int64_t groups = T / kGemvMaxRows; groups > 1) {  // the full groups in one launch
    const int64_t col_blocks = ceil_div(N, kGemvWarps * kGemv1Cols);
    KCHECK_MSG(groups <= INT32_MAX && col_blocks <= 65535, "matmul: ", T, " rows of ", N,
               " columns is too many for the GEMV path");
    launch(gemv_groups_kernel<W, XS>, dim3(unsigned(groups), unsigned(col_blocks)), kGemvWarps * 32, 0, stream, out,
           x, w, K, N);
    CUDA_CHECK_LAUNCH();
    r0 = groups * kGemvMaxRows;
  }
  for (; r0 < T; r0 += kGemvMaxRows) {
    const int rows = int(std::min<int64_t>(kGemvMaxRows, T - r0));
    float* o = out + r0 * N;
    const XS xr = x.rows_from(r0 * K);
    with_rows(rows, [&]<int R>() {
      if constexpr (R == 1) {
        const int64_t blocks = ceil_div(N, kGemvWarps * kGemv1Cols);
        constexpr bool plain = !requires { W::kBlockBytes; };  // the block formats keep their unroll
        if (plain && small_gemv_grid(blocks))
          launch(gemv1_kernel<W, XS, kGemv1DeepUnroll, kGemv1DeepCols>,
                 unsigned(ceil_div(N, kGemvWarps * kGemv1DeepCols)), kGemvWarps * 32, 0, stream, o, xr, w, K, N,
                 kPrefetchSmallRowMax);
        else
          launch(gemv1_kernel<W, XS, 2, kGemv1Cols>, unsigned(blocks), kGemvWarps * 32, 0, stream, o, xr, w, K, N,
                 kPrefetchRowMax);
        CUDA_CHECK_LAUNCH();
      } else {
        launch_gemv_rows<W, R>(stream, o, xr, w, K, N);
      }
    });
  }
}

// Rows in groups of 8 (then the remainder), each group one pass over the weights.
template <typename W>
void launch_gemv(cudaStream_t stream, float* out, const float* x, const W* w, int64_t T, int64_t K, int64_t N) {
  const bool vec = K % 8 == 0 && aligned16(x) && aligned16(w);
  if (!vec) {
    dim3 grid(unsigned(ceil_div(N, kGemvWarps)), unsigned(ceil_div(T, kGemvMaxRows)));
    KCHECK_MSG(grid.y <= 65535, "matmul: ", T, " rows is too many for the GEMV path");
    launch(gemv_scalar_kernel<W>, grid, kGemvWarps * 32, 0, stream, out, x, w, T, K, N);
    CUDA_CHECK_LAUNCH();
    return;
  }
  launch_gemv_vec<W>(stream, out, PlainX{x}, w, T, K, N);
}

// out[i] = sum of the n_terms partial products p[j][i] (j in order), p: [n_terms, n].
__global__ void sum_terms_kernel(float* __restrict__ out, const float* __restrict__ p, int64_t n, int n_terms) {
  pdl_begin();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float s = p[i];
    for (int j = 1; j < n_terms; ++j) s += p[j * n + i];
    out[i] = s;
  }
}

// Up to this many rows the terms go through one GEMM over the stacked [n_terms * T, K]
// activations, so the weights are read once rather than once per term (what bounds a batch of
// decode rows); the partial products are then summed. Past it (prefill) one GEMM per term,
// accumulated in place, saves the [n_terms * T, N] partial buffer.
constexpr int64_t kStackedTermsMaxRows = 256;

// out^T = w . x^T in cuBLAS's column-major terms: C[N, T] = op(A)[N, K] . B[K, T] with
// A = w seen as column-major [K, N] (transposed), B = x as column-major [K, T].
void launch_cublas_bf16(const Context& ctx, float* out, const float* x, const __nv_bfloat16* w, int64_t T, int64_t K,
                        int64_t N, int n_terms) {
  auto* terms = static_cast<__nv_bfloat16*>(ctx.scratch->get(kSlotMatmulX, size_t(T * K) * 2 * size_t(n_terms)));
  launch(split_bf16_kernel, unsigned(std::min<int64_t>(ceil_div(T * K, 256), 65535 * 4)), 256, 0, ctx.stream, terms, x,
         T * K, n_terms);
  CUDA_CHECK_LAUNCH();
  const float one = 1.0f, zero = 0.0f;
  if (n_terms > 1 && T <= kStackedTermsMaxRows) {
    const int64_t cols = int64_t(n_terms) * T;
    auto* partial = static_cast<float*>(ctx.scratch->get(kSlotMatmulPartial, size_t(cols * N) * 4));
    CUBLAS_CHECK(cublasGemmEx(ctx.cublas, CUBLAS_OP_T, CUBLAS_OP_N, int(N), int(cols), int(K), &one, w, CUDA_R_16BF,
                              int(K), terms, CUDA_R_16BF, int(K), &zero, partial, CUDA_R_32F, int(N),
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    launch(sum_terms_kernel, unsigned(std::min<int64_t>(ceil_div(T * N, 256), 65535 * 4)), 256, 0, ctx.stream, out,
           partial, T * N, n_terms);
    CUDA_CHECK_LAUNCH();
    return;
  }
  for (int j = 0; j < n_terms; ++j) {
    CUBLAS_CHECK(cublasGemmEx(ctx.cublas, CUBLAS_OP_T, CUBLAS_OP_N, int(N), int(T), int(K), &one, w, CUDA_R_16BF,
                              int(K), terms + j * T * K, CUDA_R_16BF, int(K), j == 0 ? &zero : &one, out, CUDA_R_32F,
                              int(N), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
}

void launch_cublas_f32(const Context& ctx, float* out, const float* x, const float* w, int64_t T, int64_t K,
                       int64_t N) {
  const float alpha = 1.0f, beta = 0.0f;
  CUBLAS_CHECK(cublasSgemm(ctx.cublas, CUBLAS_OP_T, CUBLAS_OP_N, int(N), int(T), int(K), &alpha, w, int(K), x, int(K),
                           &beta, out, int(N)));
}

// A Q4_K or Q6_K matrix [N, row_bytes] as the 2D tensor the copy-engine GEMV reads: Q4_K as
// 32-bit words [N, row_bytes / 4], boxes of one super-block (36 words) by 32 rows; Q6_K as
// 16-bit words [N, row_bytes / 2], boxes of 120 words (a super-block and 30 bytes) by 16 rows.
// Rows past N, and words past a row's end, read as zeros. Encoding is host work only (no device
// call), so it may happen while a graph is captured.
CUtensorMap block_tensor_map(DType dt, const void* w, int64_t N, int64_t row_bytes) {
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found));
    KCHECK_MSG(found == cudaDriverEntryPointSuccess && fn != nullptr,
               "matmul: the CUDA driver has no cuTensorMapEncodeTiled, which the Q4_K GEMV needs (driver 12.0 or "
               "later)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  const bool q4k = dt == DType::kQ4_K;
  const int64_t word = q4k ? 4 : 2;
  CUtensorMap map{};
  const cuuint64_t dims[2] = {cuuint64_t(row_bytes / word), cuuint64_t(N)};
  const cuuint64_t strides[1] = {cuuint64_t(row_bytes)};
  const cuuint32_t box[2] = {q4k ? cuuint32_t(q4k_gemv::kSuperBytes / 4) : cuuint32_t(q6k_gemv::kBoxBytes / 2),
                             q4k ? 32u : cuuint32_t(q6k_gemv::kCols)};
  const cuuint32_t steps[2] = {1, 1};
  const CUresult r =
      encode(&map, q4k ? CU_TENSOR_MAP_DATA_TYPE_UINT32 : CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, const_cast<void*>(w), dims,
             strides, box, steps, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  KCHECK_MSG(r == CUDA_SUCCESS, "matmul: cuTensorMapEncodeTiled failed (error ", int(r), ") for a ", dtype_name(dt),
             " matrix of ", N, " rows of ", row_bytes, " bytes");
  return map;
}

template <int R, bool kUnitsOnly>
void launch_gemv_quant_kernel(cudaStream_t stream, const MultiTargets& mt, int64_t blocks, const float* x, int64_t K) {
  static std::once_flag opted_in;
  std::call_once(opted_in, [] {
    CUDA_CHECK(cudaFuncSetAttribute(gemv_multi_quant_kernel<R, kUnitsOnly>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(kQuantGemvSmemMax)));
  });
  bool q4k = false, q6k = false;
  TmaMaps maps{};
  for (int m = 0; m < mt.count; ++m) {
    if (mt.dtype[m] == DType::kQ4_K) {
      q4k = true;
      if (R == 1) maps.map[m] = block_tensor_map(mt.dtype[m], mt.w[m], mt.n[m], mt.row_bytes[m]);
    } else if (mt.dtype[m] == DType::kQ6_K && q6k_gemv::supported(K)) {
      q6k = true;
      maps.map[m] = block_tensor_map(mt.dtype[m], mt.w[m], mt.n[m], mt.row_bytes[m]);
    }
  }
  const size_t smem = gemv_quant_smem(R, q4k, q6k);
  KCHECK_MSG(smem <= kQuantGemvSmemMax, "matmul: block-format GEMV needs ", smem, " bytes of shared memory for ", R,
             " rows, past the ", kQuantGemvSmemMax, " bytes the kernel is opted in to");
  launch(gemv_multi_quant_kernel<R, kUnitsOnly>, unsigned(blocks), kGemvWarps * 32, smem, stream, mt, maps, x, K);
  CUDA_CHECK_LAUNCH();
}

template <bool kUnitsOnly>
void launch_gemv_quant_rows(cudaStream_t stream, const MultiTargets& mt, int64_t blocks, const float* x, int64_t T,
                            int64_t K) {
  with_rows(T, [&]<int R>() { launch_gemv_quant_kernel<R, kUnitsOnly>(stream, mt, blocks, x, K); });
}

void launch_gemv_quant(cudaStream_t stream, const MultiTargets& mt, int64_t blocks, const float* x, int64_t T,
                       int64_t K) {
  bool units = true;
  for (int m = 0; m < mt.count; ++m) units = units && is_unit_format(mt.dtype[m]);
  if (units) launch_gemv_quant_rows<true>(stream, mt, blocks, x, T, K);
  else launch_gemv_quant_rows<false>(stream, mt, blocks, x, T, K);
}

// The dequantized weight tile of the prefill path: at most this many bytes of BF16 rows per
// term (hi, and lo when the weight is split; memory_plan.cc reserves both).
constexpr size_t kDequantTileBytes = size_t(64) << 20;

// Block-format weights, any T: the GEMV kernel in groups of up to 8 rows (decode, deterministic
// mode), or (prefill) the weight dequantized to BF16 a tile of rows at a time and cuBLAS as in
// launch_cublas_bf16's per-term path, each tile writing its column range of out.
void matmul_quant(const Context& ctx, const Tensor& out, const Tensor& x, const Tensor& w, bool gemv_only) {
  const int64_t T = x.rows, K = x.cols, N = w.rows;
  KCHECK_MSG(aligned16(x.data) && aligned16(w.data), "matmul: ", dtype_name(w.dtype),
             " weights need 16-byte aligned x and weight rows");
  if (T <= kGemvMaxRows || gemv_only) {
    MultiTargets mt{};
    mt.count = 1;
    mt.w[0] = w.data;
    mt.n[0] = N;
    mt.dtype[0] = w.dtype;
    mt.row_bytes[0] = int64_t(w.row_bytes());
    for (int64_t r0 = 0; r0 < T; r0 += kGemvMaxRows) {
      const int64_t rows = std::min<int64_t>(kGemvMaxRows, T - r0);
      mt.out[0] = out.f32() + r0 * N;
      mt.block_cols[0] = gemv_quant_block_cols(w.dtype, rows, K);
      mt.block_end[0] = ceil_div(N, mt.block_cols[0]);
      launch_gemv_quant(ctx.stream, mt, mt.block_end[0], x.f32() + r0 * K, rows, K);
    }
    return;
  }
  // A dequantized weight is not exact in BF16 (a block's scale times its quant takes up to ~22
  // significant bits), so the F32-grade setting splits the weight as well as the activations:
  // w = w_hi + w_lo, x = x_1 + x_2 + ..., and out = w_hi.x_1 + w_hi.x_2 + w_lo.x_1, the terms
  // dropped (w_hi.x_3, w_lo.x_2, ...) each below 2^-16 of the product: three GEMMs, as for BF16
  // weights. 2 terms: w_hi.x_1 + w_hi.x_2; 1 term: w_hi.x_1 (the weight rounded to BF16).
  const int n_terms = ctx.matmul_precision == MatmulPrecision::kBf16     ? 1
                      : ctx.matmul_precision == MatmulPrecision::kBf16x2 ? 2
                                                                         : 3;
  const int x_terms = std::min(n_terms, 2);
  const bool split_w = n_terms == 3;
  auto* terms = static_cast<__nv_bfloat16*>(ctx.scratch->get(kSlotMatmulX, size_t(T * K) * 2 * size_t(x_terms)));
  launch(split_bf16_kernel, unsigned(std::min<int64_t>(ceil_div(T * K, 256), 65535 * 4)), 256, 0, ctx.stream, terms,
         x.f32(), T * K, x_terms);
  CUDA_CHECK_LAUNCH();
  const int64_t tile_rows = std::max<int64_t>(1, std::min<int64_t>(N, int64_t(kDequantTileBytes / size_t(K * 2))));
  const size_t tile_elems = size_t(tile_rows * K);
  auto* hi = static_cast<__nv_bfloat16*>(ctx.scratch->get(kSlotMatmulPartial, tile_elems * 2 * (split_w ? 2 : 1)));
  __nv_bfloat16* lo = split_w ? hi + tile_elems : nullptr;
  const float one = 1.0f, zero = 0.0f;
  for (int64_t n0 = 0; n0 < N; n0 += tile_rows) {
    const int64_t rows = std::min(tile_rows, N - n0);
    launch(dequantize_bf16_kernel, unsigned(std::min<int64_t>(ceil_div(rows * K / 8, 256), 65535 * 4)), 256, 0,
           ctx.stream, hi, lo, static_cast<const uint8_t*>(w.data), w.dtype, w.row_bytes(), n0, rows, K);
    CUDA_CHECK_LAUNCH();
    // (weight part, activation term) of each GEMM, in the order they accumulate
    const std::pair<const __nv_bfloat16*, int> products[3] = {{hi, 0}, {hi, 1}, {lo, 0}};
    for (int j = 0; j < n_terms; ++j) {
      CUBLAS_CHECK(cublasGemmEx(ctx.cublas, CUBLAS_OP_T, CUBLAS_OP_N, int(rows), int(T), int(K), &one,
                                products[j].first, CUDA_R_16BF, int(K), terms + products[j].second * T * K,
                                CUDA_R_16BF, int(K), j == 0 ? &zero : &one, out.f32() + n0, CUDA_R_32F, int(N),
                                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
  }
}

}  // namespace

void matmul(const Context& ctx, const Tensor& out, const Tensor& x, const Tensor& w) {
  check_f32(x, "matmul x");
  check_f32(out, "matmul out");
  KCHECK_MSG(x.cols == w.cols && out.rows == x.rows && out.cols == w.rows, "matmul shapes: x [", x.rows, ",", x.cols,
             "] w [", w.rows, ",", w.cols, "] out [", out.rows, ",", out.cols, "]");
  KCHECK_MSG(w.device == Device::kCuda, "matmul: weight is not on the CUDA device");
  const int64_t T = x.rows, K = x.cols, N = w.rows;
  if (T == 0 || N == 0) return;
  KCHECK_MSG(K <= INT32_MAX && N <= INT32_MAX && T <= INT32_MAX, "matmul: dimensions beyond cuBLAS's int range");
  if (K == 0) {
    CUDA_CHECK(cudaMemsetAsync(out.data, 0, out.nbytes(), ctx.stream));
    return;
  }
  // cuBLAS picks its algorithm (tiling, split-K) by shape, so a row's bits there depend on T:
  // deterministic mode keeps to the GEMV kernels, whose rows do not.
  const bool gemv_only = ctx.matmul_precision == MatmulPrecision::kExact || ctx.deterministic;
  if (dtype_is_quantized(w.dtype)) {
    matmul_quant(ctx, out, x, w, gemv_only);
    return;
  }
  if (T > kGemvMaxRows && w.dtype == DType::kBF16 && !gemv_only) {
    const int n_terms = ctx.matmul_precision == MatmulPrecision::kBf16     ? 1
                        : ctx.matmul_precision == MatmulPrecision::kBf16x2 ? 2
                                                                           : 3;
    launch_cublas_bf16(ctx, out.f32(), x.f32(), w.as<const __nv_bfloat16>(), T, K, N, n_terms);
    return;
  }
  if (T > kGemvMaxRows && w.dtype == DType::kF32 && !gemv_only) {
    launch_cublas_f32(ctx, out.f32(), x.f32(), w.f32(), T, K, N);
    return;
  }
  dispatch_weight(w.dtype, "matmul", [&]<typename W>() {
    launch_gemv<W>(ctx.stream, out.f32(), x.f32(), w.as<const W>(), T, K, N);
  });
}

namespace {

// Where matmul_gated runs one GEMV launch: where matmul would take the vectorized GEMV (T <=
// kGemvMaxRows, a plain dtype, aligned rows) and K is at most kGatedFuseMaxK — the same kernel and
// sums, with act(gate) * up formed as it is loaded. Every warp forms all K of them (~25
// instructions each, against ~1.5 for each of the warp's 4 K weights), which is cheap next to a
// launch for a small projection (an MoE's shared expert, K = 512) and costly for a large one: with
// the fusion at K = 12288, Qwen3.5-9B decode fell from 197.7 to 162.9 t/s (H200, 2026-12-02).
constexpr int64_t kGatedFuseMaxK = 1024;
bool gated_gemv_fits(const Tensor& out, const Tensor& gate, const Tensor& up, const Tensor& w) {
  const int64_t T = gate.rows, K = gate.cols;
  return T >= 1 && T <= kGemvMaxRows && K > 0 && K <= kGatedFuseMaxK && K % 8 == 0 && !dtype_is_quantized(w.dtype) &&
         w.dtype != DType::kI32 && w.cols == K && w.rows > 0 && w.device == Device::kCuda && aligned16(gate.data) &&
         aligned16(up.data) && aligned16(w.data) && out.rows == T && out.cols == w.rows && out.dtype == DType::kF32 &&
         out.device == Device::kCuda;
}

void check_gated(const Tensor& gate, const Tensor& up, Activation act) {
  KCHECK_MSG(act == Activation::kSilu || act == Activation::kGeluTanh,
             "matmul_gated: activation must be silu or gelu-tanh");
  check_f32(gate, "matmul_gated gate");
  check_f32(up, "matmul_gated up");
  KCHECK_MSG(gate.rows == up.rows && gate.cols == up.cols, "matmul_gated: gate [", gate.rows, ",", gate.cols, "] and up [",
             up.rows, ",", up.cols, "]");
}

// An MoE layer's route, for the blocks of gated_route_kernel that run it.
struct RouteArgs {
  int32_t* ids;
  float* weights;
  const float* logits;
  int E, k;
  bool norm_topk;
};

// matmul_gated_and_route in one launch: blocks [0, gemv_blocks) are matmul_gated's GEMV blocks
// (gemv1_block / gemv_rows_block over ActMulX, as launch_gemv_vec runs them for R rows), blocks
// [gemv_blocks, gemv_blocks + R) route row blockIdx.x - gemv_blocks (moe_route_row). The two read
// different inputs and write different outputs, so each is bit-identical to its own launch, and
// neither waits for the other. Dynamic smem: E doubles (the route's).
template <typename W, Activation A, int R>
__global__ void gated_route_kernel(float* __restrict__ out,  // [R, N]
                                   const ActMulX<A> x,       // [R, K]
                                   const W* __restrict__ w,  // [N, K]
                                   int64_t K, int64_t N, unsigned gemv_blocks, RouteArgs r) {
  if (blockIdx.x < gemv_blocks) {
    prefetch_rows(w, K * int64_t(sizeof(W)), int64_t(blockIdx.x) * kGemvWarps * kGemv1Cols, kGemvWarps * kGemv1Cols,
                  N);
    pdl_begin();
    if constexpr (R == 1) {
      gemv1_block<W, ActMulX<A>>(out, x, w, K, N, blockIdx.x);
    } else {
      __shared__ __align__(16) float xs[R * kGemvTileK];
      gemv_rows_block<W, R, ActMulX<A>>(out, x, w, K, N, blockIdx.x, xs);
    }
    return;
  }
  pdl_begin();
  extern __shared__ double prob[];  // [E]
  moe_route_row(r.ids, r.weights, r.logits, r.E, r.k, r.norm_topk, int64_t(blockIdx.x - gemv_blocks), prob);
}
static_assert(kGemvWarps * 32 == kRouteThreads, "the route's blocks are the GEMV's");

}  // namespace

void matmul_gated(const Context& ctx, const Tensor& out, const Tensor& gate, const Tensor& up, const Tensor& w,
                  Activation act) {
  check_gated(gate, up, act);
  const int64_t T = gate.rows, K = gate.cols;
  if (!gated_gemv_fits(out, gate, up, w)) {
    if (act == Activation::kGeluTanh) gelu_tanh_mul(ctx, gate, gate, up);
    else silu_mul(ctx, gate, gate, up);
    matmul(ctx, out, gate, w);
    return;
  }
  dispatch_weight(w.dtype, "matmul_gated", [&]<typename W>() {
    if (act == Activation::kGeluTanh)
      launch_gemv_vec<W>(ctx.stream, out.f32(), ActMulX<Activation::kGeluTanh>{gate.f32(), up.f32()}, w.as<const W>(),
                         T, K, w.rows);
    else
      launch_gemv_vec<W>(ctx.stream, out.f32(), ActMulX<Activation::kSilu>{gate.f32(), up.f32()}, w.as<const W>(), T,
                         K, w.rows);
  });
}

void matmul_gated_and_route(const Context& ctx, const Tensor& out, const Tensor& gate, const Tensor& up,
                            const Tensor& w, Activation act, const Tensor& ids, const Tensor& weights,
                            const Tensor& logits, int top_k, bool norm_topk) {
  const int64_t T = gate.rows, K = gate.cols, N = w.rows, E = logits.cols;
  // the route's shared memory (dynamic and static) beside the GEMV's staged rows, within the 48 KB
  // a launch has unasked
  const size_t smem_total = size_t(E) * sizeof(double) + kRouteStaticSmem +
                            (T > 1 ? size_t(T * kGemvTileK) * sizeof(float) : 0);
  if (!gated_gemv_fits(out, gate, up, w) || logits.rows != T || smem_total > size_t(48) << 10) {
    matmul_gated(ctx, out, gate, up, w, act);
    moe_route(ctx, ids, weights, logits, top_k, norm_topk);  // each checks its arguments
    return;
  }
  check_gated(gate, up, act);
  check_moe_route(ids, weights, logits, top_k);
  const unsigned gemv_blocks = unsigned(ceil_div(N, kGemvWarps * kGemv1Cols));
  const RouteArgs r{ids.as<int32_t>(), weights.f32(), logits.f32(), int(E), top_k, norm_topk};
  const size_t smem = size_t(E) * sizeof(double);
  dispatch_weight(w.dtype, "matmul_gated", [&]<typename W>() {
    const auto run = [&]<Activation A>() {
      with_rows(T, [&]<int R>() {
        launch(gated_route_kernel<W, A, R>, gemv_blocks + unsigned(T), kGemvWarps * 32, smem, ctx.stream, out.f32(),
               ActMulX<A>{gate.f32(), up.f32()}, w.as<const W>(), K, N, gemv_blocks, r);
      });
    };
    if (act == Activation::kGeluTanh) run.template operator()<Activation::kGeluTanh>();
    else run.template operator()<Activation::kSilu>();
    CUDA_CHECK_LAUNCH();
  });
}

void matmul_multi(const Context& ctx, const Tensor& x, std::span<const MatmulTarget> targets) {
  const int64_t T = x.rows, K = x.cols;
  // One launch where every matrix would take the vectorized GEMV kernels with one row group (T <=
  // kGemvMaxRows takes them in every mode); otherwise each its own matmul. Same results either way.
  bool fused = !targets.empty() && int(targets.size()) <= kMultiMax && T >= 1 && T <= kGemvMaxRows &&
               K % 8 == 0 && aligned16(x.data) && x.dtype == DType::kF32 && x.device == Device::kCuda;
  const bool quant = !targets.empty() && dtype_is_quantized(targets[0].w.dtype);
  for (const MatmulTarget& t : targets) {
    // block formats may mix (Q4_K with Q6_K); plain dtypes must all be the same
    fused = fused && (quant ? dtype_is_quantized(t.w.dtype) : t.w.dtype == targets[0].w.dtype) && t.w.cols == K && t.w.rows > 0 && aligned16(t.w.data) &&
            t.w.device == Device::kCuda && t.out.rows == T && t.out.cols == t.w.rows && t.out.dtype == DType::kF32;
  }
  if (!fused) {
    for (const MatmulTarget& t : targets) matmul(ctx, t.out, x, t.w);
    return;
  }
  MultiTargets mt{};
  mt.count = int(targets.size());
  int64_t blocks = 0;
  // One row over few columns in all takes the small-grid GEMV (gemv_multi_kernel's Deep).
  bool deep = false;
  auto lay_out = [&](int64_t plain_cols) {
    blocks = 0;
    for (int m = 0; m < mt.count; ++m) {
      mt.block_cols[m] = quant ? gemv_quant_block_cols(mt.dtype[m], T, K) : plain_cols;
      blocks += ceil_div(mt.n[m], mt.block_cols[m]);
      mt.block_end[m] = blocks;
    }
  };
  for (int m = 0; m < mt.count; ++m) {
    mt.w[m] = targets[size_t(m)].w.data;
    mt.out[m] = targets[size_t(m)].out.f32();
    mt.n[m] = targets[size_t(m)].w.rows;
    mt.dtype[m] = targets[size_t(m)].w.dtype;
    mt.row_bytes[m] = int64_t(targets[size_t(m)].w.row_bytes());
  }
  lay_out(kGemvWarps * kGemv1Cols);
  if (!quant && T == 1 && small_gemv_grid(blocks)) {
    deep = true;
    lay_out(kGemvWarps * kGemv1DeepCols);
  }
  KCHECK_MSG(blocks <= INT32_MAX, "matmul_multi: ", blocks, " blocks");
  if (quant) {
    launch_gemv_quant(ctx.stream, mt, blocks, x.f32(), T, K);
    return;
  }
  dispatch_weight(targets[0].w.dtype, "matmul", [&]<typename W>() {
    const dim3 grid{unsigned(blocks)}, block{unsigned(kGemvWarps * 32)};
    if (deep) {
      launch(gemv_multi_kernel<W, 1, true>, grid, block, 0, ctx.stream, mt, x.f32(), K);
    } else {
      with_rows(T, [&]<int R>() { launch(gemv_multi_kernel<W, R>, grid, block, 0, ctx.stream, mt, x.f32(), K); });
    }
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace kestrel::cuda
