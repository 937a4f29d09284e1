// CUDA vs CPU dilated_conv1d_silu (Qwen4-Exp's PLE conv): sequences starting fresh, continuing a
// state, decoding single tokens (fewer new tokens than the state holds) and long chunks, checking
// outputs and the carried states. Tolerance: products summed in double in kernel order on both
// sides, SiLU in F32 (1e-6); the states are copies (exact).
#include "gpu_test_util.h"

namespace kestrel::test {
namespace {

TEST_F(GpuTest, DilatedConv1dSilu) {
  const std::vector<std::pair<int, int>> seqs = {{0, 40}, {3, 1}, {60, 9}, {0, 1}, {12, 2}, {100, 64}};
  for (int C : {64, 200, 512}) {
    for (int K : {2, 4}) {
      for (int dilation : {1, 3, 5}) {
        StepPlan plan = make_plan(seqs, 10, rng_);
        const int64_t keep = int64_t(K - 1) * dilation, n_slots = int64_t(plan.seqs.size());
        Buffer x = random(plan.n_rows(), C), w = random(C, K, 0.5f), st = random(n_slots, C * keep);
        Buffer dx = up(x), dw = up(w), dst = up(st);
        Buffer out = cpu_.alloc(DType::kF32, plan.n_rows(), C), dout = gpu().alloc(DType::kF32, plan.n_rows(), C);
        cpu_.dilated_conv1d_silu(out, x, w, st, K, dilation, plan);
        gpu().begin_step(plan);
        gpu().dilated_conv1d_silu(dout, dx, dw, dst, K, dilation, plan);
        const std::string what = "C " + std::to_string(C) + " K " + std::to_string(K) + " dilation " +
                                 std::to_string(dilation);
        EXPECT_LE(rel_err(down(dout), host(out)), 1e-6) << what;
        EXPECT_EQ(down(dst), host(st)) << what << ": state";
        EXPECT_EQ(down(dx), host(x)) << what << ": the input is left alone";
      }
    }
  }
}

}  // namespace
}  // namespace kestrel::test
