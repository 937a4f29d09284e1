// ProfilingOps: transparent (the same logits bit for bit), and its profile accounts for every op
// of every recorded step, attributed to the phases the model marks.
#include <gtest/gtest.h>

#include "engine/runner.h"
#include "ops/profiling_ops.h"
#include "support/fixture_model.h"

namespace kestrel {
namespace {

std::vector<float> decode(Model& model, const std::vector<int32_t>& prompt, int steps) {
  Runner runner(model, cpu_cache_sizing(model.config(), 1, 128));
  SequenceState seq;
  runner.start(seq);
  std::vector<float> all = runner.step({{.seq = &seq, .tokens = prompt}});
  for (int i = 0; i < steps; ++i) {
    std::vector<int32_t> one = {int32_t(7 * i + 3)};
    const auto& row = runner.step({{.seq = &seq, .tokens = one}});
    all.insert(all.end(), row.begin(), row.end());
  }
  return all;
}

TEST(ProfilingOps, TransparentAndAccountsForEveryStep) {
  for (const char* family : {"qwen3_5_moe", "gemma4_text_moe"}) {
    SCOPED_TRACE(family);
    const std::string dir = test::data_path(std::string("fixtures/") + family);
    const std::vector<int32_t> prompt = test::reference_prompt(family, 2);
    CpuOps plain_ops;
    LoadedModel plain = load_model(dir, plain_ops);
    CpuOps inner;
    ProfilingOps prof(inner);
    LoadedModel wrapped = load_model(dir, prof);

    prof.set_recording(true);
    const std::vector<float> got = decode(*wrapped.model, prompt, 4);
    prof.set_recording(false);
    prof.collect();
    EXPECT_EQ(got, decode(*plain.model, prompt, 4)) << "profiling changed the results";

    const OpProfile& p = prof.profile();
    EXPECT_EQ(p.steps, 5);
    EXPECT_GT(p.span, 0.0);
    EXPECT_LE(p.in_ops, p.span * 1.0001);
    const bool hybrid = std::string(family) == "qwen3_5_moe";
    EXPECT_GT(p.by_phase[int(Phase::kAttention)].calls, 0);
    EXPECT_EQ(p.by_phase[int(Phase::kDeltaNet)].calls > 0, hybrid);
    EXPECT_GT(p.by_phase[int(Phase::kFfn)].calls, 0);
    EXPECT_EQ(p.by_phase[int(Phase::kEmbed)].calls, std::string(family) == "gemma4_text_moe" ? 5 * 2 : 5);
    EXPECT_EQ(p.by_phase[int(Phase::kHead)].calls > 0, true);
    int64_t calls = 0;
    double seconds = 0;
    for (const auto& r : p.by_phase) {
      calls += r.calls;
      seconds += r.seconds;
    }
    int64_t op_calls = 0;
    for (const auto& [name, r] : p.by_op) op_calls += r.calls;
    EXPECT_EQ(calls, op_calls);
    EXPECT_NEAR(seconds, p.in_ops, 1e-9);
    EXPECT_EQ(p.by_op.at("begin_step").calls, 5);
    // not recording: nothing is added
    prof.clear();
    decode(*wrapped.model, prompt, 1);
    prof.collect();
    EXPECT_EQ(prof.profile().steps, 0);
  }
}

}  // namespace
}  // namespace kestrel
