// CudaOps deterministic mode: a row's result does not depend on the rest of its step.
//  - matmul: every row count takes the GEMV kernels, so a row of a 37-row step (past the 8 rows
//    where the default path switches to cuBLAS) is bit-identical to the same row alone;
//  - attention: each row's split-KV geometry comes from its own key count, so a row batched with
//    longer or shorter contexts (and a long prefill split over several launches) is bit-identical
//    to its sequence alone;
//  - whole models: twelve sequences prefilled and decoded together, with a prefill chunk mixed
//    into a decode step, give logits bit-identical (memcmp) to each sequence run alone.
// Each kernel also stays within the default path's tolerance of the CPU oracle (1e-5).
#include <cstring>

#include "engine/runner.h"
#include "gpu_test_util.h"
#include "model/loader.h"
#include "support/paths.h"

namespace kestrel::test {
namespace {

#ifdef KESTREL_HAVE_CUDA
// The largest |a - b| over n values (for failure messages).
double max_abs_diff(const float* a, const float* b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(double(a[i]) - double(b[i])));
  return m;
}

class Deterministic : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (gpu_) static_cast<CudaOps&>(gpu()).set_deterministic(true);
  }
  // Attention of a batch vs each sequence's rows alone (its own plan, the same cache blocks).
  void expect_attention_rows_alone(const std::vector<std::pair<int, int>>& seqs, int heads, int kv, int hd,
                                   int window, bool check_cpu, DType cache = DType::kF32);
};

TEST_F(Deterministic, MatmulRowsAreBitIdenticalToAloneAtAnyRowCount) {
  const int T = 37, N = 300;  // four groups of 8 rows and a tail of 5
  for (DType dt : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (int64_t K : {64, 2056, 37}) {  // 37: the unaligned (scalar) GEMV kernel
      Buffer x = random(T, K), w = random(dt, N, K, 0.05f);
      Buffer dx = up(x), dw = up(w);
      Buffer all = gpu().alloc(DType::kF32, T, N), ref = cpu_.alloc(DType::kF32, T, N);
      gpu().matmul(all, dx, dw);
      cpu_.matmul(ref, x, w);
      const std::vector<float> together = down(all);
      EXPECT_LE(rel_err(together, host(ref)), 1e-5) << dtype_name(dt) << " K=" << K;
      for (int r = 0; r < T; ++r) {
        Buffer one = gpu().alloc(DType::kF32, 1, N);
        Buffer xr = up(x.view().rows_slice(r, 1));  // a copy: the row at the start of its own buffer
        gpu().matmul(one, xr, dw);
        const std::vector<float> alone = down(one);
        ASSERT_EQ(0, std::memcmp(alone.data(), together.data() + size_t(r) * N, size_t(N) * sizeof(float)))
            << dtype_name(dt) << " K=" << K << " row " << r << ", max diff "
            << max_abs_diff(alone.data(), together.data() + size_t(r) * N, size_t(N));
      }
    }
  }
}

void Deterministic::expect_attention_rows_alone(const std::vector<std::pair<int, int>>& seqs, int heads, int kv,
                                                int hd, int window, bool check_cpu, DType cache) {
  int32_t n_blocks = 0;
  StepPlan plan = make_plan(seqs, 100, rng_, 16, &n_blocks);
  const int64_t T = plan.n_rows(), kvw = int64_t(kv) * hd, qw = int64_t(heads) * hd;
  Buffer kc = random(cache, int64_t(n_blocks) * 16, kvw), vc = random(cache, int64_t(n_blocks) * 16, kvw);
  Buffer dkc = up(kc), dvc = up(vc);
  Buffer q = random(T, qw), k = random(T, kvw), v = random(T, kvw);
  Buffer dq = up(q), dk = up(k), dv = up(v);
  AttentionParams p{.n_heads = heads, .n_kv_heads = kv, .head_dim = hd, .scale = 1.0f / std::sqrt(float(hd)),
                    .window = window};
  Buffer out = gpu().alloc(DType::kF32, T, qw);
  gpu().begin_step(plan);
  gpu().attention(out, dq, dk, dv, {dkc, dvc}, p, plan);
  const std::vector<float> together = down(out);
  const std::string what = "heads " + std::to_string(heads) + "/" + std::to_string(kv) + " hd " + std::to_string(hd) +
                           " window " + std::to_string(window) + " " + std::string(dtype_name(cache)) + " cache";
  if (check_cpu) {
    Buffer ref = cpu_.alloc(DType::kF32, T, qw);
    cpu_.attention(ref, q, k, v, {kc, vc}, p, plan);
    EXPECT_LE(rel_err(together, host(ref)), 1e-5) << what;
  }
  for (const SeqStep& s : plan.seqs) {
    StepPlan one;
    one.block_size = plan.block_size;
    const std::vector<int32_t> blocks(plan.block_tables.begin() + s.table_begin,
                                      plan.block_tables.begin() + s.table_begin + s.n_blocks);
    one.add_sequence(plan.tokens.data() + s.row_begin, s.n_tokens, s.n_past, 0, blocks, false, true);
    Buffer o = gpu().alloc(DType::kF32, s.n_tokens, qw);
    gpu().begin_step(one);
    gpu().attention(o, dq.view().rows_slice(s.row_begin, s.n_tokens), dk.view().rows_slice(s.row_begin, s.n_tokens),
                    dv.view().rows_slice(s.row_begin, s.n_tokens), {dkc, dvc}, p, one);
    const std::vector<float> alone = down(o);
    EXPECT_EQ(0, std::memcmp(alone.data(), together.data() + int64_t(s.row_begin) * qw, alone.size() * sizeof(float)))
        << what << ": sequence at n_past " << s.n_past << " with " << s.n_tokens << " rows";
  }
}

TEST_F(Deterministic, AttentionRowsAreBitIdenticalToAlone) {
  // Decode rows over short and long contexts (1 to 8 splits each) with prefill chunks mixed in.
  const std::vector<std::pair<int, int>> seqs = {{0, 40}, {300, 1}, {1000, 1}, {5, 1}, {2000, 3}, {700, 20}, {0, 1}};
  for (int window : {0, 200}) {
    expect_attention_rows_alone(seqs, 4, 2, 64, window, true);
    expect_attention_rows_alone(seqs, 8, 2, 128, window, true);
    expect_attention_rows_alone(seqs, 16, 2, 256, window, true);  // the tiled split-KV kernel
    expect_attention_rows_alone(seqs, 4, 1, 512, window, true);
    // the tensor-core kernel (BF16 cache, head_dim 256): GQA groups of 8 and 4
    expect_attention_rows_alone(seqs, 16, 2, 256, window, true, DType::kBF16);
    expect_attention_rows_alone(seqs, 16, 4, 256, window, true, DType::kBF16);
  }
}

TEST_F(Deterministic, LongPrefillSplitOverLaunchesIsBitIdenticalToAlone) {
  // 32 heads of 128 at 16k keys: 64 splits per row, ~1 MB of split results per row, so the rows
  // of the step are cut into several launches, at different rows batched and alone.
  expect_attention_rows_alone({{100, 30}, {16384, 100}, {9000, 1}}, 32, 8, 128, 0, false);
}

// A prompt of n tokens below `vocab` (salted per sequence).
std::vector<int32_t> prompt_of(int n, int64_t vocab, int salt) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back(int32_t((i * 37 + salt * 101 + 11) % vocab));
  return ids;
}

class DeterministicBatching : public Deterministic, public ::testing::WithParamInterface<const char*> {};

// Twelve sequences (prompts of 1 to 300 tokens), alone and together. Together: sequences 0-5 are
// prefilled in one step and 6-10 in another; sequence 11's prompt is prefilled 128 tokens first,
// then its last 172 tokens in the same step as the others' first decode token; then all twelve
// decode together (12 rows: past the 8 rows where the default matmul path changes). Alone: each
// sequence in a runner of its own, sequence 11's prompt in the same two pieces. Every logits row
// must be bit-identical: the prefill's last-token logits and every decode step's.
TEST_P(DeterministicBatching, LogitsAreBitIdenticalToEachSequenceAlone) {
  const std::string dir = data_path(std::string("fixtures/") + GetParam());
  LoadedModel lm = load_model(dir, gpu());
  Model& model = *lm.model;
  const int64_t V = model.config().vocab_size;
  const std::vector<int> lens = {1, 3, 7, 9, 20, 37, 64, 65, 100, 130, 200, 300};
  const size_t S = lens.size(), last = S - 1;
  constexpr int kSteps = 6, kSplit = 128;  // sequence 11's first prefill piece ends on the 64-token grid
  std::vector<std::vector<int32_t>> prompts;
  for (size_t s = 0; s < S; ++s) prompts.push_back(prompt_of(lens[s], V, int(s)));
  auto token = [&](size_t s, int i) { return int32_t((s * 7 + size_t(i) * 13 + 1) % size_t(V)); };

  // alone[s][0]: the prefill's last logits; alone[s][i + 1]: decode step i's (sequence 11: from step 1)
  std::vector<std::vector<std::vector<float>>> alone(S);
  for (size_t s = 0; s < S; ++s) {
    Runner r(model, cpu_cache_sizing(model.config(), 1, 400));
    SequenceState seq;
    r.start(seq);
    if (s == last) {
      r.step({{.seq = &seq, .tokens = std::span<const int32_t>(prompts[s]).first(kSplit), .no_logits = true}});
      alone[s].push_back(r.step({{.seq = &seq, .tokens = std::span<const int32_t>(prompts[s]).subspan(kSplit)}}));
    } else {
      alone[s].push_back(r.step({{.seq = &seq, .tokens = prompts[s]}}));
    }
    for (int i = s == last ? 1 : 0; i < kSteps; ++i) {
      const int32_t t = token(s, i);
      alone[s].push_back(r.step({{.seq = &seq, .tokens = std::span<const int32_t>(&t, 1)}}));
    }
  }

  Runner r(model, cpu_cache_sizing(model.config(), int32_t(S), 400));
  std::vector<SequenceState> seqs(S);
  for (auto& q : seqs) r.start(q);
  for (auto [begin, end] : {std::pair<size_t, size_t>{0, 6}, {6, 11}}) {
    std::vector<StepItem> items;
    for (size_t s = begin; s < end; ++s) items.push_back({.seq = &seqs[s], .tokens = prompts[s]});
    const std::vector<float> l = r.step(items);
    for (size_t s = begin; s < end; ++s)
      EXPECT_EQ(0, std::memcmp(l.data() + (s - begin) * V, alone[s][0].data(), size_t(V) * sizeof(float)))
          << GetParam() << ": prefill of sequence " << s << " (" << lens[s] << " tokens), max diff "
          << max_abs_diff(l.data() + (s - begin) * V, alone[s][0].data(), size_t(V));
  }
  r.step({{.seq = &seqs[last], .tokens = std::span<const int32_t>(prompts[last]).first(kSplit), .no_logits = true}});
  std::vector<int32_t> toks(S);
  for (int i = 0; i < kSteps; ++i) {
    std::vector<StepItem> items;
    for (size_t s = 0; s < S; ++s) {
      toks[s] = token(s, i);
      if (s == last && i == 0) {
        items.push_back({.seq = &seqs[s], .tokens = std::span<const int32_t>(prompts[s]).subspan(kSplit)});
      } else {
        items.push_back({.seq = &seqs[s], .tokens = std::span<const int32_t>(&toks[s], 1)});
      }
    }
    const std::vector<float> l = r.step(items);
    ASSERT_EQ(l.size(), S * size_t(V));
    for (size_t s = 0; s < S; ++s) {
      // sequence 11 at step i is where the others were at step i - 1 (its step 0 ends its prompt)
      const std::vector<float>& want = s == last ? alone[s][size_t(i)] : alone[s][size_t(i) + 1];
      EXPECT_EQ(0, std::memcmp(l.data() + s * V, want.data(), size_t(V) * sizeof(float)))
          << GetParam() << ": sequence " << s << " (prompt of " << lens[s] << ") at step " << i << ", max diff "
          << max_abs_diff(l.data() + s * V, want.data(), size_t(V));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Qwen, DeterministicBatching,
                         ::testing::Values("qwen3", "qwen3_moe", "qwen3_5", "qwen3_5_tied", "qwen3_5_moe",
                                           "qwen3_next"));
#endif

}  // namespace
}  // namespace kestrel::test
