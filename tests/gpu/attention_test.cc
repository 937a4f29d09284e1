// CUDA vs CPU rope and paged attention (GQA, sliding window, mixed prefill and decode rows).
// Tolerances: rope does the CPU's arithmetic (1e-5). Attention uses an online softmax split
// over 4 warps instead of the CPU's two passes: same math, different rounding order (1e-5).
#include "gpu_test_util.h"

namespace kestrel::test {
namespace {

TEST_F(GpuTest, Rope) {
  struct Case { int hd, rot, freq_dim, heads; double theta; };
  for (Case c : {Case{64, 64, 0, 4, 10000.0}, Case{64, 16, 0, 4, 10000.0}, Case{128, 32, 128, 2, 1e6},
                 Case{256, 64, 0, 3, 5e6}, Case{32, 32, 0, 1, 500.0}}) {
    StepPlan plan = make_plan({{0, 9}, {1000, 1}, {70000, 3}}, 100, rng_);
    Buffer x = random(plan.n_rows(), int64_t(c.heads) * c.hd);
    Buffer dx = up(x);
    RopeConfig rc{.theta = c.theta, .rotary_dim = c.rot, .freq_dim = c.freq_dim};
    cpu_.rope(x, c.hd, rc, plan);
    gpu().begin_step(plan);
    gpu().rope(dx, c.hd, rc, plan);
    EXPECT_LE(rel_err(down(dx), host(x)), 1e-5) << "hd " << c.hd << " rot " << c.rot;
  }
}

// Gemma 4's proportional RoPE: pairs (i, i + head_dim/2), the first rotary_dim/2 rotating.
TEST_F(GpuTest, RopeWholeHeadPairs) {
  struct Case { int hd, rot, heads; double theta; };
  for (Case c : {Case{512, 128, 2, 1e6}, Case{64, 16, 4, 1e6}, Case{256, 64, 3, 1e4}, Case{128, 128, 1, 1e4}}) {
    StepPlan plan = make_plan({{0, 9}, {1000, 1}, {70000, 3}}, 100, rng_);
    Buffer x = random(plan.n_rows(), int64_t(c.heads) * c.hd);
    Buffer dx = up(x);
    RopeConfig rc{.theta = c.theta, .rotary_dim = c.rot, .freq_dim = c.hd, .whole_head_pairs = true};
    cpu_.rope(x, c.hd, rc, plan);
    gpu().begin_step(plan);
    gpu().rope(dx, c.hd, rc, plan);
    EXPECT_LE(rel_err(down(dx), host(x)), 1e-5) << "hd " << c.hd << " rot " << c.rot;
  }
}

TEST_F(GpuTest, Attention) {
  struct Case { int heads, kv, hd; };
  // A mixed prefill/decode batch (one split per row), and decode rows over long contexts (the
  // split-KV path: several splits per row, merged by the combine kernel).
  const std::vector<std::vector<std::pair<int, int>>> batches = {
      {{0, 20}, {5, 1}, {33, 1}, {17, 9}, {0, 1}, {100, 40}}, {{300, 1}, {1000, 1}, {5, 1}}};
  const std::vector<Case> cases = {{4, 2, 32}, {4, 4, 64}, {8, 2, 128}, {4, 1, 256}, {2, 1, 80}};
  for (size_t i = 0; i < cases.size() * batches.size(); ++i) {
    const Case c = cases[i % cases.size()];
    const auto& seqs = batches[i / cases.size()];
    for (int window : {0, 5, 64, 200}) {
      int32_t n_blocks = 0;
      StepPlan plan = make_plan(seqs, 100, rng_, 16, &n_blocks);
      const int64_t T = plan.n_rows(), kvw = int64_t(c.kv) * c.hd, qw = int64_t(c.heads) * c.hd;
      // The cache holds earlier positions already: the same random contents on both sides.
      Buffer kc = random(int64_t(n_blocks) * 16, kvw), vc = random(int64_t(n_blocks) * 16, kvw);
      Buffer dkc = up(kc), dvc = up(vc);
      Buffer q = random(T, qw), k = random(T, kvw), v = random(T, kvw);
      Buffer dq = up(q), dk = up(k), dv = up(v);
      Buffer ref = cpu_.alloc(DType::kF32, T, qw), out = gpu().alloc(DType::kF32, T, qw);
      AttentionParams p{.n_heads = c.heads, .n_kv_heads = c.kv, .head_dim = c.hd,
                        .scale = 1.0f / std::sqrt(float(c.hd)), .window = window};
      cpu_.attention(ref, q, k, v, {kc, vc}, p, plan);
      gpu().begin_step(plan);
      gpu().attention(out, dq, dk, dv, {dkc, dvc}, p, plan);
      const std::string what = "heads " + std::to_string(c.heads) + "/" + std::to_string(c.kv) + " hd " +
                               std::to_string(c.hd) + " window " + std::to_string(window) + " rows " +
                               std::to_string(T);
      EXPECT_LE(rel_err(down(out), host(ref)), 1e-5) << what;
      EXPECT_EQ(down(dkc), host(kc)) << what << ": k cache";
      EXPECT_EQ(down(dvc), host(vc)) << what << ": v cache";
    }
  }
}

}  // namespace
}  // namespace kestrel::test
