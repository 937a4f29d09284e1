// The GEMV building blocks matmul.cu's kernels and matmul_quant.cu's block-format kernel share:
// the pass geometry (rows per pass, warps and columns per block), the L2 prefetch before
// pdl_begin, where activations come from (PlainX, ActMulX), the block code of the one-row and
// R-row GEMVs (gemv1_block, gemv_rows_block), matmul_multi's targets, and the host functions
// each file offers the other. Every caller runs the same block code, which is what keeps a row's
// bits the same alone, batched, or in a multi-matrix launch.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>
#include <utility>

#include "backend/cuda/context.h"
#include "backend/cuda/quant_blocks.cuh"

namespace kestrel::cuda {

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

// Where a one-row GEMV block has issued its first weight loads and not yet its activations'.
// NoWait: the kernel ran pdl_begin() before the block. PdlWait: the kernel leaves pdl_begin() to
// the block, which issues its first U steps' weights before it (a plain dtype's; block formats
// wait first). A step's kernels never write weights, so they may be read while the kernel
// before still runs: the first loads' DRAM latency leaves the chain of dependent launches, where
// the L2 prefetch before the wait (prefetch_rows) still left an L2 round trip. Every thread
// calls the wait once, before its first activation load and before any store or early exit.
struct NoWait {
  __device__ __forceinline__ void operator()() const {}
};
struct PdlWait {
  __device__ __forceinline__ void operator()() const { pdl_begin(); }
};

// The k loop of gemv1_block: each lane's partial sums of the C weight rows wr[c] against x. U:
// steps of the loop a lane has in flight (U > 2: U * C weight loads issued before the sums that
// use them); the sums are the same for any U and C, and with either wait (each row's in k order).
template <typename W, typename XS, int U, int C, typename Wait = NoWait>
__device__ __forceinline__ void gemv1_sums(float (&acc)[C], const XS x, const typename WeightRows<W>::Row (&wr)[C],
                                           int64_t K, Wait wait = {}) {
  using Rows = WeightRows<W>;
  const int lane = threadIdx.x & 31;
  int64_t first = int64_t(lane) * 8;  // this lane's first k of the loops below
  if constexpr (!std::is_same_v<Wait, NoWait>) {
    if constexpr (std::is_same_v<typename Rows::Row, const W*>) {  // plain: the first U steps' weights first
      Raw8<W> raw[U][C];
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (first + 256 * u < K)
#pragma unroll
          for (int c = 0; c < C; ++c) raw[u][c] = Raw8<W>::load(wr[c] + first + 256 * u);
      wait();
      float4 a[U], b[U];
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (first + 256 * u < K) {
          a[u] = x.load4(first + 256 * u);
          b[u] = x.load4(first + 256 * u + 4);
        }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (first + 256 * u >= K) break;
#pragma unroll
        for (int c = 0; c < C; ++c) {
          float wf[8];
          raw[u][c].floats(wf);
          acc[c] += dot8(a[u], b[u], wf);
        }
      }
      first += 256 * U;
    } else {
      wait();
    }
  }
  if constexpr (U > 2) {  // U steps' loads issued before their sums: the same sums in the same order
    for (int64_t k0 = first; k0 < K; k0 += 256 * U) {
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
    for (int64_t k = first; k < K; k += 256) {
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
}

// The work of block `block` of gemv1_kernel (a device function so matmul_multi's kernel runs
// exactly the same code for each of its matrices): C columns a warp (kGemv1Cols, or fewer), U
// steps in flight (gemv1_sums), the kernel's wait where Wait says (gemv1_sums).
template <typename W, typename XS = PlainX, int U = 2, int C = kGemv1Cols, typename Wait = NoWait>
__device__ __forceinline__ void gemv1_block(float* __restrict__ out, const XS x, const void* __restrict__ w, int64_t K,
                                            int64_t N, int64_t block, Wait wait = {}) {
  using Rows = WeightRows<W>;
  const int lane = threadIdx.x & 31;
  const int64_t n0 = (block * kGemvWarps + (threadIdx.x >> 5)) * C;
  if (n0 >= N) {
    wait();
    return;
  }
  typename Rows::Row wr[C];
#pragma unroll
  for (int c = 0; c < C; ++c) wr[c] = Rows::row(w, n0 + c < N ? n0 + c : N - 1, K);  // tail: read, drop
  float acc[C] = {};
  gemv1_sums<W, XS, U, C>(acc, x, wr, K, wait);
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const float sum = warp_sum(acc[c]);
    if (lane == 0 && n0 + c < N) out[n0 + c] = sum;
  }
}

// One row of a gated MLP's gate and up projections with the activation product in the epilogue:
// a warp sums rows j0, j0 + 1 of gate and of up (kGemv1Cols = 4 rows, each in gemv1_block's
// order, so g and u have matmul's bits) and writes a[j] = act(g_j) * u_j (ActMulX's expression,
// the one silu_mul / gelu_tanh_mul store). grid: ceil(F / (kGemvWarps * 2)).
template <typename W, Activation A, typename Wait = NoWait>
__device__ __forceinline__ void gemv1_act_pair_block(float* __restrict__ a, const float* __restrict__ x,
                                                     const void* __restrict__ gate, const void* __restrict__ up,
                                                     int64_t K, int64_t F, int64_t block, Wait wait = {}) {
  static_assert(kGemv1Cols == 4, "a warp takes two gate rows and the two up rows beside them");
  using Rows = WeightRows<W>;
  const int lane = threadIdx.x & 31;
  const int64_t j0 = (block * kGemvWarps + (threadIdx.x >> 5)) * 2;
  if (j0 >= F) {
    wait();
    return;
  }
  typename Rows::Row wr[4];
#pragma unroll
  for (int c = 0; c < 2; ++c) {
    const int64_t j = j0 + c < F ? j0 + c : F - 1;  // tail: read, drop
    wr[c] = Rows::row(gate, j, K);
    wr[2 + c] = Rows::row(up, j, K);
  }
  float acc[4] = {};
  gemv1_sums<W, PlainX, 2, 4>(acc, PlainX{x}, wr, K, wait);
  float sum[4];
#pragma unroll
  for (int c = 0; c < 4; ++c) sum[c] = warp_sum(acc[c]);
  if (lane == 0) {
#pragma unroll
    for (int c = 0; c < 2; ++c)
      if (j0 + c < F) a[j0 + c] = ActMulX<A>::act_mul(sum[c], sum[2 + c]);
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
// Whether a one-row GEMV launch of `blocks` blocks (at kGemv1Cols columns a warp) is such a grid:
// at most a block a multiprocessor (gemv_deep_max_blocks).
inline bool small_gemv_grid(int64_t blocks) { return blocks <= gemv_deep_max_blocks(); }

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

// matmul.cu: mt's matrices for targets (at most kMultiMax), their outputs from row r0 on; and
// their blocks laid out, cols(m) output columns a block of matrix m, returning the blocks in all.
MultiTargets multi_targets(std::span<const MatmulTarget> targets, int64_t r0);
template <typename Cols>
int64_t lay_out_blocks(MultiTargets& mt, Cols&& cols) {
  int64_t blocks = 0;
  for (int m = 0; m < mt.count; ++m) {
    mt.block_cols[m] = cols(m);
    blocks += (mt.n[m] + mt.block_cols[m] - 1) / mt.block_cols[m];
    mt.block_end[m] = blocks;
  }
  return blocks;
}
// matmul.cu: the checks every one-launch matmul_multi shares: 1 to kMultiMax targets; x F32, on
// the device, 16-byte aligned; each weight [N > 0, x.cols] aligned on the device; each out [T, N]
// F32 on the device.
bool multi_targets_shaped(const Tensor& x, std::span<const MatmulTarget> targets);

// Whether a matmul keeps to the GEMV kernels at any T: cuBLAS and the tensor-core kernels pick
// their tiling by shape, so a row's bits there depend on T, which the exact and deterministic
// modes do not allow.
inline bool matmul_gemv_only(const Context& ctx) {
  return ctx.matmul_precision == MatmulPrecision::kExact || ctx.deterministic;
}
// The terms the integer-dot GEMVs split x into (q4k_int_gemv.cuh): 2 at --matmul-precision bf16
// (|x - x^| <= 2^-13 of a 32-value block's largest magnitude, under the BF16 products' 2^-9), 3
// otherwise (2^-20).
inline int int_gemv_terms(const Context& ctx) { return ctx.matmul_precision == MatmulPrecision::kBf16 ? 2 : 3; }

// matmul.cu: terms[j][i] = bf16(x[i] - sum of the earlier terms), j < n_terms; terms [n_terms, n],
// the activations' BF16 split for the cuBLAS paths (split_bf16_kernel).
void launch_split_bf16(cudaStream_t stream, __nv_bfloat16* terms, const float* x, int64_t n, int n_terms);
// matmul.cu: out[i] = p[0][i] + p[1][i] + ... (in that order), p [n_terms, n]: per-term or
// per-range partial products summed.
void launch_sum_terms(cudaStream_t stream, float* out, const float* p, int64_t n, int n_terms);

// matmul_quant.cu: the block-format GEMV over mt's matrices (each its own format) in `blocks`
// blocks, T <= kGemvMaxRows rows of x [T, K]; the output columns one of its blocks takes for a
// matrix of format dt (matmul_multi lays out its targets with it); and matmul of a block-format
// weight, any T (the GEMV in groups of 8 rows, or for prefill the weight dequantized to BF16 in
// tiles and cuBLAS; gemv_only: the GEMV at any T, as the exact and deterministic modes ask).
// terms: the T32 matrices' terms of x, int_gemv_terms.
void launch_gemv_quant(cudaStream_t stream, const MultiTargets& mt, int64_t blocks, const float* x, int64_t T,
                       int64_t K, int terms);
int64_t gemv_quant_block_cols(DType dt, int64_t R, int64_t K);
void matmul_quant(const Context& ctx, const Tensor& out, const Tensor& x, const Tensor& w, bool gemv_only);
// matmul_multi over T32 matrices only, more than 8 rows (up to 64; any T in the exact and
// deterministic modes): the rows GEMV with x split once for all of them, each output the bits of
// its own matmul; false, and nothing done, for other targets or rows.
bool matmul_multi_t32(const Context& ctx, const Tensor& x, std::span<const MatmulTarget> targets);

}  // namespace kestrel::cuda
