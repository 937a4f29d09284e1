// Golden: every Qwen-line fixture against what transformers computed (tests/data/fixtures).
#include <gtest/gtest.h>

#include "engine/parity.h"
#include "support/fixture_model.h"

namespace kestrel {
namespace {

class QwenGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(QwenGolden, LogitsGreedyAndHiddenStatesMatchTransformers) {
  const std::string family = GetParam();
  test::FixtureModel fm(family);
  ParityReport r = run_parity(fm.model(), test::data_path("fixtures/" + family + "/reference.safetensors"), {});
  ASSERT_EQ(r.prompts.size(), 5u);
  for (const auto& p : r.prompts) {
    SCOPED_TRACE("prompt of length " + std::to_string(p.len));
    EXPECT_LE(p.rel_err, 1e-4) << "full-prompt logits";
    EXPECT_LE(p.step_rel_err, 1e-4) << "greedy step logits";
    EXPECT_TRUE(p.greedy_match) << "greedy continuation diverged at step " << p.first_divergence
                                << " (reference top-2 gap " << p.divergence_gap << ")";
    if (p.hidden_rel_err >= 0) EXPECT_LE(p.hidden_rel_err, 1e-4) << "hidden states";
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, QwenGolden,
                         ::testing::Values("qwen3", "qwen3_moe", "qwen3_next", "qwen3_5", "qwen3_5_tied",
                                           "qwen3_5_moe"));

}  // namespace
}  // namespace kestrel
