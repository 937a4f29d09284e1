// The integer-dot GEMV over 9 to 32 rows of one T32-layout matrix (kQ4_K_T32, kQ8_0_T32,
// kQ6_K_T32) in one pass: the 8-row kernel (gemv_int_block) read the weights once for every 8
// rows, so a batch of 64 decode steps read each matrix 8 times, and every block split all of its
// rows' activations again. Here the activations are split once (split_rows_kernel, into the
// kSlotMatmulX scratch) and a block's warps walk their slices of a group's super-blocks once for
// NT n-tiles of 8 rows (int_rows_walk), loading the split terms of each n-tile as they go.
// The split and the arithmetic are the 8-row kernel's, term for term, so a row has the same bits
// here as in 8-row passes, and alone (QuantGpuTest.MatmulQ4KT32 and the others).
// NT is 2 or 4: with 8 (64 rows a pass) the kernels spilled 92-140 bytes, and the 9B Q4_K_M's
// batch 64 decoded 2677.81 t/s on an H100 against 2726.76 in two passes of 32 (one build;
// 1467.53 in 8-row passes; bench/results/head-and-rows-gemv-ab-h100-2026-12-07.txt).
#include "backend/cuda/matmul_quant_gemv.cuh"

namespace kestrel::cuda {
namespace {

using q4k_int::kGroup;
using q4k_int::kSuperElems;

// Row stride of the split activations: 8 NT rows, the rows past T zeros.
// terms: [unit e (32 values)][row][lane c of a B fragment][NX terms] uint2 (the words of the
// lane's values 4c .. 4c + 3 and 16 + 4c .. 16 + 4c + 3 of term t: xw[t] of split8);
// units: [unit e][row] float2 (split8's unit and sum).
template <int NX>
__global__ void __launch_bounds__(256) split_rows_kernel(uint2* __restrict__ terms, float2* __restrict__ units,
                                                         const float* __restrict__ x, int64_t T, int64_t rows,
                                                         int64_t K) {
  pdl_begin();
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31, g = lane >> 2, c = lane & 3;
  const int64_t n_units = K / 32, e0 = (int64_t(blockIdx.x) * 8 + warp) * 8, e = e0 + g, row = blockIdx.y;
  if (e0 >= n_units) return;  // the whole warp
  uint32_t w[3][2] = {};
  float unit = 0.0f, sum = 0.0f;
  if (row < T) {  // the whole block; every lane takes part in split8's shuffles
    const float* v = x + row * K + (e < n_units ? e : n_units - 1) * 32 + 4 * c;
    q4k_int_detail::split8<NX>(*reinterpret_cast<const float4*>(v), *reinterpret_cast<const float4*>(v + 16), w, unit,
                           sum);
  }
  if (e < n_units) {
    uint2* tw = terms + ((e * rows + row) * 4 + c) * NX;
#pragma unroll
    for (int t = 0; t < NX; ++t) tw[t] = make_uint2(w[t][0], w[t][1]);
    if (c == 0) units[e * rows + row] = make_float2(unit, sum);
  }
}

// One block per group of 32 columns, q4k_int::kWarps warps, each its one or two slices (as
// gemv_int_block's 8-warp blocks); out [T, N] (row stride N). smem: V x 32 x T floats.
template <IntFormat F, int NT, int NX>
__global__ void __launch_bounds__(q4k_int::kWarps * 32, 1)
    gemv_int_rows_kernel(float* __restrict__ out, const void* __restrict__ w, const uint2* __restrict__ terms,
                         const float2* __restrict__ units, int T, int64_t K, int64_t N, int64_t wide_groups) {
  constexpr int P = q4k_int::kWarps, kRows = 8 * NT;
  const int64_t S = K / kSuperElems, g0 = int64_t(blockIdx.x) * kGroup;
  const int V = q4k_int::group_slices(N, S, wide_groups), per = V / P;
  const int wg = int(N - g0 < kGroup ? N - g0 : kGroup);
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31, g = lane >> 2, c = lane & 3;
  const int v0 = warp * per;
  const int first = q4k_int::slice_first(S, v0, V), n = q4k_int::slice_first(S, v0 + per, V) - first;
  const int mid = q4k_int::slice_first(S, v0 + 1, V) - first;
  const int64_t cstride = int64_t(wg) * 16, sstride = kIntSuperBytes<F> * int64_t(wg);
  const uint8_t* gbase = static_cast<const uint8_t*>(w) + g0 * S * kIntSuperBytes<F> + first * sstride;
  extern __shared__ float partial[];  // [slice][col][row]
  pdl_begin();
  const int64_t e0 = int64_t(first) * 8;  // the walk's first 32-value unit
  const uint2* tb = terms + ((e0 * kRows + g) * 4 + c) * NX;
  const float2* ub = units + e0 * kRows + 2 * c;
  auto act = [&](int nt, int e, uint32_t(&xw)[3][2], float(&u)[2], float(&sm)[2]) {
    const uint2* tw = tb + (int64_t(e) * kRows + 8 * nt) * 4 * NX;
#pragma unroll
    for (int t = 0; t < NX; ++t) {
      const uint2 v = tw[t];
      xw[t][0] = v.x;
      xw[t][1] = v.y;
    }
    // the units and sums of rows 8 nt + 2c and 8 nt + 2c + 1, the lane's D rows
    const float4 us = *reinterpret_cast<const float4*>(ub + int64_t(e) * kRows + 8 * nt);
    u[0] = us.x;
    sm[0] = us.y;
    u[1] = us.z;
    sm[1] = us.w;
  };
  float y[NT][2][4] = {};
  auto flush = [&](int v) { q4k_int_detail::flush_rows(y, partial, v, T, T, g, c); };
  q4k_int_detail::int_rows_walk<F, NT, true, NX>(gbase, cstride, sstride, wg, n, mid, g, c, act, [&] { flush(v0); }, y);
  if (per == 2 && mid == n) flush(v0);  // an empty second slice sums to 0
  flush(v0 + per - 1);
  __syncthreads();
  for (int i = int(threadIdx.x); i < kGroup * T; i += 32 * P) {
    const int col = i / T, row = i % T;
    if (col >= wg) continue;
    float s = partial[col * T + row];
    for (int q = 1; q < V; ++q) s = __fadd_rn(s, partial[(q * kGroup + col) * T + row]);  // in order
    out[int64_t(row) * N + g0 + col] = s;
  }
}

template <IntFormat F, int NT, int NX>
void launch_rows(cudaStream_t stream, float* out, const void* w, const uint2* terms, const float2* units, int T,
                 int64_t K, int64_t N) {
  constexpr size_t kSmemMax = size_t(q4k_int::kWideSlices) * kGroup * 8 * NT * 4;
  static std::once_flag opted_in;
  std::call_once(opted_in, [] {
    CUDA_CHECK(
        cudaFuncSetAttribute(gemv_int_rows_kernel<F, NT, NX>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             int(kSmemMax)));
  });
  const int V = q4k_int::group_slices(N, K / kSuperElems, wide_groups());
  const size_t smem = size_t(V) * kGroup * size_t(T) * 4;
  launch(gemv_int_rows_kernel<F, NT, NX>, unsigned(ceil_div(N, kGroup)), q4k_int::kWarps * 32, smem, stream, out, w,
         terms, units, T, K, N, wide_groups());
  CUDA_CHECK_LAUNCH();
}

template <IntFormat F>
void launch_rows_format(cudaStream_t stream, float* out, const void* w, const uint2* terms, const float2* units, int T,
                        int64_t K, int64_t N, int nt, int nx) {
  auto go = [&]<int NX>() {
    if (nt == 2) launch_rows<F, 2, NX>(stream, out, w, terms, units, T, K, N);
    else launch_rows<F, 4, NX>(stream, out, w, terms, units, T, K, N);
  };
  if (nx == 2) go.template operator()<2>();
  else go.template operator()<3>();
}

}  // namespace

IntRowsSplit split_int_rows(const Context& ctx, const float* x, int64_t T, int64_t K) {
  KCHECK_MSG(T > kGemvMaxRows && T <= kIntRowsMax && K % kSuperElems == 0,
             "matmul: the integer-dot rows GEMV takes 9 to ", kIntRowsMax, " rows of a multiple of ", kSuperElems,
             " values, got ", T, " rows of ", K);
  IntRowsSplit sp;
  sp.T = int(T);
  sp.nt = T <= 16 ? 2 : 4;  // n-tiles of 8 rows
  sp.nx = int_gemv_terms(ctx);
  const int64_t rows = 8 * sp.nt, n_units = K / 32;
  const size_t term_bytes = size_t(n_units * rows) * 4 * sp.nx * sizeof(uint2);
  const size_t bytes = term_bytes + size_t(n_units * rows) * sizeof(float2);
  auto* terms = static_cast<uint2*>(ctx.scratch->get(kSlotMatmulX, bytes));
  auto* units = reinterpret_cast<float2*>(reinterpret_cast<uint8_t*>(terms) + term_bytes);
  const dim3 grid(unsigned(ceil_div(n_units, int64_t(64))), unsigned(rows));
  launch(sp.nx == 2 ? split_rows_kernel<2> : split_rows_kernel<3>, grid, 256, 0, ctx.stream, terms, units, x, T, rows,
         K);
  CUDA_CHECK_LAUNCH();
  sp.terms = terms;
  sp.units = units;
  return sp;
}

void launch_gemv_int_rows(const Context& ctx, const IntRowsSplit& sp, float* out, const void* w, DType dt, int64_t K,
                          int64_t N) {
  KCHECK_MSG(dtype_is_t32_layout(dt), "matmul: the integer-dot rows GEMV takes a T32 matrix, got ", dtype_name(dt));
  auto go = [&]<IntFormat F>() {
    launch_rows_format<F>(ctx.stream, out, w, sp.terms, sp.units, sp.T, K, N, sp.nt, sp.nx);
  };
  switch (dt) {
    case DType::kQ4_K_T32: go.template operator()<IntFormat::kQ4>(); break;
    case DType::kQ8_0_T32: go.template operator()<IntFormat::kQ8>(); break;
    default: go.template operator()<IntFormat::kQ6>(); break;
  }
}

}  // namespace kestrel::cuda
