// matmul: out[T, N] = x[T, K] . w[N, K]^T, activations F32, weights BF16/F16/F32 or a ggml
// block format (Q8_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, MXFP4), F32 out. Block formats take
// matmul_quant (matmul_quant.cu); the GEMV block code both files run is gemv.cuh's.
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
#include <utility>

#include "backend/cuda/gemv.cuh"
#include "backend/cuda/moe_route.cuh"

namespace kestrel::cuda {
namespace {

// One row (gemv1_block); grid: ceil(N / (kGemvWarps * C)).
template <typename W, typename XS, int U, int C>
__global__ void gemv1_kernel(float* __restrict__ out,  // [1, N]
                             const XS x,               // [1, K]
                             const W* __restrict__ w,  // [N, K]
                             int64_t K, int64_t N, int64_t prefetch_row_max) {
  prefetch_rows(w, K * int64_t(sizeof(W)), int64_t(blockIdx.x) * kGemvWarps * C, kGemvWarps * C, N, prefetch_row_max);
  gemv1_block<W, XS, U, C>(out, x, w, K, N, blockIdx.x, PdlWait{});  // pdl_begin after the first weight loads
}

// One row of a gated MLP's gate and up projections, a[j] = act(g_j) * u_j (gemv1_act_pair_block);
// grid: ceil(F / (kGemvWarps * 2)).
template <typename W, Activation A>
__global__ void gemv1_act_pair_kernel(float* __restrict__ a,        // [1, F]
                                      const float* __restrict__ x,  // [1, K]
                                      const W* __restrict__ gate,   // [F, K]
                                      const W* __restrict__ up,     // [F, K]
                                      int64_t K, int64_t F) {
  const int64_t j0 = int64_t(blockIdx.x) * kGemvWarps * 2;
  prefetch_rows(gate, K * int64_t(sizeof(W)), j0, kGemvWarps * 2, F);
  prefetch_rows(up, K * int64_t(sizeof(W)), j0, kGemvWarps * 2, F);
  gemv1_act_pair_block<W, A>(a, x, gate, up, K, F, blockIdx.x, PdlWait{});  // pdl_begin after the first weight loads
}

// R rows, 2 <= R <= 8 (gemv_rows_block); grid: ceil(N / (kGemvWarps * kGemv1Cols)).
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
  if constexpr (R == 1 && Deep) {  // one row: pdl_begin after the first weight loads
    gemv1_block<W, PlainX, kGemv1DeepUnroll, kGemv1DeepCols>(t.out[m], PlainX{x}, w, K, t.n[m], block, PdlWait{});
  } else if constexpr (R == 1) {
    gemv1_block<W, PlainX, 2, kGemv1Cols>(t.out[m], PlainX{x}, w, K, t.n[m], block, PdlWait{});
  } else {
    pdl_begin();
    __shared__ __align__(16) float xs[R * kGemvTileK];
    gemv_rows_block<W, R>(t.out[m], PlainX{x}, w, K, t.n[m], block, xs);
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

// terms[j][i] = bf16(x[i] - sum of the earlier terms), j < n_terms; terms: [n_terms, n]. A thread
// takes 4 consecutive values a step (one 16-byte load, one 8-byte store a term) when x, the terms
// and n allow (vec), else one: the same value arithmetic either way. Scalar 4-byte loads and 2-byte
// stores ran the split at about a third of the copy bandwidth (15 us for 512 x 4096 on an H100; 5%
// of the 9B Q4_K_M's 8192-token prefill, bench/results/pp-trace-h100-2026-12-07.txt).
template <int NT>
__device__ __forceinline__ void split_bf16_value(float rest, __nv_bfloat16 (&t)[NT]) {
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    t[j] = __float2bfloat16_rn(rest);
    rest -= __bfloat162float(t[j]);
  }
}
template <int NT>
__global__ void split_bf16_kernel(__nv_bfloat16* __restrict__ terms, const float* __restrict__ x, int64_t n, bool vec) {
  pdl_begin();
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (vec) {
    for (; 4 * i < n; i += stride) {
      const float4 v = reinterpret_cast<const float4*>(x)[i];
      const float f[4] = {v.x, v.y, v.z, v.w};
      __nv_bfloat16 t[4][NT];
#pragma unroll
      for (int e = 0; e < 4; ++e) split_bf16_value<NT>(f[e], t[e]);
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const __nv_bfloat162 lo = {t[0][j], t[1][j]}, hi = {t[2][j], t[3][j]};
        uint2 w;
        w.x = *reinterpret_cast<const uint32_t*>(&lo);
        w.y = *reinterpret_cast<const uint32_t*>(&hi);
        reinterpret_cast<uint2*>(terms + j * n)[i] = w;
      }
    }
    return;
  }
  for (; i < n; i += stride) {
    __nv_bfloat16 t[NT];
    split_bf16_value<NT>(x[i], t);
#pragma unroll
    for (int j = 0; j < NT; ++j) terms[j * n + i] = t[j];
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
        if (small_gemv_grid(blocks))
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
  launch_split_bf16(ctx.stream, terms, x, T * K, n_terms);
  const float one = 1.0f, zero = 0.0f;
  if (n_terms > 1 && T <= kStackedTermsMaxRows) {
    const int64_t cols = int64_t(n_terms) * T;
    auto* partial = static_cast<float*>(ctx.scratch->get(kSlotMatmulPartial, size_t(cols * N) * 4));
    CUBLAS_CHECK(cublasGemmEx(ctx.cublas, CUBLAS_OP_T, CUBLAS_OP_N, int(N), int(cols), int(K), &one, w, CUDA_R_16BF,
                              int(K), terms, CUDA_R_16BF, int(K), &zero, partial, CUDA_R_32F, int(N),
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    launch_sum_terms(ctx.stream, out, partial, T * N, n_terms);
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

}  // namespace

void launch_sum_terms(cudaStream_t stream, float* out, const float* p, int64_t n, int n_terms) {
  launch(sum_terms_kernel, unsigned(std::min<int64_t>(ceil_div(n, 256), 65535 * 4)), 256, 0, stream, out, p, n,
         n_terms);
  CUDA_CHECK_LAUNCH();
}

void launch_split_bf16(cudaStream_t stream, __nv_bfloat16* terms, const float* x, int64_t n, int n_terms) {
  KCHECK_MSG(n_terms >= 1 && n_terms <= 3, "split_bf16: ", n_terms, " terms (expected 1 to 3)");
  const bool vec = n % 4 == 0 && aligned16(x) && aligned16(terms);
  const unsigned grid = unsigned(std::min<int64_t>(ceil_div(vec ? n / 4 : n, 256), 65535 * 4));
  auto kernel = n_terms == 1 ? split_bf16_kernel<1> : n_terms == 2 ? split_bf16_kernel<2> : split_bf16_kernel<3>;
  launch(kernel, grid, 256, 0, stream, terms, x, n, vec);
  CUDA_CHECK_LAUNCH();
}

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
  const bool gemv_only = matmul_gemv_only(ctx);
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
    if constexpr (R == 1) {  // pdl_begin after the first weight loads
      gemv1_block<W, ActMulX<A>, 2, kGemv1Cols>(out, x, w, K, N, blockIdx.x, PdlWait{});
    } else {
      pdl_begin();
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

MultiTargets multi_targets(std::span<const MatmulTarget> targets, int64_t r0) {
  KCHECK(targets.size() <= size_t(kMultiMax));
  MultiTargets mt{};
  mt.count = int(targets.size());
  for (int m = 0; m < mt.count; ++m) {
    const Tensor& w = targets[size_t(m)].w;
    mt.w[m] = w.data;
    mt.out[m] = targets[size_t(m)].out.f32() + r0 * w.rows;
    mt.n[m] = w.rows;
    mt.dtype[m] = w.dtype;
    mt.row_bytes[m] = int64_t(w.row_bytes());
  }
  return mt;
}

bool multi_targets_shaped(const Tensor& x, std::span<const MatmulTarget> targets) {
  const int64_t T = x.rows, K = x.cols;
  bool fits = !targets.empty() && targets.size() <= size_t(kMultiMax) && T >= 1 && x.dtype == DType::kF32 &&
              x.device == Device::kCuda && aligned16(x.data);
  for (const MatmulTarget& t : targets) {
    fits = fits && t.w.cols == K && t.w.rows > 0 && aligned16(t.w.data) && t.w.device == Device::kCuda &&
           t.out.rows == T && t.out.cols == t.w.rows && t.out.dtype == DType::kF32 && t.out.device == Device::kCuda;
  }
  return fits;
}

namespace {

// Whether matmul_multi runs its targets in one launch: every matrix would take the vectorized
// GEMV kernels with one row group (T <= kGemvMaxRows takes them in every mode).
bool multi_gemv_fits(const Tensor& x, std::span<const MatmulTarget> targets) {
  if (!multi_targets_shaped(x, targets) || x.rows > kGemvMaxRows || x.cols % 8 != 0) return false;
  // block formats may mix (Q4_K with Q6_K); plain dtypes must all be the same
  const bool quant = dtype_is_quantized(targets[0].w.dtype);
  for (const MatmulTarget& t : targets) {
    if (quant ? !dtype_is_quantized(t.w.dtype) : t.w.dtype != targets[0].w.dtype) return false;
  }
  return true;
}

}  // namespace

void matmul_multi(const Context& ctx, const Tensor& x, std::span<const MatmulTarget> targets) {
  const int64_t T = x.rows, K = x.cols;
  // One launch (multi_gemv_fits); T32 matrices past 8 rows with one split of x (matmul_multi_t32);
  // otherwise each its own matmul. Same results either way.
  if (!multi_gemv_fits(x, targets)) {
    if (matmul_multi_t32(ctx, x, targets)) return;
    for (const MatmulTarget& t : targets) matmul(ctx, t.out, x, t.w);
    return;
  }
  const bool quant = dtype_is_quantized(targets[0].w.dtype);
  MultiTargets mt = multi_targets(targets, 0);
  auto lay_out = [&](int64_t plain_cols) {
    return lay_out_blocks(mt, [&](int m) { return quant ? gemv_quant_block_cols(mt.dtype[m], T, K) : plain_cols; });
  };
  int64_t blocks = lay_out(kGemvWarps * kGemv1Cols);
  // One row over few columns in all takes the small-grid GEMV (gemv_multi_kernel's Deep).
  const bool deep = !quant && T == 1 && small_gemv_grid(blocks);
  if (deep) blocks = lay_out(kGemvWarps * kGemv1DeepCols);
  KCHECK_MSG(blocks <= INT32_MAX, "matmul_multi: ", blocks, " blocks");
  if (quant) {
    launch_gemv_quant(ctx.stream, mt, blocks, x.f32(), T, K, int_gemv_terms(ctx));
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

void gated_mlp(const Context& ctx, const Tensor& y, const Tensor& x, const Tensor& gate, const Tensor& up,
               const Tensor& down, Activation act, const Tensor& g, const Tensor& u) {
  const int64_t K = x.cols, F = gate.rows;
  const MatmulTarget proj[] = {{g, gate}, {u, up}};
  // The pair kernel's shapes: one row that matmul_multi would take in one launch, over plain
  // weights of one shape, and a down projection matmul_gated would not fuse.
  const bool pair = x.rows == 1 && multi_gemv_fits(x, proj) && !dtype_is_quantized(gate.dtype) &&
                    gate.dtype != DType::kI32 && up.rows == F && g.device == Device::kCuda && aligned16(g.data) &&
                    (act == Activation::kSilu || act == Activation::kGeluTanh) && !gated_gemv_fits(y, g, u, down);
  if (!pair) {
    matmul_multi(ctx, x, proj);
    matmul_gated(ctx, y, g, u, down, act);
    return;
  }
  dispatch_weight(gate.dtype, "gated_mlp", [&]<typename W>() {
    const auto run = [&]<Activation A>() {
      launch(gemv1_act_pair_kernel<W, A>, unsigned(ceil_div(F, kGemvWarps * 2)), kGemvWarps * 32, 0, ctx.stream,
             g.f32(), x.f32(), gate.as<const W>(), up.as<const W>(), K, F);
    };
    if (act == Activation::kGeluTanh) run.template operator()<Activation::kGeluTanh>();
    else run.template operator()<Activation::kSilu>();
    CUDA_CHECK_LAUNCH();
  });
  matmul(ctx, y, g, down);  // what matmul_gated runs after its silu_mul / gelu_tanh_mul
}

}  // namespace kestrel::cuda
