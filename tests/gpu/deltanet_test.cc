// CUDA vs CPU conv1d_silu and gated_delta_rule, over sequences that start mid-chunk, cross the
// 64-aligned chunk grid and decode single tokens, checking outputs and the carried states.
// Tolerances: conv1d sums in double on both sides (1e-6). The delta rule runs the recurrent form
// in double on the GPU against the CPU's chunked form in double; both round to F32 at the end
// (1e-5 on outputs and states).
#include "gpu_test_util.h"

namespace kestrel::test {
namespace {

const std::vector<std::pair<int, int>> kSeqs = {{0, 100}, {3, 1}, {60, 9}, {130, 64}, {0, 1}, {64, 64}};

TEST_F(GpuTest, Conv1dSilu) {
  for (int C : {64, 200}) {
    for (int K : {2, 4}) {
      StepPlan plan = make_plan(kSeqs, 10, rng_);
      const int n_slots = int(plan.seqs.size());
      Buffer x = random(plan.n_rows(), C), w = random(C, K, 0.5f), st = random(n_slots, int64_t(C) * (K - 1));
      Buffer dx = up(x), dw = up(w), dst = up(st);
      StateLayerView cs{.conv = st, .ssm = {}}, gs{.conv = dst, .ssm = {}};
      cpu_.conv1d_silu(x, w, cs, K, plan);
      gpu().begin_step(plan);
      gpu().conv1d_silu(dx, dw, gs, K, plan);
      EXPECT_LE(rel_err(down(dx), host(x)), 1e-6) << "C " << C << " K " << K;
      EXPECT_LE(rel_err(down(dst), host(st)), 1e-6) << "state C " << C << " K " << K;
    }
  }
}

struct GdrCase { int nk, nv, dk, dv; };

class DeltaRuleTest : public GpuTest {
 protected:
  void check(const GdrCase& c) {
    StepPlan plan = make_plan(kSeqs, 10, rng_);
    DeltaNetConfig cfg{.n_k_heads = c.nk, .n_v_heads = c.nv, .k_head_dim = c.dk, .v_head_dim = c.dv,
                       .conv_kernel = 4};
    const int64_t T = plan.n_rows(), S = int64_t(plan.seqs.size());
    Buffer qkv = random(T, cfg.conv_dim()), a = random(T, c.nv), b = random(T, c.nv);
    Buffer a_neg = random(1, c.nv), dt_bias = random(1, c.nv, 0.5f);
    for (int i = 0; i < c.nv; ++i) a_neg.view().f32()[i] = -std::exp(a_neg.view().f32()[i] * 0.5f);
    Buffer ssm = random(S, int64_t(c.nv) * c.dk * c.dv, 0.1f);
    Buffer dqkv = up(qkv), da = up(a), db = up(b), dan = up(a_neg), ddt = up(dt_bias), dssm = up(ssm);
    Buffer ref = cpu_.alloc(DType::kF32, T, int64_t(c.nv) * c.dv), out = gpu().alloc(DType::kF32, T, ref.view().cols);
    cpu_.gated_delta_rule(ref, qkv, a, b, a_neg, dt_bias, {.conv = {}, .ssm = ssm}, cfg, plan);
    gpu().begin_step(plan);
    gpu().gated_delta_rule(out, dqkv, da, db, dan, ddt, {.conv = {}, .ssm = dssm}, cfg, plan);
    const std::string what = std::to_string(c.nk) + "/" + std::to_string(c.nv) + " heads, dk " +
                             std::to_string(c.dk) + " dv " + std::to_string(c.dv);
    EXPECT_LE(rel_err(down(out), host(ref)), 1e-5) << what;
    EXPECT_LE(rel_err(down(dssm), host(ssm)), 1e-5) << what << ": state";
  }
};

TEST_F(DeltaRuleTest, SmallHeads) { check({2, 4, 32, 32}); }
TEST_F(DeltaRuleTest, Qwen35Heads) { check({2, 4, 128, 128}); }
TEST_F(DeltaRuleTest, UnevenDims) { check({1, 3, 64, 96}); }

// Prefill split on the 64-aligned chunk grid is bit-identical to one pass on the GPU; any other
// split differs only by where the state was rounded to F32 (1e-6).
TEST_F(DeltaRuleTest, SplitOnChunkGridIsBitIdentical) {
  DeltaNetConfig cfg{.n_k_heads = 2, .n_v_heads = 4, .k_head_dim = 32, .v_head_dim = 32, .conv_kernel = 4};
  const int T = 150;
  Buffer qkv = random(T, cfg.conv_dim()), a = random(T, 4), b = random(T, 4);
  Buffer a_neg = random(1, 4), dt_bias = random(1, 4);
  for (int i = 0; i < 4; ++i) a_neg.view().f32()[i] = -std::exp(a_neg.view().f32()[i] * 0.5f);
  Buffer dqkv = up(qkv), da = up(a), db = up(b), dan = up(a_neg), ddt = up(dt_bias);
  auto run = [&](const std::vector<int>& splits) {
    Buffer ssm = gpu().alloc(DType::kF32, 1, 4 * 32 * 32);
    Buffer out = gpu().alloc(DType::kF32, T, 4 * 32);
    int begin = 0;
    for (int n : splits) {
      StepPlan plan;
      std::vector<int32_t> toks(size_t(n), 0), blocks(size_t((begin + n + 15) / 16), 0);
      plan.add_sequence(toks.data(), n, begin, 0, blocks, false, true);
      gpu().begin_step(plan);
      gpu().gated_delta_rule(out.view().rows_slice(begin, n), dqkv.view().rows_slice(begin, n),
                             da.view().rows_slice(begin, n), db.view().rows_slice(begin, n), dan, ddt,
                             {.conv = {}, .ssm = ssm}, cfg, plan);
      begin += n;
    }
    std::vector<float> o = down(out), s = down(ssm);
    o.insert(o.end(), s.begin(), s.end());
    return o;
  };
  const std::vector<float> whole = run({150});
  EXPECT_EQ(run({64, 64, 22}), whole);
  EXPECT_EQ(run({128, 22}), whole);
  EXPECT_EQ(run({64, 86}), whole);
  EXPECT_LE(rel_err(run({1, 63, 70, 16}), whole), 1e-6);
  EXPECT_LE(rel_err(run({37, 1, 1, 111}), whole), 1e-6);
}

}  // namespace
}  // namespace kestrel::test
