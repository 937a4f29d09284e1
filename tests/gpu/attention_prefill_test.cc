// The tiled (flash) prefill attention kernel (src/backend/cuda/attention_prefill.cu), taken by
// steps holding a sequence with 64 or more new rows, against the CPU oracle and against itself,
// at both of its precisions; and with kExact, the F32 split-KV kernel instead.
//
// Tolerances vs the F32 oracle (relative RMS error of the output; a masking or indexing bug
// gives errors of order 1):
// - kBf16: q, k, v and the softmax weights rounded to BF16 (relative error <= 2^-8) before the
//   tensor-core products, F32 accumulation. With N(0, 1) inputs the scores (q.k / sqrt(hd) ~
//   N(0, 1)) carry an absolute error of a few 2^-9, so each weight and each value term is off by
//   ~2^-9 relative, errors that partly average out over the keys: expected near 3e-3, bound 1e-2.
// - kBf16x3 (the default): each operand x as hi = bf16(x) plus lo = bf16(x - hi), |x - hi - lo|
//   <= 2^-16 |x|, and a product as a_lo b_hi + a_hi b_lo + a_hi b_hi, which misses a_lo b_lo
//   (<= 2^-16 |a b|): <= 3 * 2^-16 ~ 4.6e-5 relative per product term, worst case, and the same
//   averaging as above brings the output near 2^-16 ~ 1.5e-5; bound 1e-4. Sharp softmaxes
//   (scores of tens) turn the scores' absolute error (~2^-16 * tens) into the weights' relative
//   error: bound 1e-3 there (kBf16: 3e-2 by the same scaling of its 1e-2).
// The split-KV kernel keeps 1e-5 (attention_test.cc).
//
// Chunk invariance: a row's result depends only on its position, its q and the cache (the key
// tiles sit on an absolute grid, a fully masked tile leaves a row bit-identical, rows never mix
// in the mma), so a prefill split over steps at any point gives bit-identical rows.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>

#include "gpu_test_util.h"
#ifdef KESTREL_HAVE_CUDA
#include "backend/cuda/attention_prefill.h"
#endif

namespace kestrel::test {
namespace {

// MatmulPrecision and set_matmul_precision belong to the CUDA backend; without it these tests are
// not built (the others of kestrel_gpu_tests report the skip).
#ifdef KESTREL_HAVE_CUDA

struct Shape { int heads, kv, hd; };

// The tiled kernel at a matmul precision: kBf16 (single BF16 products) or kBf16x3 (the default:
// hi/lo split products).
class AttentionPrefill : public GpuTest, public ::testing::WithParamInterface<MatmulPrecision> {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    const char* env = std::getenv("KESTREL_CUDA_TILED_ATTENTION");
    if (env && std::strcmp(env, "0") == 0) GTEST_SKIP() << "KESTREL_CUDA_TILED_ATTENTION=0 turns the kernel off";
    static_cast<CudaOps&>(gpu()).set_matmul_precision(GetParam());
  }
  bool split() const { return GetParam() != MatmulPrecision::kBf16; }

  // One sequence's n-token prefill (with a shape of 8/2 heads of 256) in steps cut at `cuts`; the
  // 100-row other sequence joins the step starting at `with_other` (or never: -1). Returns the n
  // rows' outputs.
  std::vector<float> prefill_in_pieces(int n, int window, const std::vector<int>& cuts,
                                       int with_other, uint32_t seed) {
    const Shape c{8, 2, 256};
    const int bs = 16, nb = (n + bs - 1) / bs;
    const int64_t kvw = int64_t(c.kv) * c.hd, qw = int64_t(c.heads) * c.hd;
    std::vector<int32_t> blocks(static_cast<size_t>(nb)), other_blocks(8);
    std::iota(blocks.begin(), blocks.end(), 0);
    std::mt19937 rng(seed);  // the same inputs (and table) for every cut
    std::shuffle(blocks.begin(), blocks.end(), rng);  // a scrambled table
    for (int i = 0; i < 8; ++i) other_blocks[size_t(i)] = nb + i;
    auto random_host = [&](int64_t rows, int64_t cols) {
      std::normal_distribution<float> nd(0.0f, 1.0f);
      std::vector<float> v(size_t(rows * cols));
      for (float& x : v) x = nd(rng);
      return v;
    };
    const std::vector<float> q = random_host(n, qw), k = random_host(n, kvw), v = random_host(n, kvw);
    const std::vector<float> oq = random_host(100, qw), ok = random_host(100, kvw), ov = random_host(100, kvw);
    AttentionParams p{.n_heads = c.heads, .n_kv_heads = c.kv, .head_dim = c.hd,
                      .scale = 1.0f / std::sqrt(float(c.hd)), .window = window};
    Buffer kc = gpu().alloc(DType::kF32, int64_t(nb + 8) * bs, kvw), vc = gpu().alloc(DType::kF32, int64_t(nb + 8) * bs, kvw);
    std::vector<float> result(size_t(n) * size_t(qw));
    int begin = 0;
    for (size_t i = 0; i <= cuts.size(); ++i) {
      const int end = i < cuts.size() ? cuts[i] : n, len = end - begin;
      const bool other = begin == with_other;
      StepPlan plan;
      std::vector<int32_t> toks(size_t(len) + 100, 1);
      plan.add_sequence(toks.data(), len, begin, 0, blocks, false, true);
      if (other) plan.add_sequence(toks.data(), 100, 0, 1, other_blocks, false, true);
      const int64_t T = plan.n_rows();
      auto upload = [&](const std::vector<float>& mine, const std::vector<float>& theirs, int64_t width) {
        Buffer h = host_buffer(DType::kF32, T, width);
        std::memcpy(h.view().f32(), mine.data() + int64_t(begin) * width, size_t(len * width) * sizeof(float));
        if (other) std::memcpy(h.view().f32() + len * width, theirs.data(), size_t(100 * width) * sizeof(float));
        return up(h);
      };
      Buffer dq = upload(q, oq, qw), dk = upload(k, ok, kvw), dv = upload(v, ov, kvw);
      Buffer out = gpu().alloc(DType::kF32, T, qw);
      gpu().begin_step(plan);
      gpu().attention(out, dq, dk, dv, {kc, vc}, p, plan);
      const std::vector<float> o = down(out);
      std::copy(o.begin(), o.begin() + int64_t(len) * qw, result.begin() + int64_t(begin) * qw);
      begin = end;
    }
    return result;
  }
};

std::string describe(const Shape& c, int window, int64_t rows) {
  return "heads " + std::to_string(c.heads) + "/" + std::to_string(c.kv) + " hd " + std::to_string(c.hd) +
         " window " + std::to_string(window) + " rows " + std::to_string(rows);
}

TEST_P(AttentionPrefill, VsCpu) {
  const double bound = split() ? 1e-4 : 1e-2;
  double worst = 0;
  // (cached past, new rows): lengths off the 64-tile, cached contexts on and off the grid, decode
  // rows and short chunks mixed into the long chunk's step, and a step of one long chunk only.
  const std::vector<std::vector<std::pair<int, int>>> batches = {
      {{0, 200}, {37, 130}, {500, 1}, {70, 64}, {3, 9}}, {{129, 77}}, {{0, 64}, {1000, 1}}};
  const std::vector<Shape> shapes = {{16, 4, 256}, {8, 8, 128}, {8, 1, 128}, {4, 2, 64}, {6, 3, 256}};
  for (const Shape& c : shapes) {
    for (const auto& seqs : batches) {
      for (int window : {0, 50, 100, 1024}) {
        AttentionParams p{.n_heads = c.heads, .n_kv_heads = c.kv, .head_dim = c.hd,
                          .scale = 1.0f / std::sqrt(float(c.hd)), .window = window};
        const AttentionStep s = attention_step(seqs, p);
        const std::string what = describe(c, window, s.rows);
        const double err = rel_err(s.gpu, s.cpu);
        worst = std::max(worst, err);
        EXPECT_LE(err, bound) << what;
        EXPECT_EQ(s.k_gpu, s.k_cpu) << what << ": k cache";
        EXPECT_EQ(s.v_gpu, s.v_cpu) << what << ": v cache";
      }
    }
  }
  std::printf("ATTENTION_PREFILL %s worst rel_err %.3g (bound %.0e)\n", matmul_precision_name(GetParam()), worst, bound);
}

// Sharp softmaxes (scores of tens): the online max and rescaling must hold up, not just averages.
TEST_P(AttentionPrefill, SharpScores) {
  const Shape c{8, 2, 128};
  AttentionParams p{.n_heads = c.heads, .n_kv_heads = c.kv, .head_dim = c.hd, .scale = 1.0f / std::sqrt(float(c.hd))};
  const AttentionStep s = attention_step({{20, 300}, {0, 70}}, p, 4.0f);
  const double err = rel_err(s.gpu, s.cpu);
  EXPECT_LE(err, split() ? 1e-3 : 3e-2);
  std::printf("ATTENTION_PREFILL %s sharp rel_err %.3g\n", matmul_precision_name(GetParam()), err);
}

// A 320-token prefill in one step, and split over steps at other points (each piece of at least
// 64 rows, so every step takes the tiled kernel; some splits batch the pieces with another
// sequence): every row bit-identical.
TEST_P(AttentionPrefill, ChunkInvariance) {
  for (int window : {0, 100}) {
    auto run = [&](const std::vector<int>& cuts, int with_other) {
      return prefill_in_pieces(320, window, cuts, with_other, 7);
    };
    const std::vector<float> whole = run({}, -1);
    EXPECT_TRUE(whole == run({64, 192}, -1)) << "window " << window << ": split at 64, 192";
    EXPECT_TRUE(whole == run({100}, 100)) << "window " << window << ": split at 100, batched";
    EXPECT_TRUE(whole == run({70, 150, 250}, 0)) << "window " << window << ": split at 70, 150, 250, batched";
  }
}

// Past 2048 keys a row's keys span two segments of the absolute key grid (kSegKeys), computed
// by different blocks and folded: pieces that straddle the boundary, start past it or end
// before it give the same rows as one 2240-token step, which itself matches runs whose fold is
// spread over one launch per segment and whose sequences get a launch each (the partial-results
// and BF16-copy budgets cut to nothing).
TEST_P(AttentionPrefill, ChunkInvarianceAcrossSegments) {
  for (int window : {0, 1500}) {
    auto run = [&](const std::vector<int>& cuts, int with_other) {
      return prefill_in_pieces(2240, window, cuts, with_other, 11);
    };
    const std::vector<float> whole = run({}, -1);
    EXPECT_TRUE(whole == run({1984, 2112}, -1)) << "window " << window << ": split at 1984, 2112";
    EXPECT_TRUE(whole == run({2000}, 2000)) << "window " << window << ": split at 2000, batched";
    EXPECT_TRUE(whole == run({1000, 2048}, 1000)) << "window " << window << ": split at 1000, 2048, batched";
    cuda::set_attention_prefill_budgets(1, 1);
    const std::vector<float> per_segment = run({}, -1);
    const std::vector<float> per_sequence = run({2000}, 2000);
    cuda::set_attention_prefill_budgets(0, 0);
    EXPECT_TRUE(whole == per_segment) << "window " << window << ": one launch per segment";
    EXPECT_TRUE(whole == per_sequence) << "window " << window << ": one launch per segment and sequence, batched";
  }
}

// Long pasts (rows whose keys cross segment boundaries, up to three segments) and decode rows
// beside them, against the CPU oracle.
TEST_P(AttentionPrefill, LongContextVsCpu) {
  const double bound = split() ? 1e-4 : 1e-2;
  double worst = 0;
  for (const Shape& c : std::vector<Shape>{{16, 4, 256}, {8, 8, 128}, {4, 1, 64}}) {
    for (int window : {0, 1024, 3000}) {
      AttentionParams p{.n_heads = c.heads, .n_kv_heads = c.kv, .head_dim = c.hd,
                        .scale = 1.0f / std::sqrt(float(c.hd)), .window = window};
      const AttentionStep s = attention_step({{1990, 80}, {4100, 70}, {5000, 1}}, p);
      const std::string what = describe(c, window, s.rows);
      const double err = rel_err(s.gpu, s.cpu);
      worst = std::max(worst, err);
      EXPECT_LE(err, bound) << what;
    }
  }
  std::printf("ATTENTION_PREFILL %s long-context worst rel_err %.3g (bound %.0e)\n", matmul_precision_name(GetParam()),
              worst, bound);
}

INSTANTIATE_TEST_SUITE_P(Precisions, AttentionPrefill,
                         ::testing::Values(MatmulPrecision::kBf16, MatmulPrecision::kBf16x3),
                         [](const ::testing::TestParamInfo<MatmulPrecision>& i) {
                           return i.param == MatmulPrecision::kBf16 ? std::string("Bf16") : std::string("Bf16x3");
                         });

// With kExact a long prefill chunk keeps the F32 split-KV kernel: F32-level agreement (1e-5, as
// attention_test.cc), which neither tiled variant reaches.
TEST_F(GpuTest, AttentionPrefillExactPrecisionStaysF32) {
  const char* env = std::getenv("KESTREL_CUDA_TILED_ATTENTION");
  if (env && std::strcmp(env, "1") == 0) GTEST_SKIP() << "KESTREL_CUDA_TILED_ATTENTION=1 forces the tiled kernel";
  static_cast<CudaOps&>(gpu()).set_matmul_precision(MatmulPrecision::kExact);
  const Shape c{8, 2, 128};
  AttentionParams p{.n_heads = c.heads, .n_kv_heads = c.kv, .head_dim = c.hd, .scale = 1.0f / std::sqrt(float(c.hd))};
  const AttentionStep s = attention_step({{30, 200}, {0, 1}}, p);
  EXPECT_LE(rel_err(s.gpu, s.cpu), 1e-5);
}
#endif

}  // namespace
}  // namespace kestrel::test
