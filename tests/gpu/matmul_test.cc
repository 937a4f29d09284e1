// CUDA vs CPU matmul over a grid of shapes and weight dtypes.
// Tolerances: the GEMV path (T <= 8, and every T for F16 weights) multiplies F32 activations by
// the stored weights in F32, like the CPU: 1e-5. BF16 weights with T > 8 go through cuBLAS with
// the activations split into two BF16 halves (hi + lo, ~2^-16 relative per element): 1e-4.
// F32 weights with T > 8 use cublasSgemm without TF32: 1e-5.
#include <cstdio>

#include "gpu_test_util.h"

namespace kestrel::test {
namespace {

TEST_F(GpuTest, Matmul) {
  double worst_gemv = 0, worst_cublas_bf16 = 0, worst_cublas_f32 = 0;
  for (DType dt : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (int T : {1, 3, 8, 9, 64, 200}) {
      for (int K : {64, 100, 1024}) {
        for (int N : {1, 32, 257, 1000}) {
          Buffer x = random(T, K), w = random(dt, N, K, 0.05f);
          Buffer dx = up(x), dw = up(w);
          Buffer ref = cpu_.alloc(DType::kF32, T, N), out = gpu().alloc(DType::kF32, T, N);
          cpu_.matmul(ref, x, w);
          gpu().matmul(out, dx, dw);
          const double tol = (T > 8 && dt == DType::kBF16) ? 1e-4 : 1e-5;
          const double err = rel_err(down(out), host(ref));
          EXPECT_LE(err, tol) << dtype_name(dt) << " T=" << T << " K=" << K << " N=" << N;
          double& worst = T <= 8 || dt == DType::kF16 ? worst_gemv
                          : dt == DType::kBF16        ? worst_cublas_bf16
                                                      : worst_cublas_f32;
          worst = std::max(worst, err);
        }
      }
    }
  }
  std::printf("MATMUL worst rel err: gemv %.2e, cublas bf16 hi/lo %.2e, cublas f32 %.2e\n", worst_gemv,
              worst_cublas_bf16, worst_cublas_f32);
}

TEST_F(GpuTest, MatmulRowSliceInputs) {
  // Views at row offsets (unaligned for odd K) must take the scalar path and stay correct.
  Buffer x = random(10, 37), w = random(DType::kBF16, 20, 37);
  Buffer dx = up(x), dw = up(w);
  Buffer ref = cpu_.alloc(DType::kF32, 3, 20), out = gpu().alloc(DType::kF32, 3, 20);
  cpu_.matmul(ref, x.view().rows_slice(1, 3), w);
  gpu().matmul(out, dx.view().rows_slice(1, 3), dw);
  EXPECT_LE(rel_err(down(out), host(ref)), 1e-5);
}

}  // namespace
}  // namespace kestrel::test
