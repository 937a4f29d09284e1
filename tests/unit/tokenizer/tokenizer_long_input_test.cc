// Long inputs: hundreds of thousands of characters and 40,000 repeats of one character go
// through the PCRE2 pre-tokenizer and BPE without overflowing the stack or going quadratic.
#include <gtest/gtest.h>

#include <chrono>

#include "tokenizer_test_util.h"

namespace kestrel::test {
namespace {

using Clock = std::chrono::steady_clock;

std::string repeat(const std::string& unit, size_t n) {
  std::string out;
  out.reserve(unit.size() * n);
  for (size_t i = 0; i < n; ++i) out += unit;
  return out;
}

class TokenizerLongInput : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerLongInput, FortyThousandRepeatsOfOneCharacter) {
  const tok::Tokenizer& t = real_tokenizer(GetParam());
  for (const std::string unit : {" ", "a", "!", "\n", "1", "'", "\r\n", "\xC3\xA9", "\xE4\xB8\xAD", "\t",
                                 "\xF0\x9F\x98\x80", "'s", "a ", " \n", "\xE2\x96\x81"}) {
    std::string text = repeat(unit, 40000);
    auto t0 = Clock::now();
    std::vector<int32_t> ids = t.encode(text);
    double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    EXPECT_FALSE(ids.empty());
    // Gemma's decoder turns every U+2581 into a space, so that one does not round-trip.
    bool sentencepiece_space = unit == "\xE2\x96\x81" && GetParam() == "gemma3";
    EXPECT_TRUE(t.decode(ids) == (sentencepiece_space ? repeat(" ", 40000) : text)) << nlohmann::json(unit).dump();
    EXPECT_LT(seconds, 2.0) << nlohmann::json(unit).dump() << " x 40000 took " << seconds << " s";
  }
}

TEST_P(TokenizerLongInput, HalfAMillionCharactersAsOneText) {
  const tok::Tokenizer& t = real_tokenizer(GetParam());
  // The corpus without its newlines: one long line of words, then a 300,000-space run before a word.
  std::string text = kjv_prefix(200000);
  ASSERT_FALSE(text.empty()) << "the `bible` command (Debian bible-kjv) is needed";
  for (char& c : text) if (c == '\n') c = ' ';
  text += text + repeat(" ", 300000) + "end";
  auto t0 = Clock::now();
  std::vector<int32_t> ids = t.encode(text);
  double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_TRUE(t.decode(ids) == text);
  EXPECT_LT(seconds, 5.0);
}

INSTANTIATE_TEST_SUITE_P(Real, TokenizerLongInput, ::testing::Values("qwen3", "gemma3"));

}  // namespace
}  // namespace kestrel::test
