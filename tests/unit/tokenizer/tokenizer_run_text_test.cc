// kestrel run with a text prompt: tokenized with the model's tokenizer, generated text streamed.
#include <gtest/gtest.h>

#include <cstdio>
#include <sys/wait.h>

#include "tokenizer_test_util.h"

namespace kestrel::test {
namespace {

std::pair<int, std::string> sh(const std::string& args) {
  std::string cmd = kestrel_binary() + " " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string out;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) out.append(buffer, n);
  int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

TEST(TokenizerRunText, TextPromptMatchesTheSameIdsAndDecodes) {
  const std::string model = work_path("tiny-qwen3.5-text");
  auto [rc, out] = sh("random-model --like tiny-qwen3.5 --tokenizer " + tokenizer_dir("qwen3") + " --out " + model +
                      " --seed 3 --quiet");
  ASSERT_EQ(rc, 0) << out;
  // "Hello world" is [9707, 1879] for the Qwen3 tokenizer (no BOS): text and ids give the same tokens.
  auto [rc_ids, ids_out] = sh("run -m " + model + " --prompt-ids 9707,1879 -n 6 --ignore-eos");
  ASSERT_EQ(rc_ids, 0) << ids_out;
  auto [rc_text, text_out] = sh("run -m " + model + " --prompt 'Hello world' -n 6 --ignore-eos");
  ASSERT_EQ(rc_text, 0) << text_out;
  std::string ids = ids_out.substr(1, ids_out.find(']') - 1);
  auto [rc_dec, decoded] = sh("detokenize --tokenizer " + tokenizer_dir("qwen3") + " --skip-special " + "'" + ids + "'");
  ASSERT_EQ(rc_dec, 0) << decoded;
  EXPECT_EQ(text_out, decoded);

  // The same model converted to GGUF carries its tokenizer: `run -m FILE.gguf --prompt` needs no
  // tokenizer.json and generates the same text (bf16 weights: the same logits as the directory).
  const std::string gguf = work_path("tiny-qwen3.5-text.gguf");
  auto [rc_conv, conv_out] = sh("convert -m " + model + " -o " + gguf + " --quant bf16");
  ASSERT_EQ(rc_conv, 0) << conv_out;
  auto [rc_gguf, gguf_out] = sh("run -m " + gguf + " --prompt 'Hello world' -n 6 --ignore-eos");
  ASSERT_EQ(rc_gguf, 0) << gguf_out;
  EXPECT_EQ(gguf_out, text_out);
}

// --sample-candidates: a seeded sampled run draws the same tokens from 16 candidates a step as
// from the whole rows; a count out of range is refused by name.
TEST(TokenizerRunText, SampleCandidatesDrawTheSameTokens) {
  const std::string m = data_path("fixtures/qwen3_5");
  const std::string base = "run -m " + m + " --prompt-ids 1,2,3,4,5 -n 12 --ignore-eos --temperature 0.9 --top-p 0.95 --seed 5";
  auto [rc0, whole] = sh(base + " --sample-candidates 0");
  ASSERT_EQ(rc0, 0) << whole;
  auto [rc1, cands] = sh(base + " --sample-candidates 16");
  ASSERT_EQ(rc1, 0) << cands;
  EXPECT_EQ(cands, whole);
  auto [rc2, bad] = sh(base + " --sample-candidates 5000");
  EXPECT_NE(rc2, 0);
  EXPECT_NE(bad.find("sample-candidates"), std::string::npos) << bad;
}

// --profile times every op of the run and prints the phases to stderr; the tokens are unchanged.
TEST(TokenizerRunText, ProfileLeavesTheTokensAlone) {
  const std::string m = data_path("fixtures/qwen3_5_moe");
  auto [rc, plain] = sh("run -m " + m + " --prompt-ids 1,2,3,4,5 -n 6 2>/dev/null");
  ASSERT_EQ(rc, 0) << plain;
  auto [rc_p, profiled] = sh("run -m " + m + " --prompt-ids 1,2,3,4,5 -n 6 --profile");
  ASSERT_EQ(rc_p, 0) << profiled;
  EXPECT_NE(profiled.find(plain.substr(0, plain.find(']') + 1)), std::string::npos) << profiled;
  EXPECT_NE(profiled.find("profile of 6 generated tokens: 6 steps"), std::string::npos) << profiled;
  for (const char* phase : {"deltanet", "mlp/moe", "attention", "head", "between ops"})
    EXPECT_NE(profiled.find(phase), std::string::npos) << phase;
}

TEST(TokenizerRunText, ClearErrors) {
  auto [rc, out] = sh("run -m " + data_path("fixtures/qwen3") + " --prompt hi -n 2");
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("tokenizer"), std::string::npos) << out;
  auto [rc2, out2] = sh("run -m " + data_path("fixtures/qwen3") + " --prompt hi --prompt-ids 1 -n 2");
  EXPECT_NE(rc2, 0);
  EXPECT_NE(out2.find("--prompt"), std::string::npos) << out2;
}

}  // namespace
}  // namespace kestrel::test
