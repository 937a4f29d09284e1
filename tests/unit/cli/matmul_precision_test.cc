// --matmul-precision (cli/backend_select.h) on every command that selects a backend: each name
// parses on every build (CPU-only too); a bad value, the flag with --device cpu and a precision
// --deterministic would not apply are refused by name before anything loads; a CPU-only build
// answers --device cuda with its "no CUDA backend" error whatever the precision; bench and parity
// record the precision in their JSON (null on cpu).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/backend_select.h"
#include "core/error.h"
#include "core/files.h"
#include "support/paths.h"

namespace kestrel {
namespace {

using test::data_path;
using test::run_cli;
using test::work_path;

// backend_options over `argv` (without the command name), with the options the commands declare.
cli::BackendOptions parse(std::vector<std::string> argv) {
  const std::vector<cli::OptionSpec> specs = {{"device", "", "cpu|cuda", ""},
                                              {"deterministic", "", "", ""},
                                              {"precision", "", "f32|f64", ""},
                                              {"matmul-precision", "", "P", ""}};
  argv.insert(argv.begin(), "kestrel");
  std::vector<char*> ptrs;
  for (auto& a : argv) ptrs.push_back(a.data());
  return cli::backend_options(cli::Args(specs, int(ptrs.size()), ptrs.data(), 1));
}

// The message of the Error(kBadInput) that `fn` throws; fails the test when it throws none.
template <typename Fn>
std::string bad_input_message(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadInput) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

constexpr const char* kNames[] = {"bf16x3", "bf16x2", "bf16", "exact"};

TEST(MatmulPrecision, EachNameParsesAndIsReportedOnCuda) {
  for (const char* name : kNames) {
    const cli::BackendOptions o = parse({"--device", "cuda", "--matmul-precision", name});
    ASSERT_TRUE(o.matmul_precision.has_value()) << name;
    EXPECT_EQ(*o.matmul_precision, name);
    EXPECT_EQ(cli::matmul_precision_report(o), name);
  }
  // Not given: the backend's default on cuda; nothing to report on cpu.
  const cli::BackendOptions cuda = parse({"--device", "cuda"});
  EXPECT_FALSE(cuda.matmul_precision.has_value());
  EXPECT_EQ(cli::matmul_precision_report(cuda), "bf16x3");
  EXPECT_EQ(cli::matmul_precision_report(parse({})), "");
  EXPECT_EQ(cli::matmul_precision_report(parse({"--device", "cpu", "--precision", "f64"})), "");
}

TEST(MatmulPrecision, DeterministicTakesTheDefaultOrExactAndReportsExact) {
  // Deterministic mode's matmuls are the F32 GEMV kernels whatever the setting: exact's.
  EXPECT_EQ(cli::matmul_precision_report(parse({"--device", "cuda", "--deterministic"})), "exact");
  for (const char* name : {"bf16x3", "exact"}) {
    const cli::BackendOptions o = parse({"--device", "cuda", "--deterministic", "--matmul-precision", name});
    EXPECT_EQ(o.matmul_precision.value_or(""), name);
    EXPECT_EQ(cli::matmul_precision_report(o), "exact") << name;
  }
}

TEST(MatmulPrecision, BadValueNamesTheFlagAndTheAcceptedValues) {
  for (const char* bad : {"bf17", "BF16", "fp32", "bf16x4", ""}) {
    const std::string msg = bad_input_message([&] { parse({"--device", "cuda", "--matmul-precision", bad}); });
    EXPECT_NE(msg.find(std::string("--matmul-precision must be bf16x3, bf16x2, bf16 or exact, got '") + bad + "'"),
              std::string::npos)
        << msg;
  }
  // A caller filling BackendOptions itself (the server's load_served_model) gets the same check.
  const std::string msg =
      bad_input_message([] { cli::make_backend({.device = "cuda", .matmul_precision = "fast"}); });
  EXPECT_NE(msg.find("--matmul-precision must be"), std::string::npos) << msg;
}

TEST(MatmulPrecision, RefusedOnCpu) {
  for (const char* name : kNames) {
    for (const std::vector<std::string>& argv : std::vector<std::vector<std::string>>{
             {"--matmul-precision", name}, {"--device", "cpu", "--matmul-precision", name}}) {
      const std::string msg = bad_input_message([&] { parse(argv); });
      EXPECT_NE(msg.find(std::string("--matmul-precision ") + name + " applies to --device cuda only"),
                std::string::npos)
          << msg;
      EXPECT_NE(msg.find("F32"), std::string::npos) << msg;
    }
  }
  const std::string f64 =
      bad_input_message([] { parse({"--device", "cpu", "--precision", "f64", "--matmul-precision", "bf16"}); });
  EXPECT_NE(f64.find("F64"), std::string::npos) << f64;
  const std::string direct =
      bad_input_message([] { cli::make_backend({.device = "cpu", .matmul_precision = "bf16"}); });
  EXPECT_NE(direct.find("applies to --device cuda only"), std::string::npos) << direct;
}

TEST(MatmulPrecision, DeterministicRefusesThePrecisionsItWouldNotApply) {
  for (const char* name : {"bf16", "bf16x2"}) {
    const std::string msg =
        bad_input_message([&] { parse({"--device", "cuda", "--deterministic", "--matmul-precision", name}); });
    EXPECT_NE(msg.find(std::string("--matmul-precision ") + name + " does not apply with --deterministic"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("F32 GEMV"), std::string::npos) << msg;
  }
  const std::string direct = bad_input_message(
      [] { cli::make_backend({.device = "cuda", .deterministic = true, .matmul_precision = "bf16"}); });
  EXPECT_NE(direct.find("does not apply with --deterministic"), std::string::npos) << direct;
}

// ---- through the binary: every command declares the flag and refuses before loading ----------

// A command line of each command that selects a backend, valid but for what a test appends. serve
// and chat get a model that does not exist, so a refusal that went missing fails instead of serving.
struct CommandLine {
  const char* name;
  std::string args;
};
std::vector<CommandLine> command_lines() {
  const std::string m = data_path("fixtures/qwen3_5"), none = work_path("no-such-model");
  return {{"run", "run -m " + m + " --prompt-ids 1,2,3 -n 2"},
          {"bench", "bench -m " + m + " -p 16 -n 2 -r 1"},
          {"parity", "parity -m " + m},
          {"serve", "serve -m " + none + " --port 0"},
          {"chat", "chat -m " + none + " </dev/null"},
          {"quant-quality", "quant-quality -m " + m + " --source " + m + " --text " + data_path("fixtures/README.md")}};
}

TEST(MatmulPrecisionCli, BadValueIsRefusedByEveryCommand) {
  for (const auto& c : command_lines()) {
    int status = 0;
    const std::string out = run_cli(c.args + " --device cuda --matmul-precision bf17", &status);
    EXPECT_EQ(status, 2) << c.name << ": " << out;
    EXPECT_NE(out.find("--matmul-precision must be bf16x3, bf16x2, bf16 or exact, got 'bf17'"), std::string::npos)
        << c.name << ": " << out;
  }
}

TEST(MatmulPrecisionCli, CpuIsRefusedByEveryCommand) {
  for (const auto& c : command_lines()) {
    for (const char* device : {"", " --device cpu"}) {
      int status = 0;
      const std::string out = run_cli(c.args + device + " --matmul-precision bf16", &status);
      EXPECT_EQ(status, 2) << c.name << device << ": " << out;
      EXPECT_NE(out.find("--matmul-precision bf16 applies to --device cuda only"), std::string::npos)
          << c.name << device << ": " << out;
    }
  }
}

TEST(MatmulPrecisionCli, DeterministicRefusesBf16) {
  for (const auto& c : command_lines()) {
    if (std::string(c.name) == "chat" || std::string(c.name) == "quant-quality") continue;  // no --deterministic
    int status = 0;
    const std::string out = run_cli(c.args + " --device cuda --deterministic --matmul-precision bf16x2", &status);
    EXPECT_EQ(status, 2) << c.name << ": " << out;
    EXPECT_NE(out.find("--matmul-precision bf16x2 does not apply with --deterministic"), std::string::npos)
        << c.name << ": " << out;
  }
}

// Without the CUDA backend a valid precision reaches backend selection and gets the build's
// "no CUDA backend" error, as --device cuda does without the flag (and with --deterministic exact).
TEST(MatmulPrecisionCli, CpuOnlyBuildGivesTheNoCudaBackendError) {
#ifdef KESTREL_HAVE_CUDA
  GTEST_SKIP() << "built with the CUDA backend";
#else
  for (const auto& c : command_lines()) {
    // serve and chat have no model to load here, quant-quality no tokenizer: they refuse earlier
    if (std::string(c.name) != "run" && std::string(c.name) != "bench" && std::string(c.name) != "parity") continue;
    for (const char* flags : {" --matmul-precision bf16", " --deterministic --matmul-precision exact"}) {
      int status = 0;
      const std::string out = run_cli(c.args + " --device cuda" + flags, &status);
      EXPECT_EQ(status, 1) << c.name << flags << ": " << out;
      EXPECT_NE(out.find("--device cuda: this build has no CUDA backend"), std::string::npos)
          << c.name << flags << ": " << out;
    }
  }
#endif
}

// On cpu the JSON records that no matmul precision applies (null), and says nothing of it in text.
TEST(MatmulPrecisionCli, BenchAndParityRecordNullOnCpu) {
  int status = 0;
  const std::string json = work_path("bench-matmul-precision.json");
  const std::string bench =
      run_cli("bench -m " + data_path("fixtures/qwen3_5") + " --device cpu -p 16 -n 2 -r 1 --json " + json, &status);
  ASSERT_EQ(status, 0) << bench;
  const nlohmann::json doc = nlohmann::json::parse(read_file(json));
  ASSERT_TRUE(doc.contains("matmul_precision")) << doc.dump(1);
  EXPECT_TRUE(doc.at("matmul_precision").is_null()) << doc.dump(1);
  EXPECT_EQ(bench.find("matmul precision"), std::string::npos) << bench;

  const std::string parity = run_cli("parity -m " + data_path("fixtures/qwen3_5") + " --json", &status);
  ASSERT_EQ(status, 0) << parity;
  const nlohmann::json p = nlohmann::json::parse(parity);
  ASSERT_TRUE(p.contains("matmul_precision")) << parity;
  EXPECT_TRUE(p.at("matmul_precision").is_null()) << parity;
}

}  // namespace
}  // namespace kestrel
