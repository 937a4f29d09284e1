// The real Qwen3 and Gemma 3 tokenizers against what Hugging Face tokenizers 0.23 produced:
// every fixture string, the 200,000-character corpus and every rendered chat, exactly.
#include <gtest/gtest.h>

#include "tokenizer_test_util.h"

namespace kestrel::test {
namespace {

using tok::Tokenizer;

std::vector<int32_t> ids_of(const nlohmann::json& j) { return j.get<std::vector<int32_t>>(); }

class TokenizerFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerFixture, StringsEncodeDecodeExactly) {
  const Tokenizer& tok = real_tokenizer(GetParam());
  const auto& strings = text_fixture(GetParam())["strings"];
  ASSERT_EQ(strings.size(), 43u);
  for (const auto& s : strings) {
    std::string text = s["text"].get<std::string>();
    SCOPED_TRACE(text.substr(0, 80));
    EXPECT_EQ(tok.encode(text), ids_of(s["ids"]));
    EXPECT_EQ(tok.encode(text, {.add_special_tokens = true}), ids_of(s["ids_special"]));
    EXPECT_EQ(tok.decode(ids_of(s["ids"])), s["decoded"].get<std::string>());
  }
}

TEST_P(TokenizerFixture, CorpusEncodesExactly) {
  const Tokenizer& tok = real_tokenizer(GetParam());
  const auto& corpus = text_fixture(GetParam())["corpus"];
  std::string text = kjv_prefix(corpus["chars"].get<size_t>());
  ASSERT_FALSE(text.empty()) << "the `bible` command (Debian bible-kjv) is needed for the corpus";
  std::vector<int32_t> ids = tok.encode(text);
  std::vector<int32_t> expected = ids_of(corpus["ids"]);
  ASSERT_EQ(ids.size(), expected.size());
  for (size_t i = 0; i < ids.size(); ++i) ASSERT_EQ(ids[i], expected[i]) << "first difference at token " << i;
  EXPECT_EQ(tok.decode(ids), text);  // the round trip (the corpus is already normalized)
}

TEST_P(TokenizerFixture, RenderedChatsEncodeExactly) {
  const Tokenizer& tok = real_tokenizer(GetParam());
  int checked = 0;
  for (const auto& chat : text_fixture(GetParam())["chats"]) {
    if (!chat.contains("rendered")) continue;
    std::string rendered = chat["rendered"].get<std::string>();
    SCOPED_TRACE(rendered.substr(0, 120));
    EXPECT_EQ(tok.encode(rendered), ids_of(chat["ids"]));
    EXPECT_EQ(tok.decode(ids_of(chat["ids"])), rendered);
    ++checked;
  }
  EXPECT_GE(checked, 5);
}

TEST_P(TokenizerFixture, RoundTripIsNormalizedText) {
  const Tokenizer& tok = real_tokenizer(GetParam());
  for (const auto& s : text_fixture(GetParam())["strings"]) {
    std::string text = s["text"].get<std::string>();
    EXPECT_EQ(tok.decode(tok.encode(text)), s["decoded"].get<std::string>()) << text.substr(0, 80);
    // Skipping special tokens drops exactly the post-processor's BOS/EOS and the special tokens
    // written in the text.
    EXPECT_EQ(tok.decode(tok.encode(text, {.add_special_tokens = true}), {.skip_special_tokens = true}),
              tok.decode(tok.encode(text), {.skip_special_tokens = true}));
  }
}

INSTANTIATE_TEST_SUITE_P(Real, TokenizerFixture, ::testing::Values("qwen3", "gemma3"));

}  // namespace
}  // namespace kestrel::test
