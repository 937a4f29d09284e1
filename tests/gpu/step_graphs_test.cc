// Decode steps replayed from CUDA graphs (ops/step_graphs.h, Runner) against the same schedule run
// eagerly on the same model and backend: every logits row of every step must be bit-identical.
// The schedule crosses what a stale or mis-recorded graph would get wrong: batch-size buckets
// changing (3 -> 1 -> 2 -> 3), a sequence finishing and another joining the same bucket (other
// slot, other blocks), prefill steps between decode steps (one replaces the logits buffer, so
// graphs go stale and are recorded again), block tables growing and split-KV attention's split count
// changing with the longest position (every 64 keys). The graphs-on run must actually replay.
// The same in deterministic mode (StepGraphsDeterministicTest), and over batches of more than 8
// rows (StepGraphsWideTest).
#include <cstdio>
#include <cstring>
#include <span>

#include "engine/runner.h"
#include "gpu_test_util.h"
#include "model/loader.h"
#include "support/paths.h"

namespace kestrel::test {
namespace {

#ifdef KESTREL_HAVE_CUDA
std::vector<int32_t> tokens_for(int n, int64_t vocab, int salt) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back(int32_t((i * 37 + salt * 101 + 11) % vocab));
  return ids;
}

struct ScheduleResult {
  std::vector<float> logits;  // every row of every step, concatenated
  GraphStats stats;           // the runner's
};

// Greedy decode: each sequence's next token is its row's argmax of the step's logits.
ScheduleResult run_schedule(Model& model) {
  const int64_t V = model.config().vocab_size;
  ScheduleResult res;
  Runner r(model, cpu_cache_sizing(model.config(), 4, 400));
  SequenceState a, b, c, d;
  for (SequenceState* s : {&a, &b, &c}) r.start(*s);
  std::vector<int32_t> next(4, 0);  // per sequence (a, b, c, d)
  auto seq_index = [&](const SequenceState* s) { return s == &a ? 0 : s == &b ? 1 : s == &c ? 2 : 3; };
  auto take = [&](const std::vector<StepItem>& items, const std::vector<float>& l) {
    res.logits.insert(res.logits.end(), l.begin(), l.end());
    const size_t rows = l.size() / size_t(V);  // an all-logits prefill item: its last row counts
    for (size_t i = 0; i < items.size(); ++i) {
      const float* row = l.data() + (rows - items.size() + i) * size_t(V);
      next[size_t(seq_index(items[i].seq))] = int32_t(std::max_element(row, row + V) - row);
    }
  };
  auto prefill = [&](SequenceState& s, int n, int salt, bool all_logits = false) {
    const std::vector<int32_t> p = tokens_for(n, V, salt);
    const std::vector<StepItem> items{{.seq = &s, .tokens = p, .all_logits = all_logits}};
    take(items, r.step(items));
  };
  auto decode = [&](const std::vector<SequenceState*>& seqs, int steps) {
    for (int i = 0; i < steps; ++i) {
      std::vector<std::vector<int32_t>> toks;
      for (SequenceState* s : seqs) toks.push_back({next[size_t(seq_index(s))]});
      std::vector<StepItem> items;
      for (size_t j = 0; j < seqs.size(); ++j) items.push_back({.seq = seqs[j], .tokens = toks[j]});
      take(items, r.step(items));
    }
  };
  prefill(a, 120, 1);  // a decodes across positions 128 and 192: split counts change
  prefill(b, 5, 2);
  prefill(c, 1, 3);
  decode({&a, &b, &c}, 12);  // bucket 3: 2 eager, recorded, replayed
  r.finish(c);
  r.start(d);
  prefill(d, 3, 4);            // d takes c's slot
  decode({&a, &b, &d}, 6);     // bucket 3 again, another sequence
  decode({&a}, 8);             // bucket 1
  decode({&a, &d}, 5);         // bucket 2
  prefill(b, 200, 5, true);    // 200 logits rows: the logits buffer is replaced, graphs go stale
  decode({&a, &b, &d}, 60);    // bucket 3 recorded again; a passes 192
  for (SequenceState* s : {&a, &b, &d}) r.finish(*s);
  res.stats = r.graph_stats();
  return res;
}

// Decode batches past the GEMV's 8 rows (cuBLAS and the grouped MoE path inside the capture):
// twelve sequences prefilled together, decoded together, then ten of them after two finish.
ScheduleResult run_wide_schedule(Model& model) {
  const int64_t V = model.config().vocab_size;
  ScheduleResult res;
  Runner r(model, cpu_cache_sizing(model.config(), 12, 200));
  std::vector<SequenceState> seqs(12);
  std::vector<int32_t> next(seqs.size(), 0);
  auto step = [&](const std::vector<size_t>& which, const std::vector<std::vector<int32_t>>& toks) {
    std::vector<StepItem> items;
    for (size_t j = 0; j < which.size(); ++j) items.push_back({.seq = &seqs[which[j]], .tokens = toks[j]});
    const std::vector<float> l = r.step(items);
    res.logits.insert(res.logits.end(), l.begin(), l.end());
    for (size_t j = 0; j < which.size(); ++j) {
      const float* row = l.data() + j * size_t(V);
      next[which[j]] = int32_t(std::max_element(row, row + V) - row);
    }
  };
  std::vector<size_t> all;
  std::vector<std::vector<int32_t>> prompts;
  for (size_t s = 0; s < seqs.size(); ++s) {
    r.start(seqs[s]);
    all.push_back(s);
    prompts.push_back(tokens_for(int(3 + 9 * s), V, int(s) + 7));
  }
  step(all, prompts);
  auto decode = [&](const std::vector<size_t>& which, int steps) {
    for (int i = 0; i < steps; ++i) {
      std::vector<std::vector<int32_t>> toks;
      for (size_t s : which) toks.push_back({next[s]});
      step(which, toks);
    }
  };
  decode(all, 10);  // bucket 12: 2 eager, recorded, replayed
  r.finish(seqs[3]);
  r.finish(seqs[8]);
  decode({0, 1, 2, 4, 5, 6, 7, 9, 10, 11}, 6);  // bucket 10
  for (size_t s : all) r.finish(seqs[s]);
  res.stats = r.graph_stats();
  return res;
}

class StepGraphsTest : public GpuTest, public ::testing::WithParamInterface<const char*> {
 protected:
  // The schedule with graphs off, then on (deterministic mode or not on both): every logits row
  // bit-identical, and the graphs-on run replaying most decode steps.
  void check_replay(bool deterministic, bool wide = false) {
    auto& cuda = dynamic_cast<CudaOps&>(gpu());
    cuda.set_deterministic(deterministic);
    LoadedModel lm = load_model(data_path(std::string("fixtures/") + GetParam()), cuda);
    cuda.set_step_graphs(false);
    auto schedule = wide ? run_wide_schedule : run_schedule;
    const ScheduleResult eager = schedule(*lm.model);
    EXPECT_EQ(eager.stats.replayed + eager.stats.recorded, 0);
    EXPECT_NE(eager.stats.off, "");
    cuda.set_step_graphs(true);
    const ScheduleResult graphs = schedule(*lm.model);
    cuda.set_deterministic(false);
    std::printf("  %-14s%s graphs: %ld replayed, %ld recorded, %ld eager decode steps%s%s\n", GetParam(),
                deterministic ? " (deterministic)" : "", long(graphs.stats.replayed), long(graphs.stats.recorded),
                long(graphs.stats.eager), graphs.stats.failure.empty() ? "" : "; last capture failure: ",
                graphs.stats.failure.c_str());
    EXPECT_EQ(graphs.stats.off, "");
    EXPECT_EQ(graphs.stats.failure, "");
    if (wide) {
      EXPECT_GE(graphs.stats.recorded, 2);  // buckets 12 and 10
      EXPECT_GE(graphs.stats.replayed, 10);
    } else {
      EXPECT_GE(graphs.stats.recorded, 4);  // buckets 3, 1, 2 and 3 again after the long prefill
      EXPECT_GE(graphs.stats.replayed, 60);
    }
    ASSERT_EQ(graphs.logits.size(), eager.logits.size());
    size_t differ = 0, first = 0;
    for (size_t i = 0; i < eager.logits.size(); ++i) {
      if (std::memcmp(&graphs.logits[i], &eager.logits[i], sizeof(float)) != 0 && differ++ == 0) first = i;
    }
    EXPECT_EQ(differ, 0u) << GetParam() << ": " << differ << " logits differ, the first at " << first << " ("
                          << graphs.logits[first] << " vs " << eager.logits[first] << ")";
  }
};

TEST_P(StepGraphsTest, ReplayedDecodeIsBitIdenticalToEager) { check_replay(false); }

INSTANTIATE_TEST_SUITE_P(QwenLine, StepGraphsTest,
                         ::testing::Values("qwen3_5", "qwen3_5_moe", "qwen3_5_tied", "qwen3_next", "qwen3_moe",
                                           "qwen3"));
// Gemma 4: sliding-window ring caches (the fixtures' windows are crossed by the schedule), KV
// shared across layers, k = v attention, MoE.
INSTANTIATE_TEST_SUITE_P(Gemma4, StepGraphsTest,
                         ::testing::Values("gemma4_text", "gemma4_text_moe", "gemma4_text_kvshared",
                                           "gemma4_text_keqv"));

// Qwen4-Exp: hyper-connection streams, n-gram embeddings from the device-side token context
// (token_windows), QSA selection whose key-block grid covers a bucket of positions (the schedule
// crosses buckets at 66, 130 and 258 positions: the graphs are recorded again, never replayed
// past what they cover).
INSTANTIATE_TEST_SUITE_P(Qwen4Exp, StepGraphsTest, ::testing::Values("qwen4_exp"));

// Deterministic mode: a decode launch's attention grid is as deep as the bucket (a power of two)
// of its rows' det_splits, each row taking its own count on the device, and the graph holds while
// every row's keys fit that depth (the schedule crosses 256 keys: depth 1 to 2). The paged path
// (qwen3_5, qwen3_5_moe), rings and the general path (gemma4_text), selections (qwen4_exp).
class StepGraphsDeterministicTest : public StepGraphsTest {};
TEST_P(StepGraphsDeterministicTest, ReplayedDecodeIsBitIdenticalToEager) { check_replay(true); }
INSTANTIATE_TEST_SUITE_P(Deterministic, StepGraphsDeterministicTest,
                         ::testing::Values("qwen3_5", "qwen3_5_moe", "gemma4_text", "qwen4_exp"));

// Batches of 12 and 10 rows: cuBLAS's matmuls and the MoE's grouped expert kernels recorded and
// replayed (and, in deterministic mode, the GEMV kernels in row groups of 8).
class StepGraphsWideTest : public StepGraphsTest {};
TEST_P(StepGraphsWideTest, ReplayedDecodeIsBitIdenticalToEager) { check_replay(false, true); }
TEST_P(StepGraphsWideTest, ReplayedDeterministicDecodeIsBitIdenticalToEager) { check_replay(true, true); }
INSTANTIATE_TEST_SUITE_P(Wide, StepGraphsWideTest,
                         ::testing::Values("qwen3_5", "qwen3_5_moe", "gemma4_text_moe", "qwen4_exp"));

// Replayed steps queued without reading back their ids (Runner::queue_step_argmax, kestrel bench
// --queue-steps) run back to back on the device, each step's plan uploaded while the step before
// may still run: the ids of the steps read back, and of the steps after the queued ones, must be
// those of a run that reads every step (tokens fed whatever the steps pick).
TEST_P(StepGraphsTest, QueuedStepsGiveTheIdsOfStepsReadEachTime) {
  auto& cuda = dynamic_cast<CudaOps&>(gpu());
  LoadedModel lm = load_model(data_path(std::string("fixtures/") + GetParam()), cuda);
  cuda.set_step_graphs(true);
  const int64_t V = lm.config().vocab_size;
  Runner a(*lm.model, cpu_cache_sizing(lm.config(), 2, 200));
  Runner b(*lm.model, cpu_cache_sizing(lm.config(), 2, 200));
  SequenceState sa[2], sb[2];
  for (int i = 0; i < 2; ++i) {
    a.start(sa[i]);
    b.start(sb[i]);
  }
  const std::vector<int32_t> p0 = tokens_for(37, V, 1), p1 = tokens_for(9, V, 2), fed = tokens_for(80, V, 3);
  EXPECT_EQ(a.step_argmax({{.seq = &sa[0], .tokens = p0}, {.seq = &sa[1], .tokens = p1}}),
            b.step_argmax({{.seq = &sb[0], .tokens = p0}, {.seq = &sb[1], .tokens = p1}}));
  for (int step = 0; step < 40; ++step) {
    const int32_t t[2] = {fed[size_t(step)], fed[size_t(step + 40)]};
    const std::vector<int32_t> want =
        a.step_argmax({{.seq = &sa[0], .tokens = {&t[0], 1}}, {.seq = &sa[1], .tokens = {&t[1], 1}}});
    const std::vector<StepItem> items{{.seq = &sb[0], .tokens = {&t[0], 1}}, {.seq = &sb[1], .tokens = {&t[1], 1}}};
    if (step % 8 != 7) {
      b.queue_step_argmax(items);
      continue;
    }
    ASSERT_EQ(b.step_argmax(items), want) << GetParam() << ", step " << step;
  }
  EXPECT_GE(b.graph_stats().replayed, 30);
  for (int i = 0; i < 2; ++i) {
    a.finish(sa[i]);
    b.finish(sb[i]);
  }
}

// A model whose forward pass is not checked under capture (Model::graph_blocker's default) runs
// eagerly and says why.
class Unchecked final : public Model {
 public:
  explicit Unchecked(Model& inner) : Model(inner.config(), inner.ops()), inner_(inner) {}
  void forward(const StepPlan& plan, ModelCache& cache, const Tensor& logits, HiddenCapture* capture) override {
    inner_.forward(plan, cache, logits, capture);
  }

 private:
  Model& inner_;
};

TEST_F(GpuTest, StepGraphsOffForUncheckedArchitectures) {
  LoadedModel lm = load_model(data_path("fixtures/qwen3_5"), gpu());
  Unchecked model(*lm.model);
  Runner r(model, cpu_cache_sizing(lm.config(), 1, 64));
  SequenceState s;
  r.start(s);
  const std::vector<int32_t> t{1};
  for (int i = 0; i < 4; ++i) r.step({{.seq = &s, .tokens = t}});
  EXPECT_EQ(r.graph_stats().replayed + r.graph_stats().recorded, 0);
  EXPECT_EQ(r.graph_stats().eager, 4);
  EXPECT_NE(r.graph_stats().off.find("not checked under graph capture"), std::string::npos) << r.graph_stats().off;
}
#endif

}  // namespace
}  // namespace kestrel::test
