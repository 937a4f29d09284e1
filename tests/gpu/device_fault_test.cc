// A real device fault on the CUDA backend. In the middle of a prefill step a kernel writes to an
// unmapped device address (cudaErrorIllegalAddress, which poisons the CUDA context for the rest of
// the process): the step's request must end with the CUDA error, the waiting request with the
// device failure, and the scheduler must stop and refuse new requests, without crashing. The CPU
// tests inject the fault (tests/unit/engine/scheduler_fault_test.cc); this one provokes it, in a
// child process (gtest's threadsafe death-test style runs the test again in a fresh exec of the
// binary), since the faulted context takes every later CUDA call in its process down with it.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "engine/scheduler.h"
#include "gpu_test_util.h"
#include "model/loader.h"
#include "ops/forwarding_ops.h"
#include "support/fixture_model.h"
#include "support/paths.h"

namespace kestrel::test {
namespace {

#ifdef KESTREL_HAVE_CUDA
// The CUDA backend with one fault on demand: once armed, the next op first launches an add whose
// output lies at an unmapped device address (the null page), then runs as asked.
class FaultingOps final : public ForwardingOps {
 public:
  explicit FaultingOps(Ops& inner) : ForwardingOps(inner), in_(inner.alloc(DType::kF32, 1, 4096)) {}
  bool armed = false;

 protected:
  void run(const char* op, const std::function<void()>& fn) override {
    if (armed) {
      armed = false;
      Tensor wild = in_.view();
      wild.data = reinterpret_cast<void*>(uintptr_t(0x1000));
      inner().add(wild, in_.view(), in_.view());
    }
    fn();
  }

 private:
  Buffer in_;
};

// Runs the scenario and leaves the process with 0 and "engine stopped: <fault>" on stderr when
// every expectation holds, else with 1 and what failed (gtest's expectations do not reach the
// parent from a death-test child). _Exit: nothing CUDA may run after the fault, destructors
// included.
[[noreturn]] void provoke_fault(Ops& gpu) {
  FaultingOps ops(gpu);
  LoadedModel lm = load_model(data_path("fixtures/qwen3_5"), ops);
  const auto p0 = reference_prompt("qwen3_5", 2), p1 = reference_prompt("qwen3_5", 3);
  Scheduler sched(*lm.model, {.n_blocks = 64, .block_size = 16, .n_slots = 0},
                  {.max_running = 1, .prefill_chunk = 64, .prefix_cache = false});
  auto a = sched.submit(p0, {.max_tokens = 5, .ignore_eos = true});
  auto b = sched.submit(p1, {.max_tokens = 5, .ignore_eos = true});
  ops.armed = true;
  std::string problems;
  try {
    sched.step();
  } catch (const std::exception& e) {
    problems += std::string("the step threw instead of ending its requests: ") + e.what() + "; ";
  }
  std::vector<TokenOut> out;
  if (a->wait(out, std::chrono::milliseconds(0)) != FinishReason::kError)
    problems += "the faulted step's request did not end with an error; ";
  if (a->error().find("cudaErrorIllegalAddress") == std::string::npos)
    problems += "the faulted step's request does not name the CUDA error: " + a->error() + "; ";
  if (b->wait(out, std::chrono::milliseconds(0)) != FinishReason::kError)
    problems += "the waiting request did not end with an error; ";
  if (b->error().find("device failed") == std::string::npos)
    problems += "the waiting request does not name the device failure: " + b->error() + "; ";
  if (sched.fault().find("cudaErrorIllegalAddress") == std::string::npos)
    problems += "the scheduler's fault does not name the CUDA error: '" + sched.fault() + "'; ";
  try {
    sched.submit(p0, {.max_tokens = 1});
    problems += "a stopped scheduler took a request; ";
  } catch (const Error& e) {
    if (std::string_view(e.what()).find("engine stopped") == std::string_view::npos)
      problems += std::string("the refusal does not say the engine stopped: ") + e.what() + "; ";
  }
  if (!sched.idle()) problems += "the scheduler is not idle; ";
  std::fprintf(stderr, "%s\n", problems.empty() ? ("engine stopped: " + sched.fault()).c_str() : problems.c_str());
  std::fflush(stderr);
  std::_Exit(problems.empty() ? 0 : 1);
}

class DeviceFault : public GpuTest {};

TEST_F(DeviceFault, StopsTheEngineCleanly) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(provoke_fault(gpu()), ::testing::ExitedWithCode(0), "engine stopped: .*cudaErrorIllegalAddress");
}
#endif

}  // namespace
}  // namespace kestrel::test
