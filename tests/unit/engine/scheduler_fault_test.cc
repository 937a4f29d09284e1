// Failures: a step that throws ends only the requests in it (with the error), gives back their
// blocks and slots, and leaves the others to finish with the results they would have had; a
// backend that reports a device fault stops the scheduler: everything ends with the fault and new
// requests are refused.
#include <gtest/gtest.h>

#include <atomic>

#include "engine/generate.h"
#include "engine/scheduler.h"
#include "ops/forwarding_ops.h"
#include "support/fixture_model.h"

namespace kestrel {
namespace {

// The CPU backend with faults on demand: the next matmul throws, and/or the device reports a fault.
class FaultyOps final : public ForwardingOps {
 public:
  using ForwardingOps::ForwardingOps;
  std::atomic<bool> fail_next{false};
  std::string fault;
  std::string device_fault() const override { return fault; }

 protected:
  void run(const char* op, const std::function<void()>& fn) override {
    if (fail_next && std::string_view(op) == "matmul") {
      fail_next = false;
      fail(ErrorKind::kInternal, "injected failure in ", op);
    }
    fn();
  }
};

struct Outcome {
  std::vector<int32_t> tokens;
  FinishReason why = FinishReason::kNone;
  std::string error;
};

Outcome collect(const std::shared_ptr<Request>& req) {
  Outcome o;
  std::vector<TokenOut> out;
  o.why = req->wait(out, std::chrono::milliseconds(0));
  for (auto& t : out) o.tokens.push_back(t.token);
  o.error = req->error();
  return o;
}

using test::decode_alone;

TEST(SchedulerFaults, AFailedStepEndsOnlyItsRequests) {
  CpuOps cpu;
  FaultyOps ops(cpu);
  const std::string dir = test::data_path("fixtures/qwen3_5_moe");
  LoadedModel lm = load_model(dir, ops);
  const auto p0 = test::reference_prompt("qwen3_5_moe", 2), p1 = test::reference_prompt("qwen3_5_moe", 3);
  // one sequence at a time: the first request's step fails, the second runs afterwards
  Scheduler sched(*lm.model, {.n_blocks = 64, .block_size = 16, .n_slots = 0},
                  {.max_running = 1, .prefill_chunk = 64, .prefix_cache = false});
  auto a = sched.submit(p0, {.max_tokens = 5, .ignore_eos = true});
  auto b = sched.submit(p1, {.max_tokens = 5, .ignore_eos = true});
  ops.fail_next = true;
  for (int i = 0; i < 200 && !sched.idle(); ++i) sched.step();
  const Outcome oa = collect(a), ob = collect(b);
  EXPECT_EQ(oa.why, FinishReason::kError);
  EXPECT_NE(oa.error.find("injected failure in matmul"), std::string::npos) << oa.error;
  EXPECT_EQ(ob.why, FinishReason::kLength);
  EXPECT_EQ(ob.tokens, decode_alone(*lm.model, p1, 5)) << "the request after the failure computes what it would have";
  const SchedulerMetrics m = sched.metrics();
  EXPECT_EQ(m.blocks_free, m.blocks_total) << "blocks leaked";
  EXPECT_EQ(m.slots_free, m.slots_total) << "slots leaked";
  EXPECT_EQ(m.requests_failed, 1u);
  EXPECT_TRUE(sched.fault().empty());
}

TEST(SchedulerFaults, ADeviceFaultStopsTheEngine) {
  CpuOps cpu;
  FaultyOps ops(cpu);
  LoadedModel lm = load_model(test::data_path("fixtures/qwen3_5"), ops);
  const auto p0 = test::reference_prompt("qwen3_5", 2), p1 = test::reference_prompt("qwen3_5", 3);
  Scheduler sched(*lm.model, {.n_blocks = 64, .block_size = 16, .n_slots = 0},
                  {.max_running = 1, .prefill_chunk = 64, .prefix_cache = false});
  auto a = sched.submit(p0, {.max_tokens = 5, .ignore_eos = true});
  auto b = sched.submit(p1, {.max_tokens = 5, .ignore_eos = true});
  ops.fault = "cudaErrorIllegalAddress: an illegal memory access was encountered";
  ops.fail_next = true;
  sched.step();
  const Outcome oa = collect(a), ob = collect(b);
  EXPECT_EQ(oa.why, FinishReason::kError);
  EXPECT_EQ(ob.why, FinishReason::kError) << "waiting requests end too";
  EXPECT_NE(ob.error.find("device failed"), std::string::npos) << ob.error;
  EXPECT_NE(sched.fault().find("cudaErrorIllegalAddress"), std::string::npos) << sched.fault();
  try {
    sched.submit(p0, {.max_tokens = 1});
    ADD_FAILURE() << "a stopped scheduler took a request";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInternal);
    EXPECT_NE(std::string(e.what()).find("engine stopped"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(sched.idle());
}

}  // namespace
}  // namespace kestrel
