// kestrel bench on the CPU backend over a fixture: the table, and the JSON record that carries
// what every figure needs (the device by name, the command, the date) and one result per test.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "support/paths.h"

namespace kestrel {
namespace {

using test::data_path;
using test::run_cli;
using test::work_path;

TEST(BenchCli, RecordsDeviceCommandDateAndEveryTest) {
  const std::string json = work_path("bench-cli.json");
  int status = 0;
  const std::string out = run_cli("bench -m " + data_path("fixtures/qwen3_5") +
                                      " --device cpu -p 16 -n 4 -b 1,2 -r 2 --json " + json +
                                      " --command-line 'kestrel bench (test)'",
                                  &status);
  ASSERT_EQ(status, 0) << out;
  std::ifstream in(json);
  ASSERT_TRUE(in) << json;
  const nlohmann::json doc = nlohmann::json::parse(in);
  EXPECT_EQ(doc.at("device"), "cpu");
  const std::string name = doc.at("device_name");
  EXPECT_FALSE(name.empty());
  EXPECT_NE(out.find("device cpu (" + name + ")"), std::string::npos) << out;
  // The fixture's token embedding is not its head, so a step reads one row of it, not all.
  EXPECT_NE(out.find("weights a step reads:"), std::string::npos) << out;
  EXPECT_EQ(doc.at("command"), "kestrel bench (test)");
  EXPECT_TRUE(std::regex_match(doc.at("date").get<std::string>(), std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)")));
  EXPECT_GT(doc.at("copy_bandwidth_GBps").get<double>(), 0.0);
  // pp16 at batch 1, tg4 at batches 1 and 2
  const auto& results = doc.at("results");
  ASSERT_EQ(results.size(), 3u) << doc.dump(1);
  const std::pair<const char*, int> want[] = {{"pp16", 1}, {"tg4", 1}, {"tg4", 2}};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(results[i].at("test"), want[i].first);
    EXPECT_EQ(results[i].at("batch"), want[i].second);
    EXPECT_EQ(results[i].at("reps"), 2);
    const double lo = results[i].at("tokens_per_s_min"), med = results[i].at("tokens_per_s_median"),
                 hi = results[i].at("tokens_per_s_max");
    EXPECT_GT(lo, 0.0);
    EXPECT_LE(lo, med);
    EXPECT_LE(med, hi);
    EXPECT_NE(out.find(want[i].first), std::string::npos);
  }
}

// --queue-steps: the run says so and records it; the tg results are there as usual.
TEST(BenchCli, QueueStepsIsSaidAndRecorded) {
  const std::string json = work_path("bench-cli-queue.json");
  int status = 0;
  const std::string out = run_cli("bench -m " + data_path("fixtures/qwen3_5") +
                                      " --device cpu -p 0 -n 4 -b 1,2 -r 1 --queue-steps --json " + json,
                                  &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("(--queue-steps)"), std::string::npos) << out;
  std::ifstream in(json);
  ASSERT_TRUE(in) << json;
  const nlohmann::json doc = nlohmann::json::parse(in);
  EXPECT_EQ(doc.at("queue_steps"), true);
  ASSERT_EQ(doc.at("results").size(), 2u) << doc.dump(1);
  for (const auto& r : doc.at("results")) EXPECT_GT(r.at("tokens_per_s_median").get<double>(), 0.0) << r.dump();
}

// --profile: each profile carries the matrix products' FLOPs per step and rate, against the
// matmul ceiling the bench measured through the backend (recorded with its shape).
TEST(BenchCli, ProfileReportsMatrixProductRateAgainstTheMeasuredCeiling) {
  const std::string json = work_path("bench-cli-profile.json");
  int status = 0;
  const std::string out = run_cli("bench -m " + data_path("fixtures/qwen3_5") +
                                      " --device cpu -p 16 -n 2 -r 1 --profile --json " + json,
                                  &status);
  ASSERT_EQ(status, 0) << out;
  std::ifstream in(json);
  ASSERT_TRUE(in) << json;
  const nlohmann::json doc = nlohmann::json::parse(in);
  EXPECT_GT(doc.at("matmul_ceiling_TFLOPs").get<double>(), 0.0);
  EXPECT_EQ(doc.at("matmul_ceiling_shape"), nlohmann::json({64, 1024, 1024}));
  EXPECT_NE(out.find("measured matmul ceiling:"), std::string::npos) << out;
  const auto& profiles = doc.at("profiles");
  ASSERT_EQ(profiles.size(), 2u) << doc.dump(1);
  for (const auto& p : profiles) {
    EXPECT_GT(p.at("matmul_gflop_per_step").get<double>(), 0.0) << p.dump();
    EXPECT_GT(p.at("matmul_tflops").get<double>(), 0.0) << p.dump();
    EXPECT_NEAR(p.at("matmul_ceiling_fraction").get<double>(),
                p.at("matmul_tflops").get<double>() / doc.at("matmul_ceiling_TFLOPs").get<double>(), 1e-9);
  }
  // a 16-row prefill step runs every projection over 16 rows, a decode step over one (both put
  // one row through the output head)
  EXPECT_GT(profiles[0].at("matmul_gflop_per_step").get<double>(),
            4.0 * profiles[1].at("matmul_gflop_per_step").get<double>());
  EXPECT_NE(out.find("matrix products:"), std::string::npos) << out;
}

TEST(BenchCli, OutOfRangeOptionIsRefusedByName) {
  int status = 0;
  const std::string out = run_cli("bench -m " + data_path("fixtures/qwen3_5") + " --device cpu -p 16 -n 4 -b 0", &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("-b"), std::string::npos) << out;
}

}  // namespace
}  // namespace kestrel
