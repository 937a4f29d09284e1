// --matmul-precision on the CUDA backend (cli/backend_select.h): each name reaches
// CudaOps::set_matmul_precision through make_backend, and bench / parity report the precision a
// run computed with (the name, or exact under --deterministic). tests/unit/cli/matmul_precision_test.cc
// covers the parsing and the refusals on every build.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "cli/backend_select.h"
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

class MatmulPrecisionGpu : public ::testing::Test {
 protected:
  void SetUp() override {
#ifdef KESTREL_HAVE_CUDA
    if (CudaOps::device_count() == 0) GTEST_SKIP() << "no CUDA device";
#else
    GTEST_SKIP() << "built without the CUDA backend";
#endif
  }
};

TEST_F(MatmulPrecisionGpu, MakeBackendSetsEachPrecision) {
#ifdef KESTREL_HAVE_CUDA
  for (MatmulPrecision p :
       {MatmulPrecision::kBf16, MatmulPrecision::kBf16x2, MatmulPrecision::kBf16x3, MatmulPrecision::kExact}) {
    auto ops = cli::make_backend({.device = "cuda", .matmul_precision = matmul_precision_name(p)});
    auto* cuda = dynamic_cast<CudaOps*>(ops.get());
    ASSERT_NE(cuda, nullptr);
    EXPECT_EQ(cuda->matmul_precision(), p) << matmul_precision_name(p);
    EXPECT_FALSE(cuda->deterministic());
  }
  auto plain = cli::make_backend({.device = "cuda"});
  EXPECT_EQ(dynamic_cast<CudaOps&>(*plain).matmul_precision(), MatmulPrecision::kBf16x3);
  auto det = cli::make_backend({.device = "cuda", .deterministic = true, .matmul_precision = "exact"});
  EXPECT_TRUE(dynamic_cast<CudaOps&>(*det).deterministic());
  EXPECT_EQ(dynamic_cast<CudaOps&>(*det).matmul_precision(), MatmulPrecision::kExact);
#endif
}

TEST_F(MatmulPrecisionGpu, BenchAndParityRecordThePrecision) {
  const std::string fixture = data_path("fixtures/qwen3_5");
  for (const char* name : {"bf16", "bf16x2"}) {
    const std::string json = work_path(std::string("bench-cuda-") + name + ".json");
    int status = 0;
    const std::string out = run_cli("bench -m " + fixture + " --device cuda -p 32 -n 2 -r 1 --matmul-precision " +
                                        name + " --json " + json,
                                    &status);
    ASSERT_EQ(status, 0) << out;
    EXPECT_NE(out.find(std::string(", matmul precision ") + name + ","), std::string::npos) << out;
    EXPECT_EQ(nlohmann::json::parse(read_file(json)).at("matmul_precision"), name);
  }
  int status = 0;
  const std::string json = work_path("bench-cuda-deterministic.json");
  const std::string det =
      run_cli("bench -m " + fixture + " --device cuda -p 64 -n 2 -r 1 --deterministic --json " + json, &status);
  ASSERT_EQ(status, 0) << det;
  EXPECT_EQ(nlohmann::json::parse(read_file(json)).at("matmul_precision"), "exact");

  // exact: every matmul on the F32 GEMV kernels, well within parity's cuda tolerance
  const std::string parity =
      run_cli("parity -m " + fixture + " --device cuda --matmul-precision exact --json", &status);
  ASSERT_EQ(status, 0) << parity;
  const nlohmann::json p = nlohmann::json::parse(parity);
  EXPECT_EQ(p.at("matmul_precision"), "exact");
  EXPECT_EQ(p.at("device"), "cuda");
}

}  // namespace
}  // namespace kestrel
