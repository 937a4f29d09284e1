// generate() gives the sampler the prompt and the tokens generated so far, so the repetition,
// presence and frequency penalties act in `kestrel run` as they do in the server.
#include <gtest/gtest.h>

#include <algorithm>

#include "engine/generate.h"
#include "engine/runner.h"
#include "engine/sampler.h"
#include "support/fixture_model.h"

namespace kestrel {
namespace {

// The same decode written out: step, sample with the whole history, feed the token back.
std::vector<int32_t> by_hand(Model& model, const std::vector<int32_t>& prompt, const SamplingParams& p, int n) {
  Runner runner(model, cpu_cache_sizing(model.config(), 1, int64_t(prompt.size()) + n));
  SequenceState seq;
  runner.start(seq);
  const int64_t V = model.config().vocab_size;
  Sampler sampler(p);
  std::vector<int32_t> out;
  const std::vector<float>* l = &runner.step({{.seq = &seq, .tokens = prompt}});
  for (int i = 0; i < n; ++i) {
    const int32_t t = sampler.sample(l->data(), V, prompt, out);
    out.push_back(t);
    if (i + 1 < n) l = &runner.step({{.seq = &seq, .tokens = {&out.back(), 1}}});
  }
  runner.finish(seq);
  return out;
}

TEST(GeneratePenalties, RunGivesTheSamplerTheHistory) {
  test::FixtureModel fm("qwen3_5");
  const std::vector<int32_t> prompt = {1, 2, 3};
  const int n = 24;
  auto generated = [&](const SamplingParams& p) {
    Runner runner(fm.model(), cpu_cache_sizing(fm.model().config(), 1, int64_t(prompt.size()) + n));
    GenerateOptions o;
    o.max_new_tokens = n;
    o.sampling = p;
    return generate(runner, prompt, o).tokens;
  };
  const std::vector<int32_t> greedy = generated(SamplingParams{});
  // The fixture's greedy continuation repeats a token, so the penalties have something to change.
  std::vector<int32_t> sorted = greedy;
  std::sort(sorted.begin(), sorted.end());
  ASSERT_NE(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end());
  SamplingParams presence;
  presence.presence_penalty = 2.0f;
  SamplingParams repetition;
  repetition.repetition_penalty = 10.0f;
  SamplingParams sampled;  // sampling with penalties and a seed
  sampled.temperature = 0.8f;
  sampled.top_p = 0.9f;
  sampled.frequency_penalty = 1.0f;
  sampled.seed = 11;
  for (const SamplingParams& p : {presence, repetition, sampled}) {
    const std::vector<int32_t> got = generated(p);
    EXPECT_EQ(got, by_hand(fm.model(), prompt, p, n));
  }
  EXPECT_NE(generated(presence), greedy);
}

}  // namespace
}  // namespace kestrel
