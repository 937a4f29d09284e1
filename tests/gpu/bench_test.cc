// Rough timings of the first CUDA kernels at released-model shapes (Qwen3.5-9B-like), printed as
// "BENCH <what> <value> <unit>" lines for docs/cuda.md. No assertions: these are measurements.
// Host wall time around many back-to-back launches after a warm-up, so launch gaps count too.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <array>
#include <functional>
#include <vector>

#include "gpu_test_util.h"
#ifdef KESTREL_HAVE_CUDA
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "backend/cuda/q4k_int_bench.h"
#include "backend/cuda/stage_bench.h"
#include "quant/quant.h"
#endif

namespace kestrel::test {
namespace {

class GpuBench : public GpuTest {
 protected:
  // Mean seconds per call of fn over `reps` calls after `warm` calls.
  double time(const std::function<void()>& fn, int reps = 20, int warm = 3) {
    for (int i = 0; i < warm; ++i) fn();
    sync();
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) fn();
    sync();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
  }
  void sync() {
#ifdef KESTREL_HAVE_CUDA
    static_cast<CudaOps&>(gpu()).synchronize();
#endif
  }
  // E zero-weight experts, gate and up [F, H] in dt and down [H, F] in dt_down, row slices of three
  // device matrices (as the loader slices a GGUF's expert tensors); the bytes of one expert and a
  // name for the formats ("Q4_K+Q6_K").
  struct ZeroExperts {
    Buffer gate, up, down;
    ExpertWeights w;
    double bytes_each = 0;
    std::string name;
  };
  ZeroExperts zero_experts(DType dt, DType dt_down, int E, int H, int F) {
    ZeroExperts z;
    z.gate = gpu().alloc(dt, int64_t(E) * F, H);
    z.up = gpu().alloc(dt, int64_t(E) * F, H);
    z.down = gpu().alloc(dt_down, int64_t(E) * H, F);
    for (int e = 0; e < E; ++e) {
      z.w.gate.push_back(z.gate.view().rows_slice(int64_t(e) * F, F));
      z.w.up.push_back(z.up.view().rows_slice(int64_t(e) * F, F));
      z.w.down.push_back(z.down.view().rows_slice(int64_t(e) * H, H));
    }
    z.bytes_each = double(2 * F * dtype_row_bytes(dt, H) + H * dtype_row_bytes(dt_down, F));
    z.name = dt == dt_down ? std::string(dtype_name(dt))
                           : std::string(dtype_name(dt)) + "+" + std::string(dtype_name(dt_down));
    return z;
  }
  // How many of E experts the [rows, k] host ids route to.
  static double touched_experts(const Tensor& ids, int E) {
    std::vector<bool> touched(size_t(E), false);
    for (int64_t i = 0; i < ids.numel(); ++i) touched[size_t(ids.as<int32_t>()[i])] = true;
    return double(std::count(touched.begin(), touched.end(), true));
  }
};

// A dependent stage as its own launch in a CUDA graph (how a decode step's kernels run, under
// programmatic dependent launch) against a grid barrier inside one persistent kernel: the first
// measurement of docs/cuda.md's persistent-kernel plan. Stages of no work, of a small projection's
// bytes and of the 9B's output projection's (~32 MB). Both forms must compute the same chain.
TEST_F(GpuBench, StageChain) {
#ifdef KESTREL_HAVE_CUDA
  for (size_t mb : {0, 4, 32}) {
    const cuda::StageChainTiming t = cuda::time_stage_chain(32, mb << 20, 10);
    EXPECT_TRUE(t.same_result) << mb << " MB a stage";
    std::printf("BENCH stage_chain %zu MB a stage, %d blocks: a launch %.2f us, a grid barrier %.2f us a stage\n", mb,
                t.blocks, t.launches_us, t.barrier_us);
  }
#endif
}

// The integer-dot Q4_K GEMV of q4k_int_bench.h against the shipped one-row kernel and a BF16
// GEMV of the same shape (docs/cuda.md, "What remains for issue 7"). Random super-blocks (f16
// exponents kept small); each variant's output checked against a double reference of the
// dequantized weights: |err| <= 2^-16 (S' + sum_b max|x_b| sum_b |s q|), S' = sum |s q x| +
// sum |m x|, the split's 2^-20 max|x_b| an element and the F32 epilogue well inside it.
TEST_F(GpuBench, Q4kIntGemv) {
#ifdef KESTREL_HAVE_CUDA
  constexpr int kRows = 8;
  // the 9B's gate/up, down and a 4096-column projection; K = 2560 (10 super-blocks: uneven slices)
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{12288, 4096}, {4096, 12288}, {4096, 4096}, {9728, 2560}};
  for (auto [N, K] : shapes) {
    Buffer w = host_buffer(DType::kQ4_K, N, K);
    auto* p = static_cast<uint8_t*>(w.view().data);
    for (size_t i = 0; i < w.view().nbytes(); ++i) p[i] = uint8_t(rng_() & 0x3B);
    Buffer x = random(kRows, K);
    const float* xv = x.view().f32();
    // per row of x and column of w: the reference and its scale (S' and the split's term)
    std::vector<double> ref(static_cast<size_t>(kRows * N)), scale(static_cast<size_t>(kRows * N));
    std::vector<float> wq(static_cast<size_t>(K)), mq(static_cast<size_t>(K));  // s q and -m of a column
    const size_t row_bytes = size_t(K / 256) * 144;
    std::vector<uint8_t> zeroed(row_bytes);
    for (int64_t n = 0; n < N; ++n) {
      const uint8_t* r = p + size_t(n) * row_bytes;
      quant::dequantize_row_q4_k(r, K, wq.data());
      std::copy(r, r + row_bytes, zeroed.begin());  // the quants zeroed: each element's -m
      for (int64_t s = 0; s < K / 256; ++s) std::fill_n(zeroed.begin() + s * 144 + 16, 128, uint8_t(0));
      quant::dequantize_row_q4_k(zeroed.data(), K, mq.data());
      for (int64_t k = 0; k < K; ++k) wq[size_t(k)] -= mq[size_t(k)];
      for (int row = 0; row < kRows; ++row) {
        const float* xr = xv + int64_t(row) * K;
        double y = 0, sp = 0;
        for (int64_t b = 0; b < K / 32; ++b) {
          double mx = 0, sq = 0;
          for (int64_t k = 32 * b; k < 32 * b + 32; ++k) {
            const double a = wq[size_t(k)], m = mq[size_t(k)];
            y += (a + m) * xr[k];
            sp += std::fabs(a * xr[k]) + std::fabs(m * xr[k]);
            mx = std::max(mx, double(std::fabs(xr[k])));
            sq += std::fabs(a);
          }
          sp += mx * sq;
        }
        ref[size_t(row * N + n)] = y;
        scale[size_t(row * N + n)] = sp;
      }
    }
    auto worst_of = [&](const std::vector<float>& out, int rows) {
      double worst = 0;
      for (int64_t i = 0; i < rows * N; ++i)
        worst = std::max(worst, std::fabs(double(out[size_t(i)]) - ref[size_t(i)]) / scale[size_t(i)]);
      return worst;
    };
    const double bytes = double(w.view().nbytes());
    double split_us = 0;
    for (const cuda::Q4kIntGemvRun& r : cuda::time_q4k_int_gemv(p, N, K, xv, 20, &split_us)) {
      const double worst = worst_of(r.out, 1);
      EXPECT_LE(worst, std::ldexp(1.0, -16)) << N << "x" << K << " slices " << r.slices;
      std::printf("BENCH q4k_int_gemv_%ldx%ld slices %d x %s%s: %.0f GB/s hot (%.1f us), %.0f GB/s DRAM (%.1f us); "
                  "worst |err|/scale %.2e\n",
                  long(N), long(K), r.slices, r.converted ? "split before" : "split inside",
                  r.row_major ? ", row-major weights" : "", bytes / r.hot_us / 1e3,
                  r.hot_us, bytes / r.dram_us / 1e3, r.dram_us, worst);
    }
    std::printf("BENCH q4k_int_split_K%ld %.2f us a launch\n", long(K), split_us);
    for (const cuda::Q4kIntRowsRun& r : cuda::time_q4k_int_rows(p, N, K, xv, 20)) {
      const double worst = worst_of(r.out, r.rows);
      EXPECT_LE(worst, std::ldexp(1.0, -16)) << N << "x" << K << " rows " << r.rows;
      EXPECT_TRUE(r.same_bits) << N << "x" << K << " rows " << r.rows << " slices " << r.slices;
      std::printf("BENCH q4k_int_rows_T%d_%ldx%ld slices %d x %s: %.0f GB/s hot (%.1f us), %.0f GB/s DRAM (%.1f us); "
                  "bits of each row alone: %s; worst |err|/scale %.2e\n",
                  r.rows, long(N), long(K), r.slices, r.split_inside ? "split inside" : "split before",
                  bytes / r.hot_us / 1e3, r.hot_us, bytes / r.dram_us / 1e3,
                  r.dram_us, r.same_bits ? "same" : "DIFFERENT", worst);
    }
    // the shipped kernel (one row and eight) and a BF16 GEMV of the same shape, the same two ways
    std::vector<Buffer> turns;
    turns.push_back(up(w));
    while (double(turns.size()) * bytes < 256e6) turns.push_back(up(w));
    for (int T : {1, kRows}) {
      Buffer dx = up(x.view().rows_slice(0, T)), out = gpu().alloc(DType::kF32, T, N);
      const double hot = time([&] { gpu().matmul(out, dx, turns[0]); }, 50);
      size_t next = 0;
      const double dram = time([&] { gpu().matmul(out, dx, turns[next++ % turns.size()]); }, 10 * int(turns.size()));
      std::printf("BENCH q4k_shipped_T%d_%ldx%ld %.0f GB/s hot (%.1f us), %.0f GB/s DRAM (%.1f us)\n", T, long(N),
                  long(K), bytes / hot / 1e9, hot * 1e6, bytes / dram / 1e9, dram * 1e6);
    }
    turns.clear();
    Buffer wb = random(DType::kBF16, N, K, 0.02f), dx = up(x.view().rows_slice(0, 1));
    Buffer out = gpu().alloc(DType::kF32, 1, N);
    const double bf_bytes = double(N) * K * 2;
    turns.push_back(up(wb));
    while (double(turns.size()) * bf_bytes < 256e6) turns.push_back(up(wb));
    size_t next = 0;
    const double bf = time([&] { gpu().matmul(out, dx, turns[next++ % turns.size()]); }, 10 * int(turns.size()));
    std::printf("BENCH bf16_gemv_%ldx%ld %.0f GB/s DRAM (%.1f us)\n", long(N), long(K), bf_bytes / bf / 1e9, bf * 1e6);
  }
#endif
}

TEST_F(GpuBench, MatmulDecodeAndPrefill) {
  const int K = 4096, N = 12288;
  Buffer w = up(random(DType::kBF16, N, K, 0.02f));
  for (int T : {1, 8}) {
    Buffer x = up(random(T, K)), out = gpu().alloc(DType::kF32, T, N);
    const double s = time([&] { gpu().matmul(out, x, w); });
    std::printf("BENCH matmul_gemv_T%d_%dx%d %.1f GB/s (%.1f us)\n", T, N, K, double(N) * K * 2 / s / 1e9, s * 1e6);
  }
#ifdef KESTREL_HAVE_CUDA
  auto& cuda = static_cast<CudaOps&>(gpu());
  for (MatmulPrecision p : {MatmulPrecision::kBf16, MatmulPrecision::kBf16x2, MatmulPrecision::kBf16x3}) {
    cuda.set_matmul_precision(p);
    for (int T : {512, 4096}) {
      Buffer x = up(random(T, K)), out = gpu().alloc(DType::kF32, T, N);
      const double s = time([&] { gpu().matmul(out, x, w); }, 10);
      std::printf("BENCH matmul_%s_T%d_%dx%d %.1f TFLOP/s of model FLOPs (%.1f us)\n", matmul_precision_name(p), T,
                  N, K, 2.0 * T * N * K / s / 1e12, s * 1e6);
    }
  }
  cuda.set_matmul_precision(MatmulPrecision::kBf16x3);
#endif
}

// The tensor-core ceiling the prefill GEMMs are measured against (docs/benchmarks.md): cuBLAS
// alone, BF16 x BF16 with F32 accumulation and F32 output (what kestrel's prefill GEMMs compute
// per term), at 8192^3 and at a 9B MLP shape of a 512-row step, on buffers of random bits.
TEST_F(GpuBench, CublasBf16Peak) {
#ifdef KESTREL_HAVE_CUDA
  cublasHandle_t handle = nullptr;
  ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  for (const auto& [M, N, K] : std::vector<std::array<int, 3>>{{8192, 8192, 8192}, {512, 12288, 4096}}) {
    void *a = nullptr, *b = nullptr, *c = nullptr;
    ASSERT_EQ(cudaMalloc(&a, size_t(M) * K * 2), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&b, size_t(N) * K * 2), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&c, size_t(M) * N * 4), cudaSuccess);
    // small finite BF16 values (0x3C00 + low bits: ~0.0078 .. 0.0156), so no inf/NaN slows anything
    ASSERT_EQ(cudaMemset(a, 0x3C, size_t(M) * K * 2), cudaSuccess);
    ASSERT_EQ(cudaMemset(b, 0x3C, size_t(N) * K * 2), cudaSuccess);
    const float one = 1.0f, zero = 0.0f;
    auto gemm = [&] {  // C[N x M] (column-major) = B^T A: out rows of M, as the model's x W^T
      ASSERT_EQ(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &one, b, CUDA_R_16BF, K, a, CUDA_R_16BF, K,
                             &zero, c, CUDA_R_32F, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                CUBLAS_STATUS_SUCCESS);
    };
    const int reps = M >= 4096 ? 20 : 200;
    for (int i = 0; i < 5; ++i) gemm();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the handle runs on the default stream
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) gemm();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
    std::printf("BENCH cublas_bf16_f32out_%dx%dx%d %.1f TFLOP/s (%.1f us)\n", M, N, K, 2.0 * M * N * K / s / 1e12,
                s * 1e6);
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
  }
  cublasDestroy(handle);
#else
  GTEST_SKIP() << "built without the CUDA backend";
#endif
}

TEST_F(GpuBench, AttentionDecode) {
  const int heads = 16, kv = 4, hd = 256;
  for (DType cache : {DType::kF32, DType::kBF16}) {
    for (int ctx : {1024, 8192}) {
      StepPlan plan = make_plan({{ctx - 1, 1}}, 10, rng_);
      const int64_t rows = int64_t(plan.block_tables.size()) * 16;
      Buffer kc = gpu().alloc(cache, rows, kv * hd), vc = gpu().alloc(cache, rows, kv * hd);
      Buffer q = up(random(1, heads * hd)), k = up(random(1, kv * hd)), v = up(random(1, kv * hd));
      Buffer out = gpu().alloc(DType::kF32, 1, heads * hd);
      AttentionParams p{.n_heads = heads, .n_kv_heads = kv, .head_dim = hd, .scale = 0.0625f};
      gpu().begin_step(plan);
      const double s = time([&] { gpu().attention(out, q, k, v, {kc, vc}, p, plan); });
      const double bytes = double(ctx) * kv * hd * 2 * double(dtype_size(cache));
      std::printf("BENCH attention_decode_%s_ctx%d %.1f GB/s of KV (%.1f us)\n",
                  std::string(dtype_name(cache)).c_str(), ctx, bytes / s / 1e9, s * 1e6);
    }
  }
}

// What deterministic mode costs per kernel: the matmul of a decode batch and a prefill chunk
// through the GEMV kernels instead of cuBLAS (BF16 x3), and decode attention with the split
// count of each row's own context instead of the one that fills the GPU.
TEST_F(GpuBench, DeterministicMode) {
#ifdef KESTREL_HAVE_CUDA
  auto& cuda = static_cast<CudaOps&>(gpu());
  const int K = 4096, N = 12288;
  Buffer w = up(random(DType::kBF16, N, K, 0.02f));
  for (int T : {16, 64, 512}) {
    Buffer x = up(random(T, K)), out = gpu().alloc(DType::kF32, T, N);
    for (bool det : {false, true}) {
      cuda.set_deterministic(det);
      const double s = time([&] { gpu().matmul(out, x, w); }, 10);
      std::printf("BENCH matmul_%s_T%d_%dx%d %.1f TFLOP/s (%.1f us)\n", det ? "deterministic" : "default", T, N, K,
                  2.0 * T * N * K / s / 1e12, s * 1e6);
    }
  }
  const int heads = 16, kv = 4, hd = 256;
  for (int batch : {1, 16}) {
    for (int ctx : {1024, 8192}) {
      StepPlan plan = make_plan(std::vector<std::pair<int, int>>(size_t(batch), {ctx - 1, 1}), 10, rng_);
      const int64_t rows = int64_t(plan.block_tables.size()) * 16;
      Buffer kc = gpu().alloc(DType::kF32, rows, kv * hd), vc = gpu().alloc(DType::kF32, rows, kv * hd);
      Buffer q = up(random(batch, heads * hd)), k = up(random(batch, kv * hd)), v = up(random(batch, kv * hd));
      Buffer out = gpu().alloc(DType::kF32, batch, heads * hd);
      AttentionParams p{.n_heads = heads, .n_kv_heads = kv, .head_dim = hd, .scale = 0.0625f};
      gpu().begin_step(plan);
      for (bool det : {false, true}) {
        cuda.set_deterministic(det);
        const double s = time([&] { gpu().attention(out, q, k, v, {kc, vc}, p, plan); });
        std::printf("BENCH attention_decode_%s_b%d_ctx%d %.1f GB/s of KV (%.1f us)\n",
                    det ? "deterministic" : "default", batch, ctx, double(batch) * ctx * kv * hd * 8 / s / 1e9, s * 1e6);
      }
    }
  }
  cuda.set_deterministic(false);
#endif
}

// The recurrent form (token by token, KESTREL_CUDA_CHUNKED_DELTANET=0) against the default
// dispatch (the chunked form for whole 64-token chunks) at Qwen3.5-9B's heads.
TEST_F(GpuBench, DeltaRule) {
  DeltaNetConfig cfg{.n_k_heads = 16, .n_v_heads = 32, .k_head_dim = 128, .v_head_dim = 128, .conv_kernel = 4};
  for (int T : {1, 512, 1024, 8192}) {  // 512: a prefill step's chunk
    StepPlan plan = make_plan({{0, T}}, 10, rng_);
    Buffer qkv = up(random(T, cfg.conv_dim())), a = up(random(T, 32)), b = up(random(T, 32));
    Buffer an = up(random(1, 32)), dt = up(random(1, 32));
    Buffer ssm = gpu().alloc(DType::kF32, 1, 32 * 128 * 128), out = gpu().alloc(DType::kF32, T, 32 * 128);
    gpu().begin_step(plan);
    for (bool recurrent : {true, false}) {
      if (T == 1 && !recurrent) continue;  // a single token runs the recurrent form either way
      if (recurrent) setenv("KESTREL_CUDA_CHUNKED_DELTANET", "0", 1);
      const double s = time([&] { gpu().gated_delta_rule(out, qkv, a, b, an, dt, {.conv = {}, .ssm = ssm}, cfg, plan); },
                            T > 1 ? 3 : 20, 1);
      unsetenv("KESTREL_CUDA_CHUNKED_DELTANET");
      std::printf("BENCH gated_delta_rule_%s_T%d %.1f us (%.3f us/token)\n", recurrent ? "recurrent" : "chunked", T,
                  s * 1e6, s * 1e6 / T);
    }
#ifdef KESTREL_HAVE_CUDA
    if (T > 1) {  // at --matmul-precision bf16: the prep and the scan on the tensor cores
      auto& cuda = static_cast<CudaOps&>(gpu());
      cuda.set_matmul_precision(MatmulPrecision::kBf16);
      const double s =
          time([&] { gpu().gated_delta_rule(out, qkv, a, b, an, dt, {.conv = {}, .ssm = ssm}, cfg, plan); }, 3, 1);
      cuda.set_matmul_precision(MatmulPrecision::kBf16x3);
      std::printf("BENCH gated_delta_rule_chunked_bf16_T%d %.1f us (%.3f us/token)\n", T, s * 1e6, s * 1e6 / T);
    }
#endif
  }
}

// sample_candidates on Qwen3.5's vocabulary (248,320 logits a row) for 1 and 64 rows: the device
// side of sampling without bringing the logits back, against the 1 MB a row it would copy.
TEST_F(GpuBench, SampleCandidates) {
  const int64_t V = 248320, M = 1024;
  for (int R : {1, 64}) {
    Buffer x = up(random(R, V, 2.0f)), ids = gpu().alloc(DType::kI32, R, M), sc = gpu().alloc(DType::kF32, R, M),
           mass = gpu().alloc(DType::kF64, R, 1);
    const std::vector<float> temps(static_cast<size_t>(R), 0.8f);
    const double s = time([&] { gpu().sample_candidates(ids, sc, mass, x, temps); }, 20, 2);
    std::printf("BENCH sample_candidates_rows%d %.1f us (%.1f us a row; %lld candidates of %lld)\n", R, s * 1e6,
                s * 1e6 / R, (long long)M, (long long)V);
  }
}

// The recurrent form at decode, one token for each of n sequences (Qwen3.5-9B / 35B-A3B heads:
// 32 value heads of 128 x 128), against the bytes it must move: each sequence's 2 MB state read
// and written once. The batch-64 decode step's DeltaNet phase, isolated for a profiler.
TEST_F(GpuBench, DeltaRuleDecode) {
  DeltaNetConfig cfg{.n_k_heads = 16, .n_v_heads = 32, .k_head_dim = 128, .v_head_dim = 128, .conv_kernel = 4};
  for (int n : {1, 8, 64}) {
    StepPlan plan = make_plan(std::vector<std::pair<int, int>>(size_t(n), {100, 1}), 10, rng_);
    Buffer qkv = up(random(n, cfg.conv_dim())), a = up(random(n, 32)), b = up(random(n, 32));
    Buffer an = up(random(1, 32)), dt = up(random(1, 32));
    Buffer ssm = gpu().alloc(DType::kF32, n, 32 * 128 * 128), out = gpu().alloc(DType::kF32, n, 32 * 128);
    gpu().begin_step(plan);
    const double s =
        time([&] { gpu().gated_delta_rule(out, qkv, a, b, an, dt, {.conv = {}, .ssm = ssm}, cfg, plan); }, 20, 2);
    const double bytes = 2.0 * n * 32 * 128 * 128 * 4;
    std::printf("BENCH gated_delta_rule_decode_n%d %.1f us (%.1f GB/s of state read and written)\n", n, s * 1e6,
                bytes / s / 1e9);
  }
}

// The routed experts of a Qwen3.5-35B-A3B decode step in isolation (moe_experts: grouping,
// gate/up, down and the rank-ordered sum; 256 experts of 512 x 2048, top 8), T tokens, against
// the bytes of the experts the step touches, for BF16 experts and the GGUF files' block formats
// (Q8_0; Q4_K gate/up with Q6_K down, as the Q4_K_M recipe writes the 35B-A3B's experts). Zero
// weights: the kernels' time does not depend on the values, and 1.6 GB of random bf16 would take
// longer to make than to time.
TEST_F(GpuBench, MoeExpertsDecode) {
  const int E = 256, k = 8, H = 2048, F = 512;
  const std::pair<DType, DType> kinds[] = {{DType::kBF16, DType::kBF16}, {DType::kQ8_0, DType::kQ8_0},
                                           {DType::kQ4_K, DType::kQ6_K}};
  for (const auto& [dt, dt_down] : kinds) {
    const ZeroExperts z = zero_experts(dt, dt_down, E, H, F);
    for (int T : {1, 8}) {
      Buffer x = random(T, H), logits = random(T, E, 2.0f);
      Buffer ids = cpu_.alloc(DType::kI32, T, k), wts = cpu_.alloc(DType::kF32, T, k);
      cpu_.moe_route(ids, wts, logits, k, true);
      const double n_touched = touched_experts(ids, E);
      Buffer dx = up(x), dids = up(ids), dwts = up(wts), out = gpu().alloc(DType::kF32, T, H);
      const double s = time([&] { gpu().moe_experts(out, dx, dids, dwts, z.w); }, 50, 3);
      const double bytes = n_touched * z.bytes_each;
      std::printf("BENCH moe_experts_decode_%s_T%d %.1f us (%.0f experts, %.1f GB/s of their weights)\n",
                  z.name.c_str(), T, s * 1e6, n_touched, bytes / s / 1e9);
    }
  }
}

#ifdef KESTREL_HAVE_CUDA
// A Qwen3.5-35B-A3B MoE layer's routed experts over a 512-token prefill chunk (4096 pairs on
// ~256 experts; zero weights, BF16, Q8_0, and the Q4_K_M recipe's Q4_K gate/up with Q6_K down):
// `exact` runs the CUDA-core grouped kernels, bf16x3 and bf16 the tensor-core ones (moe_mma.cu).
// GB/s counts each touched expert's weights once; TFLOP/s the pairs' products (2 H F a matrix).
TEST_F(GpuBench, MoeExpertsPrefill) {
  const int E = 256, k = 8, H = 2048, F = 512, T = 512;
  CudaOps& cuda = static_cast<CudaOps&>(gpu());
  const std::pair<DType, DType> kinds[] = {{DType::kBF16, DType::kBF16}, {DType::kQ8_0, DType::kQ8_0},
                                           {DType::kQ4_K, DType::kQ6_K}};
  Buffer x = random(T, H), logits = random(T, E, 2.0f);
  Buffer ids = cpu_.alloc(DType::kI32, T, k), wts = cpu_.alloc(DType::kF32, T, k);
  cpu_.moe_route(ids, wts, logits, k, true);
  const double n_touched = touched_experts(ids, E);
  const double flops = 2.0 * T * k * 3.0 * H * F;
  Buffer dx = up(x), dids = up(ids), dwts = up(wts), out = gpu().alloc(DType::kF32, T, H);
  for (const auto& [dt, dt_down] : kinds) {
    const ZeroExperts z = zero_experts(dt, dt_down, E, H, F);
    const double bytes = n_touched * z.bytes_each;
    for (auto [p, name] : {std::pair{MatmulPrecision::kExact, "exact"}, std::pair{MatmulPrecision::kBf16x3, "bf16x3"},
                           std::pair{MatmulPrecision::kBf16, "bf16"}}) {
      cuda.set_matmul_precision(p);
      const double s = time([&] { gpu().moe_experts(out, dx, dids, dwts, z.w); }, 10, 2);
      std::printf("BENCH moe_experts_prefill_%s_T%d_%s %.1f us (%.0f experts, %.0f GB/s of their weights, %.1f "
                  "TFLOP/s)\n",
                  z.name.c_str(), T, name, s * 1e6, n_touched, bytes / s / 1e9, flops / s / 1e12);
    }
  }
  cuda.set_matmul_precision(MatmulPrecision::kBf16x3);
}
#endif

// The tail of a Qwen3.5-35B-A3B MoE layer at decode, as moe_block launches it: the shared
// expert's down projection (512 -> 2048), the route, then the routed experts with the shared
// output joined in their sum. Each call routes a different row of 32 (different experts, as
// consecutive layers touch), so the L2 holds few of a call's experts from the call before. BF16,
// zero expert weights (the time does not depend on them).
TEST_F(GpuBench, MoeLayerDecode) {
  const int E = 256, k = 8, H = 2048, F = 512, kRows = 32;
  const ZeroExperts z = zero_experts(DType::kBF16, DType::kBF16, E, H, F);
  Buffer shared_down = up(random(DType::kBF16, H, F, 0.02f));
  Buffer logits = up(random(kRows, E, 2.0f)), x = up(random(1, H));
  Buffer g = up(random(1, F)), u = up(random(1, F));
  Buffer s = gpu().alloc(DType::kF32, 1, H), sg = up(random(1, 1)), out = gpu().alloc(DType::kF32, 1, H);
  Buffer ids = gpu().alloc(DType::kI32, 1, k), wts = gpu().alloc(DType::kF32, 1, k);
  int row = 0;
  const double sec = time(
      [&] {
        gpu().matmul_gated(s, g, u, shared_down, Activation::kSilu);  // may overwrite g: timing only
        gpu().moe_route(ids, wts, logits.view().rows_slice(row++ % kRows, 1), k, true);
        gpu().moe_experts_shared(out, x, ids, wts, z.w, s, sg);
      },
      64, 32);
  std::printf("BENCH moe_layer_decode_T1 %.1f us (shared down, route, experts)\n", sec * 1e6);
}

}  // namespace
}  // namespace kestrel::test
