// matmul: out[T, N] = x[T, K] . w[N, K]^T, activations F32, weights BF16/F16/F32, F32 out.
//
// Two paths:
//  - small T (decode, T <= kGemvMaxRows) and F16 weights: a GEMV kernel, one warp per output
//    column, F32 activations times the weights as stored, F32 accumulation. It reads each weight
//    row once per group of up to 8 rows, which is what decode is bound by.
//  - BF16 weights and larger T (prefill): cuBLAS on the tensor cores, BF16 x BF16 with F32
//    accumulation and output. The weights are exact in BF16; the activations are split into
//    hi = bf16(x) and lo = bf16(x - hi) and multiplied twice (out = w.hi + w.lo), which keeps
//    them to ~2^-16 relative instead of BF16's 2^-9. Rounding the activations to BF16 alone
//    (one GEMM) moved the fixtures' logits by up to 2x their RMS: the tiny random checkpoints
//    amplify it, and MoE routing flips on it. F32 weights use cublasSgemm in the default math
//    mode, which never rounds to TF32.
#include "backend/cuda/device_util.cuh"

namespace kestrel::cuda {
namespace {

constexpr int kGemvMaxRows = 8;  // rows per GEMV pass, and the largest T that takes the GEMV path
constexpr int kGemvWarps = 8;    // output columns per block

// grid: (ceil(N / kGemvWarps), ceil(T / kGemvMaxRows)); block: kGemvWarps warps.
// Warp w of block (bx, by) computes out[by*8 .. +8, bx*kGemvWarps + w].
template <typename W>
__global__ void gemv_kernel(float* __restrict__ out,      // [T, N]
                            const float* __restrict__ x,  // [T, K]
                            const W* __restrict__ w,      // [N, K]
                            int64_t T, int64_t K, int64_t N, bool vec) {
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
  if (vec) {  // K % 8 == 0, rows 16-byte aligned
#pragma unroll 4
    for (int64_t k = int64_t(lane) * 8; k < K; k += 256) {
      float wf[8];
      load8(wr + k, wf);
#pragma unroll
      for (int r = 0; r < kGemvMaxRows; ++r) {
        if (r < rows) {
          const float4 a = *reinterpret_cast<const float4*>(xr + r * K + k);
          const float4 b = *reinterpret_cast<const float4*>(xr + r * K + k + 4);
          acc[r] += a.x * wf[0] + a.y * wf[1] + a.z * wf[2] + a.w * wf[3] + b.x * wf[4] + b.y * wf[5] +
                    b.z * wf[6] + b.w * wf[7];
        }
      }
    }
  } else {
    for (int64_t k = lane; k < K; k += 32) {
      const float wv = to_f32(wr[k]);
#pragma unroll
      for (int r = 0; r < kGemvMaxRows; ++r)
        if (r < rows) acc[r] += xr[r * K + k] * wv;
    }
  }
#pragma unroll
  for (int r = 0; r < kGemvMaxRows; ++r) {
    const float s = warp_sum(acc[r]);
    if (lane == 0 && r < rows) out[(row0 + r) * N + n] = s;
  }
}

// hi[i] = bf16(x[i]), lo[i] = bf16(x[i] - hi[i]).
__global__ void split_bf16_kernel(__nv_bfloat16* __restrict__ hi, __nv_bfloat16* __restrict__ lo,
                                  const float* __restrict__ x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float v = x[i];
    const __nv_bfloat16 h = __float2bfloat16_rn(v);
    hi[i] = h;
    lo[i] = __float2bfloat16_rn(v - __bfloat162float(h));
  }
}

template <typename W>
void launch_gemv(cudaStream_t stream, float* out, const float* x, const W* w, int64_t T, int64_t K, int64_t N) {
  const bool vec = K % 8 == 0 && aligned16(x) && aligned16(w);
  dim3 grid(unsigned(ceil_div(N, kGemvWarps)), unsigned(ceil_div(T, kGemvMaxRows)));
  KCHECK_MSG(grid.y <= 65535, "matmul: ", T, " rows is too many for the GEMV path");
  gemv_kernel<W><<<grid, kGemvWarps * 32, 0, stream>>>(out, x, w, T, K, N, vec);
  CUDA_CHECK_LAUNCH();
}

// out^T = w . x^T in cuBLAS's column-major terms: C[N, T] = op(A)[N, K] . B[K, T] with
// A = w seen as column-major [K, N] (transposed), B = x as column-major [K, T].
void launch_cublas_bf16(const Context& ctx, float* out, const float* x, const __nv_bfloat16* w, int64_t T, int64_t K,
                        int64_t N) {
  auto* hi = static_cast<__nv_bfloat16*>(ctx.scratch->get(kSlotMatmulX, size_t(T * K) * 2 * 2));
  __nv_bfloat16* lo = hi + T * K;
  split_bf16_kernel<<<unsigned(std::min<int64_t>(ceil_div(T * K, 256), 65535 * 4)), 256, 0, ctx.stream>>>(hi, lo, x,
                                                                                                          T * K);
  CUDA_CHECK_LAUNCH();
  const float one = 1.0f, zero = 0.0f;
  CUBLAS_CHECK(cublasGemmEx(ctx.cublas, CUBLAS_OP_T, CUBLAS_OP_N, int(N), int(T), int(K), &one, w, CUDA_R_16BF,
                            int(K), hi, CUDA_R_16BF, int(K), &zero, out, CUDA_R_32F, int(N), CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT));
  CUBLAS_CHECK(cublasGemmEx(ctx.cublas, CUBLAS_OP_T, CUBLAS_OP_N, int(N), int(T), int(K), &one, w, CUDA_R_16BF,
                            int(K), lo, CUDA_R_16BF, int(K), &one, out, CUDA_R_32F, int(N), CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT));
}

void launch_cublas_f32(const Context& ctx, float* out, const float* x, const float* w, int64_t T, int64_t K,
                       int64_t N) {
  const float alpha = 1.0f, beta = 0.0f;
  CUBLAS_CHECK(cublasSgemm(ctx.cublas, CUBLAS_OP_T, CUBLAS_OP_N, int(N), int(T), int(K), &alpha, w, int(K), x, int(K),
                           &beta, out, int(N)));
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
  if (T > kGemvMaxRows && w.dtype == DType::kBF16 && !ctx.gemv_only) {
    launch_cublas_bf16(ctx, out.f32(), x.f32(), w.as<const __nv_bfloat16>(), T, K, N);
    return;
  }
  if (T > kGemvMaxRows && w.dtype == DType::kF32 && !ctx.gemv_only) {
    launch_cublas_f32(ctx, out.f32(), x.f32(), w.f32(), T, K, N);
    return;
  }
  dispatch_weight(w.dtype, "matmul", [&]<typename W>() {
    launch_gemv<W>(ctx.stream, out.f32(), x.f32(), w.as<const W>(), T, K, N);
  });
}

}  // namespace kestrel::cuda
