// Tokenizer building blocks on small inputs: UTF-8, NFC, the byte-level alphabet, BPE merging,
// added tokens, byte fallback and the post-processor, with hand-made tokenizer.json documents.
#include <gtest/gtest.h>

#include <fstream>

#include "core/error.h"
#include "support/paths.h"
#include "tiny_tokenizer.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/nfc.h"
#include "tokenizer/utf8.h"

namespace kestrel::test {
namespace {

using tok::Tokenizer;
using Ids = std::vector<int32_t>;

TEST(TokenizerUtf8, FindsTheFirstInvalidByte) {
  EXPECT_EQ(tok::find_invalid_utf8("hello"), std::string::npos);
  EXPECT_EQ(tok::find_invalid_utf8("h\xC3\xA9llo \xE2\x82\xAC \xF0\x9F\x98\x80"), std::string::npos);
  EXPECT_EQ(tok::find_invalid_utf8("abcdefghij\xFF"), 10u);
  EXPECT_EQ(tok::find_invalid_utf8("ab\xC0\xAF"), 2u);          // overlong
  EXPECT_EQ(tok::find_invalid_utf8("ab\xED\xA0\x80"), 2u);      // surrogate
  EXPECT_EQ(tok::find_invalid_utf8("ab\xF4\x90\x80\x80"), 2u);  // beyond U+10FFFF
  EXPECT_EQ(tok::find_invalid_utf8("ab\xE2\x82"), 2u);          // truncated
}

TEST(TokenizerUtf8, LossyReplacesMaximalSubparts) {
  std::string out;
  tok::append_utf8_lossy(out, "a\xE2\x82" "b\xFF\xF0\x9F\x98\x80");
  EXPECT_EQ(out, "a\xEF\xBF\xBD" "b\xEF\xBF\xBD\xF0\x9F\x98\x80");
  EXPECT_EQ(tok::complete_utf8_prefix("ab\xE2\x82"), 2u);
  EXPECT_EQ(tok::complete_utf8_prefix("ab\xFF"), 3u);
}

TEST(TokenizerNfc, MatchesPythonUnicodedata) {
  std::ifstream in(data_path("tokenizer/nfc_cases.json"));
  auto j = nlohmann::json::parse(in);
  int changed = 0;
  for (const auto& c : j["cases"]) {
    std::string text = c[0].get<std::string>(), expected = c[1].get<std::string>();
    std::string out;
    tok::append_nfc(out, text);
    EXPECT_EQ(out, expected) << nlohmann::json(text).dump();
    if (tok::nfc_quick_check(text)) {
      EXPECT_EQ(text, expected);
    }
    changed += text != expected;
  }
  EXPECT_GT(changed, 100);
}

TEST(TokenizerByteLevel, AlphabetRoundTrips) {
  EXPECT_EQ(tok::byte_level_char(' '), U'\u0120');
  EXPECT_EQ(tok::byte_level_char('\n'), U'\u010A');
  EXPECT_EQ(tok::byte_level_char('A'), U'A');
  for (int b = 0; b < 256; ++b) EXPECT_EQ(tok::byte_level_byte(tok::byte_level_char(b)), b);
  EXPECT_FALSE(tok::byte_level_byte(U'\u4E2D').has_value());
}

TEST(TokenizerTiny, ByteFallbackMergesAndTemplate) {
  Tokenizer t = tiny(tiny_fallback_json());
  // "ab ab": normalized to "ab▁ab"; merges ab, ▁ab.
  EXPECT_EQ(t.encode("ab ab"), (Ids{261, 262}));
  EXPECT_EQ(t.encode("abc"), (Ids{263}));
  EXPECT_EQ(t.encode("ab", {.add_special_tokens = true}), (Ids{264, 261}));
  // "é" is not in the vocab: its two UTF-8 bytes become <0xC3><0xA9>.
  EXPECT_EQ(t.encode("\xC3\xA9"), (Ids{0xC3 + 1, 0xA9 + 1}));
  EXPECT_EQ(t.decode(t.encode("ab é<s>c")), "ab é<s>c");
  EXPECT_EQ(t.decode(t.encode("ab é<s>c"), {.skip_special_tokens = true}), "ab éc");
  // An invalid run of byte tokens decodes to one U+FFFD per byte, like Hugging Face's ByteFallback.
  EXPECT_EQ(t.decode(Ids{0xE2 + 1, 0x82 + 1, 257}), "\xEF\xBF\xBD\xEF\xBF\xBD" "a");
  EXPECT_EQ(t.vocab_size(), 265);
  EXPECT_EQ(t.token_to_id("<s>"), 264);
  EXPECT_EQ(t.id_to_token(262), "\u2581ab");
}

TEST(TokenizerTiny, UnknownCharactersFuseIntoOneUnk) {
  auto j = tiny_fallback_json();
  j["model"]["byte_fallback"] = false;
  Tokenizer t = tiny(j);
  EXPECT_EQ(t.encode("a\xC3\xA9\xC3\xA9" "b"), (Ids{257, 0, 258}));
  j["model"]["fuse_unk"] = false;
  EXPECT_EQ(tiny(j).encode("a\xC3\xA9\xC3\xA9" "b"), (Ids{257, 0, 0, 258}));
}

TEST(TokenizerTiny, MergesInBothFormatsAgree) {
  auto j = tiny_fallback_json();
  Tokenizer pairs = tiny(j);
  j["model"]["merges"] = nlohmann::json::array({"a b", "\u2581 ab", "ab c"});
  Tokenizer strings = tiny(j);
  for (const char* text : {"ab ab abc", "cab  ba", "abcabc"}) EXPECT_EQ(pairs.encode(text), strings.encode(text));
}

TEST(TokenizerTiny, IgnoreMergesTakesWholeWords) {
  auto j = tiny_fallback_json();
  j["model"]["merges"] = nlohmann::json::array({nlohmann::json::array({"a", "b"}), nlohmann::json::array({"\u2581", "ab"})});  // "abc" no longer reachable by merges
  EXPECT_EQ(tiny(j).encode("abc"), (Ids{261, 259}));
  j["model"]["ignore_merges"] = true;
  EXPECT_EQ(tiny(j).encode("abc"), (Ids{263}));
}

TEST(TokenizerTiny, AddedTokensLongestMatchAndStrip) {
  auto j = tiny_fallback_json();
  auto token = [](int id, const char* content, bool lstrip, bool rstrip, bool normalized) {
    return nlohmann::json{{"id", id}, {"content", content}, {"single_word", false}, {"lstrip", lstrip},
                          {"rstrip", rstrip}, {"normalized", normalized}, {"special", false}};
  };
  j["added_tokens"].push_back(token(265, "<s><s>", false, false, false));
  j["added_tokens"].push_back(token(266, "[x]", true, true, false));
  j["added_tokens"].push_back(token(267, "\u2581c", false, false, true));  // matched after normalization
  Tokenizer t = tiny(j);
  EXPECT_EQ(t.encode("<s><s><s>"), (Ids{265, 264}));
  EXPECT_EQ(t.encode("ab [x] ab"), (Ids{261, 266, 261}));  // the spaces go with [x]
  EXPECT_EQ(t.encode("ab c"), (Ids{261, 267}));
}

TEST(TokenizerTiny, ByteLevelModel) {
  Tokenizer t = tiny(tiny_byte_level_json());
  EXPECT_EQ(t.encode("ab a"), (Ids{256, 257}));
  EXPECT_EQ(t.encode("\xE2\x82\xAC"), (Ids{0xE2, 0x82, 0xAC}));
  EXPECT_EQ(t.decode(Ids{256, 257, 0xE2, 0x82, 0xAC}), "ab a\xE2\x82\xAC");
  // ByteLevel decoding is lossy over the whole output: a cut character is one U+FFFD.
  EXPECT_EQ(t.decode(Ids{0xE2, 0x82, 'a'}), "\xEF\xBF\xBD" "a");
  // NFC applies before BPE: e + combining acute is é (two bytes).
  EXPECT_EQ(t.encode("e\xCC\x81"), (Ids{0xC3, 0xA9}));
}

}  // namespace
}  // namespace kestrel::test
