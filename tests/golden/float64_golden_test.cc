// The CPU backend's float64 oracle mode (CpuOps(DType::kF64), `kestrel parity --precision f64`)
// against every fixture's reference: the 1e-4 bound of the foundation and Gemma 4 / Qwen4-Exp
// issues, on every prompt, with one principled exception.
//
// The references come from transformers in float64, but transformers keeps float32 islands in
// that run (RMSNorm and the eager softmax cast to float32, the DeltaNet torch kernels cast to
// float32, RoPE's cos/sin are float32), and on these random-weight fixtures long prompts amplify
// float32 rounding a thousandfold. Rerunning transformers itself (same version, same code, another
// device: tools/pure_f64_reference.py, H200 machine, 2026-11-30) does not reproduce its own shipped
// logits within 1e-4 on a few prompts. No implementation can be held closer to the oracle than
// the oracle is to itself, so those prompts' full-prompt logits are held to the oracle's measured
// rerun difference instead; their greedy tokens, step logits and hidden states still meet 1e-4.
#include "golden/model_invariants.h"

namespace kestrel::test {
namespace {

struct OracleNoise {
  const char* family;
  int len;
  double rerun_max_abs;  // |transformers rerun - shipped reference|, max over the logits
};
// Every prompt where transformers' own rerun differs from its shipped logits by more than 1e-4 of
// their RMS (the fixtures' logit RMS is about 1, see their reference.json).
constexpr OracleNoise kOracleNoise[] = {
    {"qwen3_5_tied", 300, 1.1e-3},
    {"gemma4_text", 100, 1.534e-4},
    {"gemma4_text", 300, 1.259e-4},
    {"gemma4_text_moe", 300, 1.662e-4},
};

double oracle_rerun_noise(const std::string& family, int len) {
  for (const auto& n : kOracleNoise)
    if (family == n.family && len == n.len) return n.rerun_max_abs;
  return 0.0;
}

class Float64Golden : public ::testing::TestWithParam<std::string> {};

TEST_P(Float64Golden, EveryPromptWithinOneInTenThousandOfTransformers) {
  const std::string family = GetParam();
  FixtureModel fm(family, DType::kF64);
  ParityReport r = run_parity(fm.model(), fm.dir + "/reference.safetensors", ParityOptions{});
  ASSERT_EQ(r.prompts.size(), 5u);
  for (const auto& p : r.prompts) {
    SCOPED_TRACE(family + " prompt of length " + std::to_string(p.len));
    const double noise = oracle_rerun_noise(family, p.len);
    if (noise > 0 && p.rel_err > 1e-4) {
      EXPECT_LE(p.max_abs_err, noise) << "full-prompt logits beyond transformers' own rerun difference";
    } else {
      EXPECT_LE(p.rel_err, 1e-4) << "full-prompt logits";
    }
    EXPECT_LE(p.step_rel_err, 1e-4) << "greedy step logits";
    if (p.hidden_rel_err >= 0) {
      EXPECT_LE(p.hidden_rel_err, 1e-4) << "hidden states";
    }
    EXPECT_TRUE(p.greedy_match) << "greedy continuation diverged at step " << p.first_divergence
                                << " (reference top-2 gap " << p.divergence_gap << ")";
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Float64Golden,
                         ::testing::Values("qwen3", "qwen3_moe", "qwen3_next", "qwen3_5", "qwen3_5_tied", "qwen3_5_moe",
                                           "gemma4_text", "gemma4_text_moe", "gemma4_text_kvshared", "gemma4_text_keqv",
                                           "qwen4_exp"));

// Where transformers' float32 islands are patched away (tools/pure_f64_reference.py, saved in
// tests/data/reference64/), the Qwen3.5 fixtures agree with the float64 mode to a few 1e-6: the
// residue above is the shipped reference's, not the engine's. (The Gemma 4 pure-float64 reruns
// keep RoPE's float32 cos/sin, whose last-bit differences between torch and the C library these
// fixtures amplify to ~1e-4, so they are no sharper a judge than the shipped references.)
TEST(Float64Golden, Qwen35MatchesPureFloat64Transformers) {
  for (const char* family : {"qwen3_5", "qwen3_5_tied"}) {
    FixtureModel fm(family, DType::kF64);
    ParityReport r = run_parity(fm.model(), data_path(std::string("reference64/") + family + ".safetensors"), {});
    for (const auto& p : r.prompts) {
      EXPECT_LE(p.rel_err, 1e-5) << family << " prompt of length " << p.len;
      EXPECT_TRUE(p.greedy_match) << family << " prompt of length " << p.len;
    }
  }
}

// The chunking and batching invariants hold in the float64 mode too.
TEST(Float64Golden, ChunkedPrefillMatchesOnePass) {
  expect_chunking_invariant("qwen3_5", 100, DType::kF64);
  expect_chunking_invariant("gemma4_text", 70, DType::kF64);
}

TEST(Float64Golden, BatchedDecodeIsBitIdentical) {
  for (const char* f : {"qwen3_5_moe", "gemma4_text_kvshared", "qwen4_exp"}) expect_batching_invariant(f, DType::kF64);
}

}  // namespace
}  // namespace kestrel::test
