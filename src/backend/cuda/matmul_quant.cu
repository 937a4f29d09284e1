// The block-format matmul: out[T, N] = x[T, K] . w[N, K]^T with w in a ggml block format (Q8_0,
// Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, MXFP4), activations and out F32.
//
// One GEMV kernel serves every format (gemv_multi_quant_kernel, matmul_quant_gemv.cuh, its format
// sets compiled in matmul_quant_gemv_*.cu): Q4_K and Q6_K their own
// (quant_gemv_q4k.cuh, quant_gemv_q6k.cuh: weights streamed by the copy engine; Q6_K when its
// rows are a multiple of 8 super-blocks), Q8_0 and other Q6_K the unit GEMV of quant_gemv.cuh,
// the others the plain GEMV's block code (gemv.cuh) with each 8 weights decoded in registers to
// ggml's dequantized values (quant_blocks.cuh), so a layer's mixed-format projections share one
// launch (matmul_multi). From 9 to 64 rows (kQuantMmaMaxRows; Q4_K from 25) the tensor-core
// kernel of moe_mma.cu decodes the weights in registers, and the T32 layouts take the integer-dot
// rows GEMV (matmul_quant_rows.cu) in passes of up to 32 rows; longer prefill steps dequantize the weight to BF16
// in tiles of at most 64 MiB a term (two terms, hi and lo, at the default 3-term precision) and
// run cuBLAS on them (matmul_quant).
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled: the driver's encoder, fetched through the runtime

#include <algorithm>
#include <cstdlib>
#include <string>

#include "backend/cuda/dequant_tiles.h"
#include "backend/cuda/matmul_quant_gemv.cuh"
#include "backend/cuda/moe_mma.h"

namespace kestrel::cuda {

// Output columns one block of the block-format GEMV takes for a matrix of format dt over R rows.
int64_t gemv_quant_block_cols(DType dt, int64_t R, int64_t K) {
  if (dt == DType::kQ4_K) return q4k_gemv::block_columns(K);
  if (dtype_is_t32_layout(dt)) return q4k_int::kGroup;
  if (dt == DType::kQ6_K && q6k_gemv::supported(K)) return q6k_gemv::block_columns(K);
  return kGemvWarps * (is_unit_format(dt) && R == 1 ? kUnitCols<1> : kGemv1Cols);
}

namespace {

// Rows [row0, row0 + rows) of a block-format matrix [N, K] as BF16 [rows, K]: hi = ggml's
// dequantized value rounded to BF16, lo (if asked for) = the rest rounded to BF16, so hi + lo is
// within 2^-16 of the value. The prefill path's weight tile. One instantiation a format and a
// 2D grid: x over a row's groups of 8 elements, a thread a group (a warp's 32 groups are one
// K-quant super-block or eight 32-element blocks, contiguous bytes), y over the rows (looping
// past 65535). It ran as one grid-stride kernel for every format, whose 64-bit division of the
// flat index per group and format switch cost more issue slots than the decoding.
__device__ __forceinline__ void store_bf16_terms(__nv_bfloat16* __restrict__ hi, __nv_bfloat16* __restrict__ lo,
                                                 int64_t at, const float (&f)[8]) {
  __nv_bfloat162 h[4], l[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    h[j] = __floats2bfloat162_rn(f[2 * j], f[2 * j + 1]);
    l[j] = __floats2bfloat162_rn(f[2 * j] - __low2float(h[j]), f[2 * j + 1] - __high2float(h[j]));
  }
  *reinterpret_cast<uint4*>(hi + at) = *reinterpret_cast<const uint4*>(h);
  if (lo) *reinterpret_cast<uint4*>(lo + at) = *reinterpret_cast<const uint4*>(l);
}

template <typename Q>
__global__ void dequantize_bf16_kernel(__nv_bfloat16* __restrict__ hi,  // [rows, K]
                                       __nv_bfloat16* __restrict__ lo,  // [rows, K] or null
                                       const uint8_t* __restrict__ w,   // [N, row_bytes]
                                       size_t row_bytes, int64_t row0, int64_t rows, int64_t K) {
  pdl_begin();
  const int64_t k = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * 8;
  if (k >= K) return;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    float f[8];
    Q::load8(w + size_t(row0 + r) * row_bytes, k, f);
    store_bf16_terms(hi, lo, r * K + k, f);
  }
}

// The same for a T32-layout matrix (kQ4_K_T32, kQ8_0_T32, kQ6_K_T32: format F) of N rows in all.
// A group's super-block tiles are contiguous (block_gemv_geometry.h), so a block takes one group
// of 32 rows and kDqSupers super-blocks: it copies their tiles into shared memory by coalesced
// 16-byte loads, each row's chunks together (a Q4_K or Q6_K row's super-block is then its
// row-major bytes, decoded through QQ4_K::load8 / QQ6_K::load8; a Q8_0 row's is its scales chunk
// and quant chunks, decoded as QQ8_0::load8 would: q d), then decodes them, a warp one row's
// super-block (a thread a group of 8, the stores contiguous). Reading each group of 8 at its
// chunk's place in global memory, as it did first, loaded a 16-byte header and a 16-byte chunk
// 512 bytes from the neighbouring thread's for every 8 weights.
constexpr int kDqSupers = 2;
// A row's super-block in the shared tile: its chunks (Q6_K: and d, 210 bytes, padded to 224 so
// that every row's chunks stay 16-byte aligned).
template <IntFormat F>
constexpr int kDqPitch = F == IntFormat::kQ6 ? 224 : kIntSuperBytes<F>;
// The block's work over a group of wg rows (kFull: wg is a whole group, the divisions by it
// constants; the last group of a matrix may be partial).
template <IntFormat F, bool kFull>
__device__ __forceinline__ void dequantize_t32_group(uint8_t (*tile)[q4k_int::kGroup][kDqPitch<F>],
                                                     __nv_bfloat16* __restrict__ hi, __nv_bfloat16* __restrict__ lo,
                                                     const uint4* __restrict__ src, int64_t g0, int64_t s0, int wg_rt,
                                                     int ns, int64_t row0, int64_t rows, int64_t K) {
  using namespace q4k_int;
  const int wg = kFull ? kGroup : wg_rt;
  if constexpr (F == IntFormat::kQ6) {
    // a super-block's tile: 13 wg chunks, then the wg d's in wg / 8 chunks
    const int per = kQ6Chunks * wg + wg / 8;
    for (int i = int(threadIdx.x); i < ns * per; i += int(blockDim.x)) {
      const int s = i / per, e = i % per;
      const uint4 v = __ldcs(src + i);
      if (e < kQ6Chunks * wg) {
        *reinterpret_cast<uint4*>(&tile[s][e % wg][16 * (e / wg)]) = v;
      } else {
        const int r0 = 8 * (e - kQ6Chunks * wg);
        const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int k = 0; k < 8; ++k)
          *reinterpret_cast<uint16_t*>(&tile[s][r0 + k][16 * kQ6Chunks]) =
              uint16_t((k & 1) ? words[k >> 1] >> 16 : words[k >> 1] & 0xFFFF);
      }
    }
  } else {
    constexpr int kC = kIntSuperBytes<F> / 16;
    for (int i = int(threadIdx.x); i < ns * kC * wg; i += int(blockDim.x)) {
      const int r = i % wg, j = i / wg % kC, s = i / (wg * kC);
      *reinterpret_cast<uint4*>(&tile[s][r][16 * j]) = __ldcs(src + i);
    }
  }
  __syncthreads();
  for (int i = int(threadIdx.x); i < ns * wg * 32; i += int(blockDim.x)) {
    const int grp = i % 32, r = i / 32 % wg, s = i / (32 * wg);
    const int64_t n = g0 + r;
    if (n < row0 || n >= row0 + rows) continue;
    float f[8];
    if constexpr (F == IntFormat::kQ8) {  // elements 8 grp ..: block grp / 4, its quant bytes 8 (grp % 4) ..
      const uint8_t* t = tile[s][r];
      const uint2 q = *reinterpret_cast<const uint2*>(t + 16 + 8 * grp);
      QQ8_0::decode8(q.x, q.y, f16_bits_to_f32(*reinterpret_cast<const uint16_t*>(t + 2 * (grp >> 2))), f);
    } else if constexpr (F == IntFormat::kQ6) {
      QQ6_K::load8(tile[s][r], 8 * grp, f);
    } else {
      QQ4_K::load8(tile[s][r], 8 * grp, f);
    }
    store_bf16_terms(hi, lo, (n - row0) * K + (s0 + s) * kSuperElems + 8 * grp, f);
  }
}

template <IntFormat F>
__global__ void __launch_bounds__(256) dequantize_bf16_t32_kernel(__nv_bfloat16* __restrict__ hi,
                                                                  __nv_bfloat16* __restrict__ lo,
                                                                  const uint8_t* __restrict__ w, int64_t row0,
                                                                  int64_t rows, int64_t K, int64_t N) {
  using namespace q4k_int;
  __shared__ __align__(16) uint8_t tile[kDqSupers][kGroup][kDqPitch<F>];
  pdl_begin();
  const int64_t S = K / kSuperElems, g0 = (row0 / kGroup + blockIdx.y) * kGroup, s0 = int64_t(blockIdx.x) * kDqSupers;
  const int wg = int(N - g0 < kGroup ? N - g0 : kGroup), ns = int(S - s0 < kDqSupers ? S - s0 : kDqSupers);
  // the tiles of super-blocks s0 .. s0 + ns - 1, from the first byte of super-block s0's tile
  const uint4* src = reinterpret_cast<const uint4*>(w + (g0 * S + s0 * wg) * kIntSuperBytes<F>);
  if (wg == kGroup) dequantize_t32_group<F, true>(tile, hi, lo, src, g0, s0, wg, ns, row0, rows, K);
  else dequantize_t32_group<F, false>(tile, hi, lo, src, g0, s0, wg, ns, row0, rows, K);
}

// Launches the dequantization of rows [row0, row0 + rows) of w: for the T32 layouts a block per (group
// of 32 rows, kDqSupers super-blocks); otherwise blocks of up to 256 threads (a row's groups of 8,
// rounded up to whole warps, when the row is shorter).
void launch_dequantize_bf16(cudaStream_t stream, __nv_bfloat16* hi, __nv_bfloat16* lo, const Tensor& w, int64_t row0,
                            int64_t rows, int64_t K) {
  const auto* data = static_cast<const uint8_t*>(w.data);
  if (dtype_is_t32_layout(w.dtype)) {
    const int64_t groups = (row0 + rows - 1) / q4k_int::kGroup - row0 / q4k_int::kGroup + 1;
    KCHECK_MSG(groups <= 65535, "matmul: ", rows, " rows of a ", dtype_name(w.dtype),
               " matrix in one dequantized tile");
    const dim3 grid(unsigned(ceil_div(K / q4k_int::kSuperElems, kDqSupers)), unsigned(groups));
    if (w.dtype == DType::kQ8_0_T32)
      launch(dequantize_bf16_t32_kernel<IntFormat::kQ8>, grid, 256, 0, stream, hi, lo, data, row0, rows, K, w.rows);
    else if (w.dtype == DType::kQ6_K_T32)
      launch(dequantize_bf16_t32_kernel<IntFormat::kQ6>, grid, 256, 0, stream, hi, lo, data, row0, rows, K, w.rows);
    else
      launch(dequantize_bf16_t32_kernel<IntFormat::kQ4>, grid, 256, 0, stream, hi, lo, data, row0, rows, K, w.rows);
  } else {
    const int64_t groups = K / 8;
    const int threads = int(std::min<int64_t>(256, ceil_div(groups, 32) * 32));
    const dim3 grid(unsigned(ceil_div(groups, threads)), unsigned(std::min<int64_t>(rows, 65535)));
    dispatch_quant(w.dtype, "matmul", [&]<typename Q>() {
      launch(dequantize_bf16_kernel<Q>, grid, threads, 0, stream, hi, lo, data, w.row_bytes(), row0, rows, K);
    });
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace

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

// The most groups a 16-slice T32 matrix has (q4k_int::group_slices): q4k_int::kWideGroups (no
// bound), or KESTREL_CUDA_GEMV_WIDE's count, to compare in one build (0: 8 slices always; 128: the
// matrices of at most 4096 rows only, the fortieth session's rule).
int64_t wide_groups() {
  static const int64_t groups = [] {
    const char* v = std::getenv("KESTREL_CUDA_GEMV_WIDE");
    if (!v || !*v) return q4k_int::kWideGroups;
    char* end = nullptr;
    const long long n = std::strtoll(v, &end, 10);
    KCHECK_MSG(*end == '\0' && n >= 0, "KESTREL_CUDA_GEMV_WIDE: expected a count of 32-row groups (0 or more), got '",
               v, "'");
    return int64_t(n);
  }();
  return groups;
}


void launch_gemv_quant(cudaStream_t stream, const MultiTargets& mt, int64_t blocks, const float* x, int64_t T,
                       int64_t K, int terms) {
  bool units = true, q4_t32 = false, q6_t32 = false, q8_t32 = false;
  for (int m = 0; m < mt.count; ++m) {
    units = units && is_unit_format(mt.dtype[m]);
    q4_t32 = q4_t32 || mt.dtype[m] == DType::kQ4_K_T32;
    q6_t32 = q6_t32 || mt.dtype[m] == DType::kQ6_K_T32;
    q8_t32 = q8_t32 || mt.dtype[m] == DType::kQ8_0_T32;
  }
  const bool two = terms == 2 && (q4_t32 || q6_t32 || q8_t32);  // (without a T32 matrix the same kernel either way)
  if (!units || (q8_t32 && (q4_t32 || q6_t32)))
    (two ? launch_gemv_quant_all_two : launch_gemv_quant_all)(stream, mt, blocks, x, T, K);
  else if (q8_t32) (two ? launch_gemv_quant_q8_two : launch_gemv_quant_q8)(stream, mt, blocks, x, T, K);
  else if (q6_t32) (two ? launch_gemv_quant_q46_two : launch_gemv_quant_q46)(stream, mt, blocks, x, T, K);
  else (two ? launch_gemv_quant_q4_two : launch_gemv_quant_q4)(stream, mt, blocks, x, T, K);
}

// The most rows a block-format matmul runs on the tensor-core kernel (moe_mma.cu) rather than on
// dequantized tiles and cuBLAS: kQuantMmaMaxRows, or KESTREL_CUDA_QUANT_MMA_ROWS from the
// environment (0: never). On an H100 (2026-12-05, QuantGpuTest.BenchQuantGemv's qmatmul_rows_*
// lines, bench/results/kernels-moe-mma-fewrows-262fa31-h100-2026-12-05.txt) the kernel beats the
// dequantized tiles at every row count to 64 for Q4_K, Q6_K, Q8_0 and MXFP4 at 12288x4096 and
// 4096x12288 (Q4_K 12288x4096: 97 us at 9 rows, 173 at 64, against 213-218), MXFP4 12288x4096 at 64
// rows aside (221 against 219); at 128 rows the tiles win (228 against 331).
constexpr int64_t kQuantMmaMaxRows = 64;
static int64_t quant_mma_max_rows() {
  static const int64_t rows = [] {
    const char* v = std::getenv("KESTREL_CUDA_QUANT_MMA_ROWS");
    return v && *v ? std::max<int64_t>(0, std::atoll(v)) : kQuantMmaMaxRows;
  }();
  return rows;
}

// The most rows a block-format matmul runs as 8-row GEMV passes before the tensor-core kernel.
// Q4_K's copy-engine GEMV reads a matrix for 8 rows at ~1 TB/s (29 us for 12288x4096 on the H100
// above), so three passes (88 us for 24 rows) still beat the kernel (93-100 us from 9 to 32 rows);
// the other formats' 8-row GEMVs run at 270-600 GB/s, and two passes lose already (Q6_K: 157 us
// against 123 at 16 rows; Q8_0: 286 against 106).
// The T32 layouts (s8 mmas; the tensor-core kernel does not take them) up to kQuantMmaMaxRows in
// passes of up to 32 rows of the integer-dot rows GEMV (matmul_quant_rows.cu), each reading the
// matrix once, then dequantized tiles.
static int64_t gemv_pass_max_rows(DType dt) {
  return dtype_is_t32_layout(dt) ? kQuantMmaMaxRows : dt == DType::kQ4_K ? 3 * kGemvMaxRows : kGemvMaxRows;
}

// The most rows of a T32 matrix one pass of the GEMV takes: kIntRowsMax, or KESTREL_CUDA_INT_ROWS
// from the environment (8, 16 or 32; 8: the 8-row kernel alone, as before the rows GEMV), to
// compare in one build.
static int64_t int_rows_pass() {
  static const int64_t rows = [] {
    const char* v = std::getenv("KESTREL_CUDA_INT_ROWS");
    if (!v || !*v) return kIntRowsMax;
    const std::string s = v;
    KCHECK_MSG(s == "8" || s == "16" || s == "32", "KESTREL_CUDA_INT_ROWS: expected 8, 16 or 32, got '", s, "'");
    return int64_t(std::stoi(s));
  }();
  return rows;
}

// x [T, K] by T32 matrices that share it (matmul's one, or the targets of a matmul_multi that
// are all T32): passes of up to int_rows_pass() rows. A pass of more than 8 rows splits its rows
// once for all the matrices and runs the rows GEMV on each; one of at most 8, the GEMV kernel
// (one launch for all, so at most kMultiMax targets).
static void matmul_t32_passes(const Context& ctx, const Tensor& x, std::span<const MatmulTarget> targets) {
  const int64_t T = x.rows, K = x.cols, pass = int_rows_pass();
  KCHECK(!targets.empty() && targets.size() <= size_t(kMultiMax));
  for (int64_t r0 = 0; r0 < T; r0 += pass) {
    const int64_t rows = std::min(pass, T - r0);
    const float* xr = x.f32() + r0 * K;
    if (rows > kGemvMaxRows) {
      const IntRowsSplit sp = split_int_rows(ctx, xr, rows, K);
      for (const MatmulTarget& t : targets)
        launch_gemv_int_rows(ctx, sp, t.out.f32() + r0 * t.w.rows, t.w.data, t.w.dtype, K, t.w.rows);
      continue;
    }
    MultiTargets mt = multi_targets(targets, r0);
    const int64_t blocks = lay_out_blocks(mt, [&](int m) { return gemv_quant_block_cols(mt.dtype[m], rows, K); });
    launch_gemv_quant(ctx.stream, mt, blocks, xr, rows, K, int_gemv_terms(ctx));
  }
}

bool matmul_multi_t32(const Context& ctx, const Tensor& x, std::span<const MatmulTarget> targets) {
  const int64_t T = x.rows, K = x.cols;
  bool fits = T > kGemvMaxRows && (T <= kQuantMmaMaxRows || matmul_gemv_only(ctx)) && K > 0 &&
              K % q4k_int::kSuperElems == 0 && multi_targets_shaped(x, targets);
  for (const MatmulTarget& t : targets) fits = fits && dtype_is_t32_layout(t.w.dtype);
  if (fits) matmul_t32_passes(ctx, x, targets);
  return fits;
}

// Block-format weights, any T: the GEMV kernel in groups of up to 8 rows (decode, up to
// gemv_pass_max_rows; deterministic mode and kExact at any T; a T32 matrix's rows past 8 in
// passes of up to 32 through the rows GEMV), the tensor-core kernel up to
// quant_mma_max_rows() rows, or (prefill) the weight
// dequantized to BF16 a tile of rows at a time and cuBLAS as in matmul.cu's launch_cublas_bf16
// per-term path, each tile writing its column range of out.
void matmul_quant(const Context& ctx, const Tensor& out, const Tensor& x, const Tensor& w, bool gemv_only) {
  const int64_t T = x.rows, K = x.cols, N = w.rows;
  KCHECK_MSG(aligned16(x.data) && aligned16(w.data), "matmul: ", dtype_name(w.dtype),
             " weights need 16-byte aligned x and weight rows");
  if (T <= gemv_pass_max_rows(w.dtype) || gemv_only) {
    const MatmulTarget target{.out = out, .w = w};
    if (dtype_is_t32_layout(w.dtype)) {  // in passes of up to int_rows_pass() rows, each reading w once
      matmul_t32_passes(ctx, x, {&target, 1});
      return;
    }
    for (int64_t r0 = 0; r0 < T; r0 += kGemvMaxRows) {
      const int64_t rows = std::min<int64_t>(kGemvMaxRows, T - r0);
      MultiTargets mt = multi_targets({&target, 1}, r0);
      const int64_t blocks = lay_out_blocks(mt, [&](int) { return gemv_quant_block_cols(w.dtype, rows, K); });
      launch_gemv_quant(ctx.stream, mt, blocks, x.f32() + r0 * K, rows, K, int_gemv_terms(ctx));
    }
    return;
  }
  // A few rows (a batch of decode steps, a short chunk): the tensor-core kernel that decodes the
  // weights in registers, reading them once per 32 rows, instead of dequantizing the whole matrix.
  if (T <= quant_mma_max_rows() && moe_mma_supported(w.dtype, K)) {
    launch_block_matmul_mma(ctx, out.f32(), x.f32(), w.data, w.dtype, T, K, N);
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
  launch_split_bf16(ctx.stream, terms, x.f32(), T * K, x_terms);
  // (any row count: a T32 group cut by a tile's edge is copied by both launches, each decoding its
  // rows, so the tiles and their GEMMs are the row-major matrix's, and so are the bits)
  const int64_t tile_rows = dequant_tiles::tile_rows(N, K, dequant_tiles::kTermBytes);
  const size_t tile_elems = size_t(tile_rows * K);
  auto* hi = static_cast<__nv_bfloat16*>(ctx.scratch->get(kSlotMatmulPartial, tile_elems * 2 * (split_w ? 2 : 1)));
  __nv_bfloat16* lo = split_w ? hi + tile_elems : nullptr;
  const float one = 1.0f, zero = 0.0f;
  for (int64_t n0 = 0; n0 < N; n0 += tile_rows) {
    const int64_t rows = std::min(tile_rows, N - n0);
    launch_dequantize_bf16(ctx.stream, hi, lo, w, n0, rows, K);
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

}  // namespace kestrel::cuda
