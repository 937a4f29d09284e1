// CUDA vs CPU qsa_select (the Qwen4-Exp sparse-attention indexer): a batch of prefill chunks and
// decode rows over contexts with fewer and with many more complete blocks than the budget keeps,
// for several head counts, head sizes, ratios, budgets and RoPE pairings. The selection must be the
// same set of positions per row (ops.h leaves their order free: the CPU lists the blocks best
// first, the GPU in ascending order) and the index-key cache the same (a copy). Scores are double
// sums in a different order on each side, so only a tie within ~1e-16 could pick differently; the
// exact ties a relu makes (blocks scoring 0) are broken by the lower block on both sides.
#include <algorithm>

#include "gpu_test_util.h"

namespace kestrel::test {
namespace {

struct QsaCase {
  int heads, d, ratio, budget, rot;
  bool whole_head = false;
};

class QsaSelect : public GpuTest {
 protected:
  // zero_rows: rows whose indexer query is 0 (every block scores 0: the tie rule decides).
  void check(const QsaCase& c, const std::vector<std::pair<int, int>>& seqs, bool zero_query = false) {
    int32_t n_blocks = 0;
    StepPlan plan = make_plan(seqs, 100, rng_, 16, &n_blocks);
    const int64_t T = plan.n_rows(), cols = c.budget + c.ratio - 1;
    Buffer cache = random(int64_t(n_blocks) * 16, c.d), k = random(T, c.d), q = random(T, int64_t(c.heads) * c.d);
    Buffer k_norm = random(1, c.d, 0.2f);
    for (int i = 0; i < c.d; ++i) k_norm.view().f32()[i] += 1.0f;
    if (zero_query) {
      for (int64_t i = 0; i < q.view().numel(); ++i) q.view().f32()[i] = 0.0f;
    }
    Buffer dcache = up(cache), dk = up(k), dq = up(q), dnorm = up(k_norm);
    QsaParams p{.n_heads = c.heads, .head_dim = c.d, .budget = c.budget, .ratio = c.ratio, .eps = 1e-6f,
                .rope = {.theta = 1e4, .rotary_dim = c.rot, .freq_dim = c.whole_head ? c.d : 0,
                         .whole_head_pairs = c.whole_head}};
    Buffer sel = cpu_.alloc(DType::kI32, T, cols), dsel = gpu().alloc(DType::kI32, T, cols);
    cpu_.qsa_select(sel, q, k, k_norm, {.k = {}, .v = {}, .index_k = cache}, p, plan);
    gpu().begin_step(plan);
    gpu().qsa_select(dsel, dq, dk, dnorm, {.k = {}, .v = {}, .index_k = dcache}, p, plan);
    std::vector<int32_t> got(size_t(T * cols));
    gpu().to_host(dsel, got.data());
    const std::string what = "heads " + std::to_string(c.heads) + " d " + std::to_string(c.d) + " ratio " +
                             std::to_string(c.ratio) + " budget " + std::to_string(c.budget) + " rot " +
                             std::to_string(c.rot) + (c.whole_head ? " whole-head" : "") +
                             (zero_query ? " zero query" : "");
    for (int64_t r = 0; r < T; ++r) {
      std::vector<int32_t> a(got.begin() + r * cols, got.begin() + (r + 1) * cols);
      std::vector<int32_t> b(sel.view().as<int32_t>() + r * cols, sel.view().as<int32_t>() + (r + 1) * cols);
      std::sort(a.begin(), a.end());
      std::sort(b.begin(), b.end());
      ASSERT_EQ(a, b) << what << ": row " << r << " at position " << plan.positions[size_t(r)];
    }
    EXPECT_EQ(down(dcache), host(cache)) << what << ": index-key cache";
  }
};

const std::vector<std::pair<int, int>> kSeqs = {{0, 40}, {3, 1}, {100, 1}, {60, 9}, {0, 1}, {1000, 1}, {250, 30}};

TEST_F(QsaSelect, MatchesCpu) {
  for (QsaCase c : {QsaCase{2, 32, 4, 16, 16}, QsaCase{4, 64, 4, 64, 32}, QsaCase{1, 128, 8, 64, 64},
                    QsaCase{8, 128, 16, 256, 0}, QsaCase{2, 64, 4, 16, 16, true}, QsaCase{3, 96, 1, 8, 32}}) {
    check(c, kSeqs);
  }
}

TEST_F(QsaSelect, TiesGoToTheLowerBlock) {
  check({2, 32, 4, 16, 16}, kSeqs, /*zero_query=*/true);
  check({4, 64, 8, 64, 32}, kSeqs, /*zero_query=*/true);
}

}  // namespace
}  // namespace kestrel::test
