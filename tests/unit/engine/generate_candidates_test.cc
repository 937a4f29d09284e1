// generate() with GenerateOptions::sample_candidates: a sampled step brings back the row's first
// candidates of its sampling order (Runner::step_candidates) and draws the same tokens as from the
// whole rows, falling back to the whole row when a draw walks past them.
#include <gtest/gtest.h>

#include "core/error.h"
#include "engine/generate.h"
#include "engine/runner.h"
#include "engine/sampler.h"
#include "support/fixture_model.h"

namespace kestrel {
namespace {

TEST(GenerateCandidates, SameTokensAsTheWholeRows) {
  test::FixtureModel fm("qwen3_5");
  const std::vector<int32_t> prompt = {5, 17, 3, 99};
  const int n = 20;
  auto generated = [&](const SamplingParams& p, int candidates) {
    Runner runner(fm.model(), cpu_cache_sizing(fm.model().config(), 1, int64_t(prompt.size()) + n));
    GenerateOptions o;
    o.max_new_tokens = n;
    o.sampling = p;
    o.sample_candidates = candidates;
    return generate(runner, prompt, o);
  };
  std::vector<SamplingParams> kinds;
  for (uint64_t seed : {1u, 7u, 42u}) {
    SamplingParams top_p{.temperature = 0.8f, .top_p = 0.9f, .seed = seed};
    SamplingParams flat{.temperature = 3.0f, .seed = seed};  // walks far down the order: whole rows at 4
    SamplingParams top_k{.temperature = 1.2f, .top_k = 5, .seed = seed};
    SamplingParams min_p{.temperature = 1.0f, .min_p = 0.05f, .seed = seed};
    kinds.insert(kinds.end(), {top_p, flat, top_k, min_p});
  }
  int candidate_draws = 0, whole_rows = 0;
  for (const SamplingParams& p : kinds) {
    const GenerateResult whole = generated(p, 0);
    EXPECT_EQ(whole.candidate_draws, 0);
    for (int m : {1, 4, 64, 4096}) {
      const GenerateResult got = generated(p, m);
      EXPECT_EQ(got.tokens, whole.tokens) << "temperature " << p.temperature << " seed " << p.seed << " candidates "
                                          << m;
      EXPECT_EQ(got.candidate_draws, int(got.tokens.size()));  // every token: the prefill's and each decode step's
      candidate_draws += got.candidate_draws;
      whole_rows += got.whole_row_draws;
    }
  }
  EXPECT_GT(whole_rows, 0);                 // the fallback ran
  EXPECT_LT(whole_rows, candidate_draws);   // and the candidates were enough for most draws
}

TEST(GenerateCandidates, PenaltiesAndGreedyKeepTheirPaths) {
  test::FixtureModel fm("qwen3_5");
  const std::vector<int32_t> prompt = {1, 2, 3};
  Runner runner(fm.model(), cpu_cache_sizing(fm.model().config(), 1, 64));
  GenerateOptions o;
  o.max_new_tokens = 6;
  o.sample_candidates = 64;
  o.sampling = SamplingParams{.temperature = 0.7f, .presence_penalty = 1.0f, .seed = 3};
  EXPECT_EQ(generate(runner, prompt, o).candidate_draws, 0);  // penalties need the whole row
  o.sampling = SamplingParams{};                              // greedy: the argmax on the backend
  EXPECT_EQ(generate(runner, prompt, o).candidate_draws, 0);
  o.sample_candidates = 5000;
  EXPECT_THROW(generate(runner, prompt, o), Error);
  o.sample_candidates = -2;
  EXPECT_THROW(generate(runner, prompt, o), Error);
}

}  // namespace
}  // namespace kestrel
