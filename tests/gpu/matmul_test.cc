// CUDA vs CPU matmul over a grid of shapes and weight dtypes.
// Tolerances: the GEMV path (T <= 8, and every T for F16 weights) multiplies F32 activations by
// the stored weights in F32, like the CPU: 1e-5. BF16 weights with T > 8 go through cuBLAS with
// the activations split into BF16 terms: 1 term (plain BF16, 2^-9 per element) 1e-2, 2 terms
// (2^-16) 1e-4, 3 terms (as exact as F32) 1e-5. F32 weights with T > 8 use cublasSgemm without
// TF32: 1e-5.
#include <cstdio>

#include "gpu_test_util.h"

namespace kestrel::test {
namespace {

// One case: CPU reference vs the GPU, relative error.
double matmul_err(CpuOps& cpu, Ops& gpu, const Buffer& x, const Buffer& w) {
  Buffer dx = gpu.upload(x), dw = gpu.upload(w);
  Buffer ref = cpu.alloc(DType::kF32, x.view().rows, w.view().rows);
  Buffer out = gpu.alloc(DType::kF32, x.view().rows, w.view().rows);
  cpu.matmul(ref, x, w);
  gpu.matmul(out, dx, dw);
  std::vector<float> o(size_t(out.view().numel()));
  gpu.to_host(out, o.data());
  return rel_err(o, std::vector<float>(ref.view().f32(), ref.view().f32() + ref.view().numel()));
}

TEST_F(GpuTest, Matmul) {
  double worst_gemv = 0, worst_f32 = 0;
  for (DType dt : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (int T : {1, 3, 8, 9, 64, 200}) {
      for (int K : {64, 100, 1024}) {
        for (int N : {1, 32, 257, 1000}) {
          if (T > 8 && dt == DType::kBF16) continue;  // MatmulPrecisions below
          Buffer x = random(T, K), w = random(dt, N, K, 0.05f);
          const double err = matmul_err(cpu_, gpu(), x, w);
          EXPECT_LE(err, 1e-5) << dtype_name(dt) << " T=" << T << " K=" << K << " N=" << N;
          double& worst = T > 8 && dt == DType::kF32 ? worst_f32 : worst_gemv;
          worst = std::max(worst, err);
        }
      }
    }
  }
  std::printf("MATMUL worst rel err: gemv %.2e, cublas f32 %.2e\n", worst_gemv, worst_f32);
}

#ifdef KESTREL_HAVE_CUDA
// BF16 weights, prefill rows: each activation precision within its documented bound.
TEST_F(GpuTest, MatmulPrecisions) {
  struct Mode { MatmulPrecision p; double tol; };
  for (Mode m : {Mode{MatmulPrecision::kBf16, 1e-2}, Mode{MatmulPrecision::kBf16x2, 1e-4},
                 Mode{MatmulPrecision::kBf16x3, 1e-5}, Mode{MatmulPrecision::kExact, 1e-5}}) {
    static_cast<CudaOps&>(gpu()).set_matmul_precision(m.p);
    double worst = 0;
    for (int T : {9, 64, 200, 256, 257}) {  // stacked terms up to 256 rows, one GEMM per term past it
      for (int K : {64, 100, 1024}) {
        for (int N : {1, 32, 257, 1000}) {
          Buffer x = random(T, K), w = random(DType::kBF16, N, K, 0.05f);
          const double err = matmul_err(cpu_, gpu(), x, w);
          EXPECT_LE(err, m.tol) << matmul_precision_name(m.p) << " T=" << T << " K=" << K << " N=" << N;
          worst = std::max(worst, err);
        }
      }
    }
    std::printf("MATMUL prefill %-6s worst rel err %.2e\n", matmul_precision_name(m.p), worst);
  }
}
#endif

// A row's result from the GEMV kernels does not depend on how many rows (1..8) share the
// launch: batched decode gives the bits of decoding alone. K spans several shared-memory tiles and a partial one;
// N = 300 takes the one-row kernel's deep unroll (a grid of at most a block a multiprocessor), 5000 its usual one.
TEST_F(GpuTest, MatmulGemvRowsAreBitIdenticalToAlone) {
  for (DType dt : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (auto [K, N] : {std::pair<int64_t, int64_t>{64, 300}, {1024, 300}, {2056, 300}, {4096 + 8, 300}, {1024, 5000},
                        {4096 + 8, 5000}}) {
      const int T = 8;
      Buffer x = random(T, K), w = random(dt, N, K, 0.05f);
      Buffer dx = up(x), dw = up(w);
      std::vector<std::vector<float>> alone(T);
      for (int r = 0; r < T; ++r) {
        Buffer o = gpu().alloc(DType::kF32, 1, N);
        gpu().matmul(o, dx.view().rows_slice(r, 1), dw);
        alone[size_t(r)] = down(o);
      }
      for (int rows = 2; rows <= T; ++rows) {
        Buffer o = gpu().alloc(DType::kF32, rows, N);
        gpu().matmul(o, dx.view().rows_slice(0, rows), dw);
        const std::vector<float> got = down(o);
        for (int r = 0; r < rows; ++r)
          for (int64_t n = 0; n < N; ++n)
            ASSERT_EQ(got[size_t(r * N + n)], alone[size_t(r)][size_t(n)])
                << dtype_name(dt) << " K=" << K << " rows=" << rows << " row " << r << " col " << n;
      }
    }
  }
}

// matmul_multi (one launch for a layer's input projections) gives every output the bits its
// own matmul gives, for every row count (the fused GEMV path up to 8 rows, separate matmuls past
// it) and matrices of very different widths (tiny N like the DeltaNet a/b projections, N not a
// multiple of a block's columns), and matches the CPU. The second set (an MoE layer's router and
// shared expert, 1281 columns) takes the small-grid kernel at one row.
TEST_F(GpuTest, MatmulMultiEqualsSeparateMatmuls) {
  for (auto [dt, widths] : {std::pair<DType, std::vector<int64_t>>{DType::kBF16, {300, 32, 4096 + 40, 1}},
                            {DType::kF32, {300, 32, 4096 + 40, 1}}, {DType::kBF16, {256, 512, 512, 1}},
                            {DType::kF32, {256, 512, 512, 1}}}) {
    const int64_t K = 1024 + 8;
    std::vector<Buffer> hw, dw;
    for (size_t m = 0; m < widths.size(); ++m) {
      hw.push_back(random(dt, widths[m], K, 0.05f));
      dw.push_back(up(hw.back()));
    }
    for (int T : {1, 3, 8, 12}) {
      Buffer x = random(T, K), dx = up(x);
      std::vector<Buffer> fused, alone;
      std::vector<MatmulTarget> targets;
      for (size_t m = 0; m < widths.size(); ++m) {
        fused.push_back(gpu().alloc(DType::kF32, T, widths[m]));
        alone.push_back(gpu().alloc(DType::kF32, T, widths[m]));
        targets.push_back({fused.back(), dw[m]});
        gpu().matmul(alone.back(), dx, dw[m]);
      }
      gpu().matmul_multi(dx, targets);
      for (size_t m = 0; m < widths.size(); ++m) {
        const std::vector<float> got = down(fused[m]), want = down(alone[m]);
        ASSERT_EQ(got, want) << dtype_name(dt) << " T=" << T << " matrix " << m << " (N=" << widths[m] << ")";
        Buffer ref = host_buffer(DType::kF32, T, widths[m]);
        cpu_.matmul(ref, x, hw[m]);
        EXPECT_LE(rel_err(got, host(ref)), 1e-5) << dtype_name(dt) << " T=" << T << " matrix " << m;
      }
    }
  }
}

// matmul_gated (a gated MLP's down projection) is bit-identical to the activation kernel then
// matmul, which the model ran before: the fused GEMV (T <= 8, K <= 1024) forms act(gate) * up as
// it loads it, for one row and for row groups; larger T or K take the two launches; within 1e-5
// of the CPU.
TEST_F(GpuTest, MatmulGatedEqualsActivationThenMatmul) {
  for (DType dt : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (Activation act : {Activation::kSilu, Activation::kGeluTanh}) {
      for (int T : {1, 2, 5, 8, 9, 20}) {
        for (int64_t K : {512, 1024, 1024 + 8, 3000}) {
          const int64_t N = 257;
          Buffer w = random(dt, N, K, 0.05f), g = random(T, K, 3.0f), u = random(T, K);
          Buffer dw = up(w), dg = up(g), du = up(u), dg2 = up(g);
          Buffer fused = gpu().alloc(DType::kF32, T, N), alone = gpu().alloc(DType::kF32, T, N);
          gpu().matmul_gated(fused, dg, du, dw, act);
          if (act == Activation::kSilu) gpu().silu_mul(dg2, dg2, du);
          else gpu().gelu_tanh_mul(dg2, dg2, du);
          gpu().matmul(alone, dg2, dw);
          const std::vector<float> got = down(fused);
          const char* name = act == Activation::kSilu ? "silu" : "gelu";
          ASSERT_EQ(got, down(alone)) << dtype_name(dt) << " " << name << " T=" << T << " K=" << K;
          Buffer ref = host_buffer(DType::kF32, T, N);
          cpu_.matmul_gated(ref, g, u, w, act);
          EXPECT_LE(rel_err(got, host(ref)), 1e-5)
              << dtype_name(dt) << " " << name << " T=" << T << " K=" << K;
        }
      }
    }
  }
}

// gated_mlp is bit-identical to the ops the model ran before it (matmul_multi of gate and up, then
// matmul_gated), which is what Ops' default runs: for one row with F > 1024 CUDA forms act(g) * u
// in the gate/up GEMV's epilogue (an odd F leaves a warp one pair); within 1e-5 of the CPU.
TEST_F(GpuTest, GatedMlpEqualsItsParts) {
  for (DType dt : {DType::kBF16, DType::kF32}) {
    for (Activation act : {Activation::kSilu, Activation::kGeluTanh}) {
      for (int T : {1, 3}) {
        for (int64_t F : {512, 1032, 3001, 12288}) {
          const int64_t K = 1024, H = 264;
          Buffer x = random(T, K), wg = random(dt, F, K, 0.05f), wu = random(dt, F, K, 0.05f);
          Buffer wd = random(dt, H, F, 0.05f);
          Buffer dx = up(x), dwg = up(wg), dwu = up(wu), dwd = up(wd);
          Buffer g = gpu().alloc(DType::kF32, T, F), u = gpu().alloc(DType::kF32, T, F);
          Buffer y = gpu().alloc(DType::kF32, T, H), parts = gpu().alloc(DType::kF32, T, H);
          gpu().gated_mlp(y, dx, dwg, dwu, dwd, act, g, u);
          gpu().Ops::gated_mlp(parts, dx, dwg, dwu, dwd, act, g, u);
          const std::vector<float> got = down(y);
          const char* name = act == Activation::kSilu ? "silu" : "gelu";
          ASSERT_EQ(got, down(parts)) << dtype_name(dt) << " " << name << " T=" << T << " F=" << F;
          Buffer rg = host_buffer(DType::kF32, T, F), ru = host_buffer(DType::kF32, T, F);
          Buffer ref = host_buffer(DType::kF32, T, H);
          cpu_.gated_mlp(ref, x, wg, wu, wd, act, rg, ru);
          EXPECT_LE(rel_err(got, host(ref)), 1e-5) << dtype_name(dt) << " " << name << " T=" << T << " F=" << F;
        }
      }
    }
  }
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
