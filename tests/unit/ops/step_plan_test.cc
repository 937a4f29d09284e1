// StepPlan: the rows whose logits a step wants, and when they are every row in order (the head
// then reads them in place instead of gathering them).
#include <gtest/gtest.h>

#include <vector>

#include "ops/step_plan.h"

namespace kestrel {
namespace {

const std::vector<int32_t> kBlocks = {0, 1, 2, 3};

TEST(StepPlan, LogitRowsAscendInRowOrder) {
  StepPlan plan;
  const int32_t prompt[] = {5, 6, 7}, one[] = {9};
  plan.add_sequence(prompt, 3, 0, 0, kBlocks, /*all_logits=*/false, /*last_logit=*/true);
  plan.add_sequence(one, 1, 10, 1, kBlocks, false, true);
  plan.add_sequence(prompt, 3, 0, 2, kBlocks, /*all_logits=*/true, true);
  EXPECT_EQ(plan.logit_rows, (std::vector<int32_t>{2, 3, 4, 5, 6}));
  EXPECT_FALSE(plan.logits_for_every_row());
}

TEST(StepPlan, LogitsForEveryRowOnlyWhenEachRowWantsOne) {
  const int32_t one[] = {9}, two[] = {1, 2};
  StepPlan decode;  // every sequence one token with its logits: a decode step
  for (int32_t s = 0; s < 4; ++s) decode.add_sequence(one, 1, 7 + s, s, kBlocks, false, true);
  EXPECT_TRUE(decode.logits_for_every_row());

  StepPlan all;  // a prompt that wants every row's logits (perplexity, quant-quality)
  all.add_sequence(two, 2, 0, 0, kBlocks, /*all_logits=*/true, true);
  EXPECT_TRUE(all.logits_for_every_row());

  StepPlan chunk;  // a prefill chunk that stops short of its prompt's end wants no logits
  chunk.add_sequence(one, 1, 3, 0, kBlocks, false, true);
  chunk.add_sequence(two, 2, 0, 1, kBlocks, false, /*last_logit=*/false);
  EXPECT_FALSE(chunk.logits_for_every_row());

  StepPlan none;  // rows and no logits at all
  none.add_sequence(two, 2, 0, 0, kBlocks, false, false);
  EXPECT_FALSE(none.logits_for_every_row());

  StepPlan empty;
  EXPECT_TRUE(empty.logits_for_every_row());  // vacuous; norm_and_head returns before asking
  decode.clear();
  EXPECT_TRUE(decode.logits_for_every_row());
}

}  // namespace
}  // namespace kestrel
