// Converted fixtures loaded back from GGUF against what transformers computed: BF16 GGUFs must
// match as closely as the original checkpoints; Q8_0 (dequantized at load) is held to a looser,
// measured tolerance (docs/gguf.md).
#include <gtest/gtest.h>

#include <cstdlib>

#include "backend/cpu/cpu_ops.h"
#include "convert/hf_to_gguf.h"
#include "core/error.h"
#include "core/files.h"
#include "engine/parity.h"
#include "io/gguf.h"
#include "model/loader.h"
#include "support/paths.h"

namespace kestrel {
namespace {

using test::data_path;
using test::work_path;

ParityReport gguf_parity(const std::string& family, GgmlType type) {
  const std::string out = work_path("parity-" + family + "-" + std::string(ggml_type_name(type)) + ".gguf");
  convert_hf_to_gguf({.model_dir = data_path("fixtures/" + family), .output = out, .type = type, .progress = false});
  CpuOps ops;
  LoadedModel lm = load_model(out, ops);
  return run_parity(*lm.model, data_path("fixtures/" + family + "/reference.safetensors"), {});
}

TEST(GgufParity, Bf16MatchesTransformersLikeTheOriginal) {
  for (const std::string family : {"qwen3", "qwen3_moe"}) {
    SCOPED_TRACE(family);
    const ParityReport r = gguf_parity(family, GgmlType::kBF16);
    ASSERT_EQ(r.prompts.size(), 5u);
    for (const auto& p : r.prompts) {
      EXPECT_LE(p.rel_err, 1e-4) << "prompt of length " << p.len;
      EXPECT_LE(p.step_rel_err, 1e-4) << "prompt of length " << p.len;
      EXPECT_TRUE(p.greedy_match) << "prompt of length " << p.len;
    }
  }
}

// Q8_0 on the dense fixture: measured 0.039..0.104 of the logits' RMS over the five prompts.
TEST(GgufParity, Q8_0DenseWithinMeasuredTolerance) {
  const ParityReport r = gguf_parity("qwen3", GgmlType::kQ8_0);
  ASSERT_EQ(r.prompts.size(), 5u);
  for (const auto& p : r.prompts) {
    EXPECT_LE(p.rel_err, 0.15) << "prompt of length " << p.len;
    EXPECT_GT(p.rel_err, 1e-3) << "Q8_0 weights should move the logits at all";
  }
}

// The CLI takes a GGUF file wherever it takes a model directory: same greedy tokens.
TEST(GgufParity, RunCommandAcceptsGgufFiles) {
  const std::string gguf = work_path("run-qwen3_moe.gguf");
  convert_hf_to_gguf({.model_dir = data_path("fixtures/qwen3_moe"), .output = gguf, .type = GgmlType::kBF16,
                      .progress = false});
  auto run = [](const std::string& model) {
    const std::string out = work_path("run.out");
    const std::string cmd = test::kestrel_binary() + " run -m " + model + " --prompt-ids 1,2,3,4 -n 8 > " + out;
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    return read_file(out);
  };
  const std::string from_dir = run(data_path("fixtures/qwen3_moe"));
  EXPECT_EQ(run(gguf), from_dir);
  EXPECT_EQ(from_dir.front(), '[');
}

TEST(GgufParity, UnsupportedGgufArchitectureIsRefused) {
  const std::string path = work_path("llama-arch.gguf");
  {
    GgufWriter w(path);
    w.set("general.architecture", GgufValue::string("llama"));
    w.declare("token_embd.weight", GgmlType::kF32, {4, 4});
    w.begin();
    std::vector<float> z(16, 0.0f);
    w.write_tensor("token_embd.weight", z.data(), 64);
    w.finish();
  }
  CpuOps ops;
  try {
    load_model(path, ops);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("GGUF architecture 'llama' is not supported"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kestrel
