// Argmax on the backend: the op agrees with the sampler's host argmax (first of ties, NaN never
// chosen over a number), Runner::step_argmax returns what greedy sampling of step() returns, and
// steps queued without their ids (queue_step_argmax) leave the sequences where step_argmax does.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "backend/cpu/cpu_ops.h"
#include "engine/generate.h"
#include "engine/runner.h"
#include "engine/sampler.h"
#include "support/fixture_model.h"

namespace kestrel {
namespace {

TEST(Argmax, OpMatchesTheSamplersArgmaxOnTiesNanAndInfinities) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::vector<std::vector<float>> rows = {
      {1, 3, 3, 2},           // tie: the first
      {nan, 1, 5, 5},         // NaN first: a number wins
      {2, nan, 7, nan},       // NaN in between
      {nan, nan, nan, nan},   // nothing else: 0
      {-inf, -inf, -inf, -inf},
      {-inf, -3, inf, inf},
      {0, -0.0f, 0, 0},       // -0 == 0: the first
  };
  CpuOps ops;
  Buffer x = ops.alloc(DType::kF32, int64_t(rows.size()), 4), ids = ops.alloc(DType::kI32, int64_t(rows.size()), 1);
  for (size_t r = 0; r < rows.size(); ++r)
    std::copy(rows[r].begin(), rows[r].end(), x.view().f32() + r * 4);
  ops.argmax(ids, x);
  const std::vector<int32_t> want = {1, 2, 2, 0, 0, 2, 0};
  for (size_t r = 0; r < rows.size(); ++r) {
    EXPECT_EQ(static_cast<int32_t*>(ids.view().data)[r], want[r]) << "row " << r;
    EXPECT_EQ(argmax(rows[r].data(), 4), want[r]) << "host, row " << r;
  }
}

// Two runners over the qwen3_5_moe fixture, each with two started sequences, and a prompt.
struct TwoRunners {
  test::FixtureModel fm{"qwen3_5_moe"};
  std::vector<int32_t> prompt = test::reference_prompt("qwen3_5_moe", 3);
  Runner a{fm.model(), cpu_cache_sizing(fm.model().config(), 2, 256)};
  Runner b{fm.model(), cpu_cache_sizing(fm.model().config(), 2, 256)};
  SequenceState sa[2], sb[2];
  TwoRunners() {
    for (int i = 0; i < 2; ++i) {
      a.start(sa[i]);
      b.start(sb[i]);
    }
  }
};

TEST(Argmax, StepArgmaxIsGreedySamplingOfStep) {
  TwoRunners r;
  auto& [fm, prompt, a, b, sa, sb] = r;
  const int64_t V = fm.model().config().vocab_size;
  std::vector<int32_t> next[2] = {{}, {}};
  std::vector<int32_t> p0(prompt.begin(), prompt.begin() + 60), p1(prompt.begin() + 10, prompt.end());
  const std::vector<float>& l = a.step({{.seq = &sa[0], .tokens = p0}, {.seq = &sa[1], .tokens = p1}});
  const std::vector<int32_t> host = {argmax(l.data(), V), argmax(l.data() + V, V)};
  const std::vector<int32_t>& dev = b.step_argmax({{.seq = &sb[0], .tokens = p0}, {.seq = &sb[1], .tokens = p1}});
  EXPECT_EQ(dev, host);
  int32_t t[2] = {host[0], host[1]};
  for (int step = 0; step < 6; ++step) {
    const auto& ll = a.step({{.seq = &sa[0], .tokens = {&t[0], 1}}, {.seq = &sa[1], .tokens = {&t[1], 1}}});
    const int32_t h0 = argmax(ll.data(), V), h1 = argmax(ll.data() + V, V);
    const auto& d = b.step_argmax({{.seq = &sb[0], .tokens = {&t[0], 1}}, {.seq = &sb[1], .tokens = {&t[1], 1}}});
    ASSERT_EQ(d, (std::vector<int32_t>{h0, h1})) << "step " << step;
    t[0] = h0;
    t[1] = h1;
  }
}

// Tokens fed whatever the steps pick, so that a run reading every step's ids and a run queuing
// most of them must agree: the ids of each step read, and the caches (later steps' ids) after.
TEST(Argmax, QueuedStepsLeaveTheSequencesWhereStepArgmaxDoes) {
  TwoRunners r;
  auto& [fm, prompt, a, b, sa, sb] = r;
  std::vector<int32_t> p0(prompt.begin(), prompt.begin() + 40), p1(prompt.begin() + 7, prompt.begin() + 30);
  EXPECT_EQ(a.step_argmax({{.seq = &sa[0], .tokens = p0}, {.seq = &sa[1], .tokens = p1}}),
            b.step_argmax({{.seq = &sb[0], .tokens = p0}, {.seq = &sb[1], .tokens = p1}}));
  for (int step = 0; step < 12; ++step) {
    const int32_t t[2] = {prompt[size_t(step)], prompt[size_t(step + 20)]};
    const std::vector<int32_t> want =
        a.step_argmax({{.seq = &sa[0], .tokens = {&t[0], 1}}, {.seq = &sa[1], .tokens = {&t[1], 1}}});
    const std::vector<StepItem> items{{.seq = &sb[0], .tokens = {&t[0], 1}}, {.seq = &sb[1], .tokens = {&t[1], 1}}};
    if (step % 4 != 3) {
      b.queue_step_argmax(items);  // three of every four steps queued
      continue;
    }
    ASSERT_EQ(b.step_argmax(items), want) << "step " << step;
  }
  for (int i = 0; i < 2; ++i) EXPECT_EQ(sa[i].n_cached, sb[i].n_cached);
}

}  // namespace
}  // namespace kestrel
