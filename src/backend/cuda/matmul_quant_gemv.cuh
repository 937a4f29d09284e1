// The block-format GEMV (gemv_multi_quant_kernel) and its launches, shared by matmul_quant.cu
// and the eight files that compile its format sets (matmul_quant_gemv_*.cu, a set's two-term
// kernels in its _two file): the kernels of a set build in a file of their own, so that the sets
// compile in parallel (one file held 67 kernel instantiations and was the build's longest step,
// ~4 minutes on two cores). The kernels and their launch templates have internal linkage, so each
// file instantiates its own.
#pragma once

#include <cudaTypedefs.h>  // CUtensorMap

#include <algorithm>
#include <mutex>

#include "backend/cuda/context.h"
#include "backend/cuda/gemv.cuh"
#include "backend/cuda/q4k_int_gemv.cuh"
#include "backend/cuda/quant_gemv_q4k.cuh"
#include "backend/cuda/quant_gemv_q6k.cuh"

namespace kestrel::cuda {

// Defined in matmul_quant.cu (each holds process-wide state).
CUtensorMap block_tensor_map(DType dt, const void* w, int64_t N, int64_t row_bytes);
int64_t wide_groups();

// The launches of one format set each (FormatSet below), a file each: T rows in passes of up to
// 8, the T32 matrices' x split into three terms, or (the _two files, --matmul-precision bf16:
// int_gemv_terms) two; every (set, terms) pair compiles in a file of its own, in parallel.
// launch_gemv_quant calls the one its matrices and precision need.
void launch_gemv_quant_all(cudaStream_t stream, const MultiTargets& mt, int64_t blocks, const float* x, int64_t T,
                           int64_t K);
void launch_gemv_quant_all_two(cudaStream_t stream, const MultiTargets& mt, int64_t blocks, const float* x, int64_t T,
                               int64_t K);
void launch_gemv_quant_q4(cudaStream_t stream, const MultiTargets& mt, int64_t blocks, const float* x, int64_t T,
                          int64_t K);
void launch_gemv_quant_q4_two(cudaStream_t stream, const MultiTargets& mt, int64_t blocks, const float* x, int64_t T,
                              int64_t K);
void launch_gemv_quant_q46(cudaStream_t stream, const MultiTargets& mt, int64_t blocks, const float* x, int64_t T,
                           int64_t K);
void launch_gemv_quant_q46_two(cudaStream_t stream, const MultiTargets& mt, int64_t blocks, const float* x, int64_t T,
                               int64_t K);
void launch_gemv_quant_q8(cudaStream_t stream, const MultiTargets& mt, int64_t blocks, const float* x, int64_t T,
                          int64_t K);
void launch_gemv_quant_q8_two(cudaStream_t stream, const MultiTargets& mt, int64_t blocks, const float* x, int64_t T,
                              int64_t K);

// The integer-dot GEMV over 9 to kIntRowsMax rows of T32-layout matrices (matmul_quant_rows.cu):
// split_int_rows splits x [T, K] once into the kSlotMatmulX scratch, then launch_gemv_int_rows
// gives out [T, N] = x . w^T for each matrix w [N, K] that reads it, each row the bits it has alone.
constexpr int64_t kIntRowsMax = 32;
struct IntRowsSplit {
  const uint2* terms = nullptr;
  const float2* units = nullptr;
  int T = 0, nt = 0;  // the rows, and the kernel's n-tiles of 8
  int nx = 3;         // x's terms (int_gemv_terms)
};
IntRowsSplit split_int_rows(const Context& ctx, const float* x, int64_t T, int64_t K);
void launch_gemv_int_rows(const Context& ctx, const IntRowsSplit& sp, float* out, const void* w, DType dt, int64_t K,
                          int64_t N);

namespace {


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
inline bool is_unit_format(DType dt) {
  return dt == DType::kQ4_K || dt == DType::kQ6_K || dt == DType::kQ8_0 || dtype_is_t32_layout(dt);
}

// Dynamic shared memory of the block-format GEMV over R rows: the Q4_K GEMV's rings and scale
// tables when a matrix is Q4_K (99 KiB for one row, 224 KiB for 8), the Q6_K GEMV's (80 KiB,
// 202 KiB), the integer-dot GEMV's split activations and partial sums when one is in a T32
// layout (41 KiB for one row of K = 12288, 16 KiB for 8 rows), else R rows of the activation
// tile. The kernels are opted in to the largest once.
static_assert(kGemvWarps == q4k_gemv::kWarps && kGemvWarps == q6k_gemv::kWarps,
              "the copy-engine GEMVs' blocks are the GEMV's");
constexpr size_t kQuantGemvSmemMax = size_t(227) << 10;
inline size_t gemv_quant_smem(int R, bool q4k, bool q6k, bool t32, int64_t K, int warps) {
  size_t bytes = R > 1 ? size_t(R) * kGemvTileK * sizeof(float) : 16;
  if (q4k) bytes = std::max(bytes, q4k_gemv::smem_bytes(R));
  if (q6k) bytes = std::max(bytes, q6k_gemv::smem_bytes(R));
  if (t32) bytes = std::max(bytes, q4k_int::smem_bytes(R, K, warps));
  return bytes;
}
static_assert(kGemvWarps == q4k_int::kWarps, "the integer-dot GEMV's blocks are the GEMV's");

// The tensor maps of a launch's matrices that the copy-engine GEMVs read as tensors (Q4_K for
// one row, Q6_K for any), indexed like MultiTargets.
struct TmaMaps {
  CUtensorMap map[kMultiMax];
};

// The formats one instantiation holds. kQ4Units / kQ46Units / kQ8Units: every matrix is Q4_K,
// Q6_K or Q8_0 (a Q4_K_M or Q8_0 model's launches), with the integer-dot GEMVs of Q4_K_T32
// (kQ4Units), of Q4_K_T32 and Q6_K_T32 (kQ46Units: a Q4_K_M layer's launches that hold a Q6_K
// projection) or of Q8_0_T32, so that each holds only the GEMVs its launches need: each added to
// another's one-row kernel costs it registers (holding Q4_K_T32 and Q8_0_T32, the Q4_K_M's
// one-row kernel spilled 20 bytes instead of 16, and its decode measured 326.4 t/s on an H100
// against 333.6-336.2 on others; holding Q4_K_T32 and Q6_K_T32 it spills 12 bytes, loading 64
// instead of 36). For one row the kernel is capped at 128 registers (2 blocks per SM, as many as
// the Q4_K GEMV's 99 KiB allow; it takes 121 without spilling, the Q6_K GEMV's 80 KiB likewise.
// An older Q4_K kernel, capped at 80 for 3 blocks, spilled and measured slower); R > 1 is not
// capped (at 128 registers it spilled ~140 bytes and T = 8 ran at 60% of the speed; uncapped it
// needs up to 255, no spills). kAll, the general kernel, holds every format. A matrix's code, and
// so its bits, is the same in all.
enum class FormatSet { kAll, kQ4Units, kQ46Units, kQ8Units };
template <FormatSet kSet>
constexpr bool kHoldsQ4Int = kSet != FormatSet::kQ8Units;
template <FormatSet kSet>
constexpr bool kHoldsQ6Int = kSet == FormatSet::kAll || kSet == FormatSet::kQ46Units;
template <FormatSet kSet>
constexpr bool kHoldsQ8Int = kSet == FormatSet::kAll || kSet == FormatSet::kQ8Units;
// gemv_multi_quant_kernel's formats other than the T32 layouts (8-warp blocks): matrix m's block
// `block`.
template <int R, FormatSet kSet>
__device__ __forceinline__ void gemv_other_formats(const MultiTargets& t, const TmaMaps& maps,
                                                   const float* __restrict__ x, int64_t K, int m, int64_t block,
                                                   uint8_t* gemv_smem) {
  constexpr bool kUnitsOnly = kSet != FormatSet::kAll;
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
  if (dt == DType::kQ6_K)
    gemv_units_block<UQ6_K, R, kGemvWarps, kUnitCols<R>>(t.out[m], x, t.w[m], K, t.n[m], block, xs);
  else if (kUnitsOnly || dt == DType::kQ8_0)
    gemv_units_block<UQ8_0, R, kGemvWarps, kUnitCols<R>>(t.out[m], x, t.w[m], K, t.n[m], block, xs);
  else if constexpr (!kUnitsOnly) {
    switch (dt) {
      case DType::kQ5_0: gemv_quant_block<QQ5_0, R>(t, m, x, K, block, xs); break;
      case DType::kQ5_1: gemv_quant_block<QQ5_1, R>(t, m, x, K, block, xs); break;
      case DType::kQ5_K: gemv_quant_block<QQ5_K, R>(t, m, x, K, block, xs); break;
      default: gemv_quant_block<QMXFP4, R>(t, m, x, K, block, xs); break;
    }
  }
}

// P: the block's warps, kGemvWarps, or q4k_int::kWideSlices for a one-row launch whose every
// matrix is in a T32 layout with that many slices (K >= 4096, q4k_int::group_slices: a 4096-row
// matrix's 128 blocks are then 16 warps a multiprocessor instead of 8). That instantiation holds
// only the integer-dot GEMVs; capped at 128 registers like the 8-warp one.
// kTwoSlices: an 8-warp launch with a 16-slice T32 matrix (more than one row, or other formats
// beside it; each warp two slices of it, gemv_int_block). Without it, every T32 matrix of the
// launch has P slices.
// NX: the T32 matrices' terms of x (q4k_int_gemv.cuh).
template <int R, FormatSet kSet, int P, bool kTwoSlices, int NX>
__global__ void __launch_bounds__(P * 32, kSet != FormatSet::kAll && R == 1 && P == kGemvWarps ? 2 : 1)
    gemv_multi_quant_kernel(MultiTargets t, const __grid_constant__ TmaMaps maps, const float* __restrict__ x,
                            int64_t K, int64_t wide_groups) {
  static_assert(P == kGemvWarps || (R == 1 && kSet != FormatSet::kAll), "16 warps are the one-row T32 kernel's");
  int m = 0;  // from the kernel's parameters only: nothing a previous kernel writes
  while (m + 1 < t.count && int64_t(blockIdx.x) >= t.block_end[m]) ++m;
  const int64_t block = int64_t(blockIdx.x) - (m ? t.block_end[m - 1] : 0);
  // gemv_quant_smem(R, ..) bytes: the copy-engine GEMVs' rings, or the other formats' activation tile
  extern __shared__ __align__(16) uint8_t gemv_smem[];
  const DType dt = t.dtype[m];
  // (each loads its first weights before pdl_begin() itself)
  if constexpr (kHoldsQ4Int<kSet>) {
    if (dt == DType::kQ4_K_T32)
      return gemv_int_block<R, IntFormat::kQ4, P, kTwoSlices, NX>(t.out[m], x, t.w[m], K, t.n[m], block, gemv_smem,
                                                                  wide_groups);
  }
  if constexpr (kHoldsQ8Int<kSet>) {
    if (dt == DType::kQ8_0_T32)
      return gemv_int_block<R, IntFormat::kQ8, P, kTwoSlices, NX>(t.out[m], x, t.w[m], K, t.n[m], block, gemv_smem,
                                                                  wide_groups);
  }
  if constexpr (kHoldsQ6Int<kSet>) {
    if (dt == DType::kQ6_K_T32)
      return gemv_int_block<R, IntFormat::kQ6, P, kTwoSlices, NX>(t.out[m], x, t.w[m], K, t.n[m], block, gemv_smem,
                                                                  wide_groups);
  }
  if constexpr (P == kGemvWarps) gemv_other_formats<R, kSet>(t, maps, x, K, m, block, gemv_smem);
}

template <int R, FormatSet kSet, int P, bool kTwoSlices, int NX>
void launch_gemv_quant_kernel(cudaStream_t stream, const MultiTargets& mt, int64_t blocks, const float* x, int64_t K,
                              const TmaMaps& maps, size_t smem) {
  static std::once_flag opted_in;
  std::call_once(opted_in, [] {
    CUDA_CHECK(cudaFuncSetAttribute(gemv_multi_quant_kernel<R, kSet, P, kTwoSlices, NX>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, int(kQuantGemvSmemMax)));
  });
  launch(gemv_multi_quant_kernel<R, kSet, P, kTwoSlices, NX>, unsigned(blocks), P * 32, smem, stream, mt, maps, x, K,
         wide_groups());
  CUDA_CHECK_LAUNCH();
}

template <int R, FormatSet kSet, int NX>
void launch_gemv_quant_kernel(cudaStream_t stream, const MultiTargets& mt, int64_t blocks, const float* x, int64_t K) {
  bool q4k = false, q6k = false, t32 = false, all16 = true, any16 = false;
  TmaMaps maps{};
  for (int m = 0; m < mt.count; ++m) {
    const bool unit = dtype_is_t32_layout(mt.dtype[m]);
    const bool s16 =
        unit && q4k_int::group_slices(mt.n[m], K / q4k_int::kSuperElems, wide_groups()) == q4k_int::kWideSlices;
    all16 = all16 && s16;
    any16 = any16 || s16;
    if (unit) {
      t32 = true;
    } else if (mt.dtype[m] == DType::kQ4_K) {
      q4k = true;
      if (R == 1) maps.map[m] = block_tensor_map(mt.dtype[m], mt.w[m], mt.n[m], mt.row_bytes[m]);
    } else if (mt.dtype[m] == DType::kQ6_K && q6k_gemv::supported(K)) {
      q6k = true;
      maps.map[m] = block_tensor_map(mt.dtype[m], mt.w[m], mt.n[m], mt.row_bytes[m]);
    }
  }
  const bool wide = R == 1 && kSet != FormatSet::kAll && all16;
  const size_t smem = gemv_quant_smem(R, q4k, q6k, t32, K, wide ? q4k_int::kWideSlices : kGemvWarps);
  KCHECK_MSG(smem <= kQuantGemvSmemMax, "matmul: block-format GEMV needs ", smem, " bytes of shared memory for ", R,
             " rows, past the ", kQuantGemvSmemMax, " bytes the kernel is opted in to");
  if constexpr (R == 1 && kSet != FormatSet::kAll) {
    constexpr int kWide = q4k_int::kWideSlices;
    if (wide) return launch_gemv_quant_kernel<R, kSet, kWide, false, NX>(stream, mt, blocks, x, K, maps, smem);
  }
  if (any16) return launch_gemv_quant_kernel<R, kSet, kGemvWarps, true, NX>(stream, mt, blocks, x, K, maps, smem);
  launch_gemv_quant_kernel<R, kSet, kGemvWarps, false, NX>(stream, mt, blocks, x, K, maps, smem);
}

template <FormatSet kSet, int NX>
void launch_gemv_quant_rows(cudaStream_t stream, const MultiTargets& mt, int64_t blocks, const float* x, int64_t T,
                            int64_t K) {
  with_rows(T, [&]<int R>() { launch_gemv_quant_kernel<R, kSet, NX>(stream, mt, blocks, x, K); });
}

}  // namespace
}  // namespace kestrel::cuda
