// The streaming detokenizer: only complete UTF-8 comes out, and the pieces add up to decode().
#include <gtest/gtest.h>

#include "tiny_tokenizer.h"
#include "tokenizer_test_util.h"

namespace kestrel::test {
namespace {

using tok::StreamDecoder;
using tok::Tokenizer;

// Streams ids one at a time; checks each chunk is valid UTF-8; returns the concatenation.
std::string stream(const Tokenizer& t, const std::vector<int32_t>& ids, tok::DecodeOptions options = {}) {
  StreamDecoder decoder(t, options);
  std::string out;
  for (int32_t id : ids) {
    std::string chunk = decoder.push(id);
    EXPECT_EQ(tok::find_invalid_utf8(chunk), std::string::npos) << "partial UTF-8 after id " << id;
    out += chunk;
  }
  out += decoder.finish();
  return out;
}

const char* kRare[] = {
    "\xF0\xA0\x80\x81\xF0\xAA\x9B\x96",  // CJK extension B: Gemma falls back to <0xNN> tokens
    "\xEE\x80\x80x",                     // private use U+E000: Qwen splits it over byte tokens
    "price: 5\xE2\x82\xAC, \xF0\x9F\xA7\xBF ok",
};

class TokenizerStream : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerStream, ChunksAreCompleteAndAddUpToDecode) {
  const Tokenizer& t = real_tokenizer(GetParam());
  for (const auto& s : text_fixture(GetParam())["strings"]) {
    std::vector<int32_t> ids = s["ids_special"].get<std::vector<int32_t>>();
    EXPECT_EQ(stream(t, ids), t.decode(ids));
    EXPECT_EQ(stream(t, ids, {.skip_special_tokens = true}), t.decode(ids, {.skip_special_tokens = true}));
  }
  for (const char* text : kRare) {
    std::vector<int32_t> ids = t.encode(text);
    EXPECT_EQ(stream(t, ids), text);
  }
}

TEST_P(TokenizerStream, HoldsACharacterSplitAcrossTokens) {
  const Tokenizer& t = real_tokenizer(GetParam());
  std::vector<int32_t> ids = t.encode(kRare[0]);
  ASSERT_GT(ids.size(), 2u);  // byte tokens (Gemma: <0xF0><0xA0>...; Qwen: byte-level pieces)
  StreamDecoder decoder(t);
  std::string first = decoder.push(ids[0]);
  EXPECT_EQ(first, "");  // the first token alone is not a whole character
  std::string rest;
  for (size_t i = 1; i < ids.size(); ++i) rest += decoder.push(ids[i]);
  EXPECT_EQ(rest + decoder.finish(), kRare[0]);
}

INSTANTIATE_TEST_SUITE_P(Real, TokenizerStream, ::testing::Values("qwen3", "gemma3"));

TEST(TokenizerStreamTiny, ByteFallbackEuroSplitOverThreeTokens) {
  Tokenizer t = tiny(tiny_fallback_json());
  std::vector<int32_t> euro = {0xE2 + 1, 0x82 + 1, 0xAC + 1};  // <0xE2><0x82><0xAC>
  StreamDecoder decoder(t);
  EXPECT_EQ(decoder.push(euro[0]), "");
  EXPECT_EQ(decoder.push(euro[1]), "");
  EXPECT_EQ(decoder.push(euro[2]), "\xE2\x82\xAC");
  EXPECT_EQ(decoder.push(257), "a");
  // A character that never completes is flushed as U+FFFD per byte (ByteFallback's rule), at the
  // next ordinary token or at finish().
  EXPECT_EQ(decoder.push(0xE2 + 1), "");
  EXPECT_EQ(decoder.push(258), "\xEF\xBF\xBD" "b");
  EXPECT_EQ(decoder.push(0xE2 + 1), "");
  EXPECT_EQ(decoder.push(0x82 + 1), "");
  EXPECT_EQ(decoder.finish(), "\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(TokenizerStreamTiny, ByteLevelSplitAcrossTokens) {
  Tokenizer t = tiny(tiny_byte_level_json());
  StreamDecoder decoder(t);
  EXPECT_EQ(decoder.push(0xE2), "");
  EXPECT_EQ(decoder.push(0x82), "");
  EXPECT_EQ(decoder.push(0xAC), "\xE2\x82\xAC");
  EXPECT_EQ(decoder.push(0xFF), "\xEF\xBF\xBD");  // never valid: replaced at once
  EXPECT_EQ(decoder.push(0xF0), "");
  EXPECT_EQ(decoder.push(256), "\xEF\xBF\xBD" "ab");  // lossy: one U+FFFD for the cut sequence
}

}  // namespace
}  // namespace kestrel::test
