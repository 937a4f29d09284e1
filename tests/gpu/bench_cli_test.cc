// `kestrel bench --device cuda` timing what it says: the tg repetitions share one runner, so the
// step graphs recorded in the warm-up run replay in every step of the timed runs (the JSON's
// `graphs` record is the last timed run's), at depth too. tests/unit/engine/bench_cli_test.cc
// covers the command on the CPU.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "core/files.h"
#include "support/paths.h"
#ifdef KESTREL_HAVE_CUDA
#include "backend/cuda/cuda_ops.h"
#endif

namespace kestrel {
namespace {

using test::data_path;
using test::run_cli;
using test::work_path;

TEST(BenchGpu, TimedDecodeRunsReplayEveryStep) {
#ifdef KESTREL_HAVE_CUDA
  if (CudaOps::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const std::string json = work_path("bench-cuda-graphs.json");
  int status = 0;
  const std::string out = run_cli("bench -m " + data_path("fixtures/qwen3_5") +
                                      " --device cuda -p 0 -n 6 -d 0,40 -b 1,2 -r 2 --json " + json,
                                  &status);
  ASSERT_EQ(status, 0) << out;
  const nlohmann::json doc = nlohmann::json::parse(read_file(json));
  int tests = 0;
  for (const auto& r : doc.at("results")) {
    const std::string what = r.at("test").get<std::string>() + " batch " + std::to_string(r.at("batch").get<int>());
    const nlohmann::json& g = r.at("graphs");
    EXPECT_TRUE(g.at("on").get<bool>()) << what << ": " << g.dump();
    EXPECT_EQ(g.at("replayed").get<int>(), 6) << what << ": " << g.dump();
    EXPECT_EQ(g.at("recorded").get<int>(), 0) << what << ": " << g.dump();
    EXPECT_EQ(g.at("eager").get<int>(), 0) << what << ": " << g.dump();
    ++tests;
  }
  EXPECT_EQ(tests, 4) << out;
#else
  GTEST_SKIP() << "built without the CUDA backend";
#endif
}

}  // namespace
}  // namespace kestrel
