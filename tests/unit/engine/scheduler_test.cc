// Continuous batching on the CPU backend with fixture models: results equal decoding alone,
// seeded sampling is batch-independent, preemption and cancellation free what they held, and
// the prefix cache reuses KV blocks and recurrent-state checkpoints without changing outputs.
#include <gtest/gtest.h>

#include <cstring>

#include "engine/generate.h"
#include "engine/scheduler.h"
#include "support/fixture_model.h"
#include "support/sampled_requests.h"

namespace kestrel {
namespace {

std::vector<int32_t> run_to_end(Scheduler& sched, const std::shared_ptr<Request>& req, FinishReason* why = nullptr) {
  std::vector<TokenOut> out;
  FinishReason f = FinishReason::kNone;
  for (int guard = 0; guard < 100000 && f == FinishReason::kNone; ++guard) {
    sched.step();
    f = req->wait(out, std::chrono::milliseconds(0));
  }
  if (why) *why = f;
  std::vector<int32_t> toks;
  for (auto& t : out) toks.push_back(t.token);
  return toks;
}

using test::decode_alone;

std::vector<std::vector<int32_t>> prompts_of(const std::string& family) {
  std::vector<std::vector<int32_t>> ps;
  for (int p = 0; p < 5; ++p) ps.push_back(test::reference_prompt(family, p));
  return ps;
}

CacheSizing blocks(int32_t n) { return {.n_blocks = n, .block_size = 16, .n_slots = 0}; }

class SchedulerTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SchedulerTest, ConcurrentGreedyRequestsMatchDecodingAlone) {
  test::FixtureModel fm(GetParam());
  Scheduler sched(fm.model(), blocks(256), {.max_running = 8, .max_step_tokens = 96, .prefill_chunk = 64});
  auto ps = prompts_of(GetParam());
  std::vector<std::shared_ptr<Request>> reqs;
  for (auto& p : ps) reqs.push_back(sched.submit(p, {.max_tokens = 8, .ignore_eos = true}));
  std::vector<std::vector<TokenOut>> outs(ps.size());
  for (int guard = 0; guard < 10000 && !sched.idle(); ++guard) sched.step();
  for (size_t i = 0; i < ps.size(); ++i) {
    EXPECT_EQ(reqs[i]->wait(outs[i], std::chrono::milliseconds(0)), FinishReason::kLength);
    std::vector<int32_t> got;
    for (auto& t : outs[i]) got.push_back(t.token);
    EXPECT_EQ(got, decode_alone(fm.model(), ps[i], 8)) << "prompt " << i;
  }
}

TEST_P(SchedulerTest, SeededSamplingIsTheSameAloneOrBatched) {
  test::FixtureModel fm(GetParam());
  auto ps = prompts_of(GetParam());
  SamplingParams sp{.temperature = 0.9f, .top_k = 50, .top_p = 0.95f, .min_p = 0.01f, .seed = 42};
  std::vector<std::vector<int32_t>> solo;
  for (auto& p : ps) {
    Scheduler one(fm.model(), blocks(64), {.max_running = 1});
    solo.push_back(run_to_end(one, one.submit(p, {.max_tokens = 10, .sampling = sp, .ignore_eos = true})));
  }
  Scheduler sched(fm.model(), blocks(256), {.max_running = 8, .max_step_tokens = 64, .prefill_chunk = 32});
  std::vector<std::shared_ptr<Request>> reqs;
  for (auto& p : ps) reqs.push_back(sched.submit(p, {.max_tokens = 10, .sampling = sp, .ignore_eos = true}));
  for (int guard = 0; guard < 10000 && !sched.idle(); ++guard) sched.step();
  for (size_t i = 0; i < ps.size(); ++i) {
    std::vector<TokenOut> out;
    reqs[i]->wait(out, std::chrono::milliseconds(0));
    std::vector<int32_t> got;
    for (auto& t : out) got.push_back(t.token);
    EXPECT_EQ(got, solo[i]) << "prompt " << i;
  }
}

// Rows reduced to their first candidates on the backend (forced on the CPU here; by default only
// a device does it) draw the same tokens as the whole rows: seeded samplers of several kinds,
// greedy rows beside them, and few enough candidates (4) that some walks need the whole row.
TEST_P(SchedulerTest, SampleCandidatesDrawWhatTheWholeRowsDraw) {
  test::FixtureModel fm(GetParam());
  auto ps = prompts_of(GetParam());
  auto run = [&](int32_t candidates) {
    Scheduler sched(fm.model(), blocks(256), {.max_running = 8, .max_step_tokens = 64, .prefill_chunk = 32,
                                             .sample_candidates = candidates});
    auto got = test::sample_to_completion(sched, ps, 12);
    const SchedulerMetrics m = sched.metrics();
    if (candidates == 0) {
      EXPECT_EQ(m.candidate_rows, 0u);
    } else {
      EXPECT_GT(m.candidate_rows, m.candidate_whole_rows);
    }
    if (candidates == 4) {
      EXPECT_GT(m.candidate_whole_rows, 0u);  // the fallback ran
    }
    return got;
  };
  const auto whole = run(0);
  EXPECT_EQ(run(4), whole);
  EXPECT_EQ(run(1024), whole);
}

TEST_P(SchedulerTest, PreemptsTheNewestWhenTheCacheRunsOutAndStillFinishesEveryone) {
  test::FixtureModel fm(GetParam());
  auto ps = prompts_of(GetParam());
  // 34 blocks of 16: the 5 prompts (1, 7, 37, 100, 300 tokens) are admitted (31 blocks), but
  // with 24 new tokens each they need 37, so someone is preempted and recomputed.
  Scheduler sched(fm.model(), blocks(34), {.max_running = 5, .max_step_tokens = 512, .prefill_chunk = 512,
                                           .prefix_cache = false});
  std::vector<std::shared_ptr<Request>> reqs;
  for (auto& p : ps) reqs.push_back(sched.submit(p, {.max_tokens = 24, .ignore_eos = true}));
  for (int guard = 0; guard < 10000 && !sched.idle(); ++guard) sched.step();
  for (size_t i = 0; i < ps.size(); ++i) {
    std::vector<TokenOut> out;
    EXPECT_EQ(reqs[i]->wait(out, std::chrono::milliseconds(0)), FinishReason::kLength) << reqs[i]->error();
    EXPECT_EQ(out.size(), 24u);
  }
  auto m = sched.metrics();
  EXPECT_GT(m.preemptions, 0u);
  EXPECT_EQ(m.blocks_free, m.blocks_total);
}

TEST_P(SchedulerTest, PrefixCacheReusesAndDoesNotChangeOutputs) {
  test::FixtureModel fm(GetParam());
  const auto base = test::reference_prompt(GetParam(), 4);  // 300 tokens
  std::vector<int32_t> second(base.begin(), base.begin() + 280);
  for (int i = 0; i < 10; ++i) second.push_back(int32_t((i * 37) % 500));
  Scheduler sched(fm.model(), blocks(128), {.max_running = 4, .prefill_chunk = 128, .checkpoint_interval = 128});
  run_to_end(sched, sched.submit(base, {.max_tokens = 4, .ignore_eos = true}));
  auto req = sched.submit(second, {.max_tokens = 8, .ignore_eos = true});
  auto got = run_to_end(sched, req);
  // Attention-only models reuse every full block up to 280 (272 tokens, 17 blocks); models with
  // per-sequence state (DeltaNet, sliding-window rings) resume from the last state checkpoint (256).
  const bool hybrid = fm.model().config().has_sequence_state();
  EXPECT_EQ(req->cached_tokens(), hybrid ? 256 : 272);
  EXPECT_EQ(got, decode_alone(fm.model(), second, 8));
  if (hybrid) {
    EXPECT_NE(req->prefix_note().find("checkpoint"), std::string::npos) << req->prefix_note();
  }
  EXPECT_GE(sched.metrics().prefix_hits, 1u);
}

TEST_P(SchedulerTest, CancelledRequestsFreeTheirBlocksAndSlots) {
  test::FixtureModel fm(GetParam());
  auto ps = prompts_of(GetParam());
  Scheduler sched(fm.model(), blocks(256), {.max_running = 8, .prefill_chunk = 64, .prefix_cache = false});
  std::vector<std::shared_ptr<Request>> reqs;
  for (int i = 0; i < 20; ++i) reqs.push_back(sched.submit(ps[size_t(i % 5)], {.max_tokens = 1000, .ignore_eos = true}));
  for (int s = 0; s < 12; ++s) sched.step();
  for (auto& r : reqs) r->cancel();
  sched.step();
  for (auto& r : reqs) {
    std::vector<TokenOut> out;
    EXPECT_EQ(r->wait(out, std::chrono::milliseconds(0)), FinishReason::kCancelled);
  }
  auto m = sched.metrics();
  EXPECT_EQ(m.blocks_free, m.blocks_total);
  EXPECT_EQ(m.slots_free, m.slots_total);
  EXPECT_EQ(m.requests_cancelled, 20u);
}

TEST_P(SchedulerTest, RefusesRequestsThatCanNeverRun) {
  test::FixtureModel fm(GetParam());
  Scheduler sched(fm.model(), blocks(8), {.max_running = 2});
  EXPECT_THROW(sched.submit({}, {}), Error);
  EXPECT_THROW(sched.submit({1, 2, 100000}, {}), Error);
  EXPECT_THROW(sched.submit(std::vector<int32_t>(200, 1), {.max_tokens = 1}), Error);  // > 128 tokens of cache
}

std::vector<TokenOut> outputs_to_end(Scheduler& sched, const std::shared_ptr<Request>& req) {
  std::vector<TokenOut> out;
  FinishReason f = FinishReason::kNone;
  for (int guard = 0; guard < 100000 && f == FinishReason::kNone; ++guard) {
    sched.step();
    f = req->wait(out, std::chrono::milliseconds(0));
  }
  EXPECT_EQ(f, FinishReason::kLength) << req->error();
  return out;
}

// Same tokens, bit-identical logprob and top logprobs.
void expect_same_outputs(const std::vector<TokenOut>& got, const std::vector<TokenOut>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t t = 0; t < got.size(); ++t) {
    EXPECT_EQ(got[t].token, want[t].token) << what << " token " << t;
    EXPECT_EQ(0, std::memcmp(&got[t].logprob, &want[t].logprob, sizeof(float)))
        << what << " token " << t << ": logprob " << got[t].logprob << " vs " << want[t].logprob;
    EXPECT_EQ(got[t].top, want[t].top) << what << " token " << t;
  }
}

// Deterministic mode: every token's logprob and top logprobs (the logits through a log-softmax)
// are bit-identical to the request running alone, although the batched runs cut prompts by
// whatever budget the others leave (off the 64-token grid where the DeltaNet state would be
// rounded differently) or preempt and recompute sequences.
TEST_P(SchedulerTest, DeterministicModeLogprobsAreBitIdenticalToRunningAlone) {
  test::FixtureModel fm(GetParam());
  auto ps = prompts_of(GetParam());  // 1, 7, 37, 100 and 300 tokens
  const RequestOptions ro{.max_tokens = 24, .ignore_eos = true, .top_logprobs = 4};
  std::vector<std::vector<TokenOut>> solo;
  for (auto& p : ps) {
    Scheduler one(fm.model(), blocks(64), {.max_running = 1, .deterministic = true});
    solo.push_back(outputs_to_end(one, one.submit(p, ro)));
  }
  struct Case {
    const char* what;
    int32_t n_blocks;
    SchedulerConfig config;
  };
  for (const Case& c : {Case{"a step budget that cuts prompts off the grid", 256,
                             {.max_running = 5, .max_step_tokens = 100, .prefill_chunk = 80, .deterministic = true}},
                        // the cache of PreemptsTheNewest...: someone is preempted and recomputed
                        Case{"preemption", 34,
                             {.max_running = 5, .max_step_tokens = 512, .prefill_chunk = 512, .prefix_cache = false,
                              .deterministic = true}}}) {
    Scheduler sched(fm.model(), blocks(c.n_blocks), c.config);
    std::vector<std::shared_ptr<Request>> reqs;
    for (auto& p : ps) reqs.push_back(sched.submit(p, ro));
    for (int guard = 0; guard < 10000 && !sched.idle(); ++guard) sched.step();
    for (size_t i = 0; i < ps.size(); ++i) {
      std::vector<TokenOut> out;
      EXPECT_EQ(reqs[i]->wait(out, std::chrono::milliseconds(0)), FinishReason::kLength) << reqs[i]->error();
      expect_same_outputs(out, solo[i], std::string(c.what) + ", prompt " + std::to_string(i));
    }
    if (c.n_blocks == 34) {
      EXPECT_GT(sched.metrics().preemptions, 0u);
    }
  }
  // Chunks must be able to reach the next grid point.
  EXPECT_THROW((Scheduler(fm.model(), blocks(8), {.prefill_chunk = 32, .deterministic = true})), Error);
  EXPECT_THROW((Scheduler(fm.model(), blocks(8), {.max_step_tokens = 48, .deterministic = true})), Error);
}

// Deterministic mode, multi-turn: a follow-up whose prompt holds an earlier answer is bit-identical
// to the follow-up on a fresh server. DeltaNet models reuse only the earlier prompt's work (the
// answer's state was rounded at every decode step, a prefill of the same text rounds on the grid);
// attention-only models reuse the answer's blocks too (a row's KV is the same however it was
// batched).
TEST_P(SchedulerTest, DeterministicModeReusesOnlyPromptWork) {
  test::FixtureModel fm(GetParam());
  const auto base = test::reference_prompt(GetParam(), 3);  // 100 tokens
  const SchedulerConfig sc{.max_running = 2, .prefill_chunk = 64, .checkpoint_interval = 64, .deterministic = true};
  Scheduler sched(fm.model(), blocks(128), sc);
  const auto first = outputs_to_end(sched, sched.submit(base, {.max_tokens = 60, .ignore_eos = true}));
  std::vector<int32_t> follow = base;  // the conversation so far, then a new turn
  for (const auto& t : first) follow.push_back(t.token);
  for (int i = 0; i < 10; ++i) follow.push_back(int32_t((i * 37) % 500));
  const RequestOptions ro{.max_tokens = 8, .ignore_eos = true, .top_logprobs = 4};
  auto req = sched.submit(follow, ro);
  const auto reused = outputs_to_end(sched, req);
  Scheduler fresh(fm.model(), blocks(128), sc);
  expect_same_outputs(reused, outputs_to_end(fresh, fresh.submit(follow, ro)), "follow-up");
  // DeltaNet: the checkpoint at 64 inside the first prompt; sliding rings: the checkpoint at 128
  // inside the answer; attention only: the 9 full blocks of prompt and answer
  const ModelConfig& cfg = fm.model().config();
  EXPECT_EQ(req->cached_tokens(),
            cfg.count_layers(LayerKind::kLinearAttention) > 0 ? 64 : cfg.has_sequence_state() ? 128 : 144);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SchedulerTest, ::testing::Values("qwen3", "qwen3_5_moe", "gemma4_text_kvshared"));

}  // namespace
}  // namespace kestrel
