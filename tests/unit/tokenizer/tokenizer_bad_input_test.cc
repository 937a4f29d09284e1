// Malformed tokenizer.json documents and bad text: each a clear Error naming the fault.
#include <gtest/gtest.h>

#include "core/error.h"
#include "support/paths.h"
#include "tiny_tokenizer.h"

namespace kestrel::test {
namespace {

using nlohmann::json;

// Loads j and expects an Error of `kind` whose message contains `needle`.
void expect_load_error(const json& j, ErrorKind kind, const std::string& needle) {
  try {
    tiny(j);
    ADD_FAILURE() << "loaded without error; expected: " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("tiny.json"), std::string::npos) << e.what();
  }
}

TEST(TokenizerBadInput, NotJson) {
  EXPECT_THROW(tok::Tokenizer::from_json("{\"model\": ", {}, "tiny.json"), Error);
  expect_load_error(json::array(), ErrorKind::kBadInput, "top level");
}

TEST(TokenizerBadInput, MissingVocab) {
  auto j = tiny_fallback_json();
  j["model"].erase("vocab");
  expect_load_error(j, ErrorKind::kBadInput, "model.vocab is missing");
  j = tiny_fallback_json();
  j.erase("model");
  expect_load_error(j, ErrorKind::kBadInput, "model is missing");
}

TEST(TokenizerBadInput, MergesNamingUnknownTokens) {
  auto j = tiny_fallback_json();
  j["model"]["merges"].push_back(json::array({"a", "zz"}));
  expect_load_error(j, ErrorKind::kBadInput, "model.merges[3] names token 'zz'");
  j = tiny_fallback_json();
  j["model"]["merges"].push_back(json::array({"b", "a"}));  // "ba" is not a token
  expect_load_error(j, ErrorKind::kBadInput, "names token 'ba'");
  j = tiny_fallback_json();
  j["model"]["merges"].push_back("a b c");
  expect_load_error(j, ErrorKind::kBadInput, "is not two tokens");
  j = tiny_fallback_json();
  j["model"]["merges"].push_back(7);
  expect_load_error(j, ErrorKind::kBadInput, "model.merges[3]");
}

TEST(TokenizerBadInput, IdsBeyondTheVocab) {
  auto j = tiny_fallback_json();
  j["model"]["vocab"]["c"] = 100000;
  expect_load_error(j, ErrorKind::kBadInput, "beyond the vocabulary");
  j = tiny_fallback_json();
  j["added_tokens"][0]["id"] = 5000;
  expect_load_error(j, ErrorKind::kBadInput, "beyond the vocabulary");
  j = tiny_fallback_json();
  j["model"]["vocab"]["c"] = -1;
  expect_load_error(j, ErrorKind::kBadInput, "beyond the vocabulary");
  j = tiny_fallback_json();
  j["post_processor"]["special_tokens"]["<s>"]["ids"] = json::array({999});
  expect_load_error(j, ErrorKind::kBadInput, "post_processor names token id 999");
}

TEST(TokenizerBadInput, DuplicateIds) {
  auto j = tiny_fallback_json();
  j["model"]["vocab"]["c"] = 257;  // also "a"
  expect_load_error(j, ErrorKind::kBadInput, "gives id 257 to both");
  j = tiny_fallback_json();
  j["added_tokens"].push_back(j["added_tokens"][0]);
  j["added_tokens"][1]["content"] = "</s>";
  expect_load_error(j, ErrorKind::kBadInput, "added_tokens gives id 264 to two tokens");
  j = tiny_fallback_json();
  j["added_tokens"][0]["id"] = 257;  // the vocab's "a"
  expect_load_error(j, ErrorKind::kBadInput, "which model.vocab gives to 'a'");
}

TEST(TokenizerBadInput, InvalidByteTokens) {
  auto j = tiny_fallback_json();
  j["model"]["vocab"]["<0xZZ>"] = 264;
  j["added_tokens"][0]["id"] = 265;
  j["post_processor"]["special_tokens"]["<s>"]["ids"] = json::array({265});
  expect_load_error(j, ErrorKind::kBadInput, "'<0xZZ>' (id 264) is not a valid byte token");
  j = tiny_fallback_json();
  j["model"]["vocab"].erase("<0x7F>");
  j["model"]["vocab"]["<0x7f>"] = 0x7F + 1;
  expect_load_error(j, ErrorKind::kBadInput, "'<0x7f>'");
  j = tiny_fallback_json();
  j["model"]["vocab"].erase("<0x41>");
  j["model"]["vocab"]["q"] = 0x41 + 1;
  expect_load_error(j, ErrorKind::kBadInput, "byte_fallback needs all 256");
}

TEST(TokenizerBadInput, UnsupportedTypesAreRefusedByName) {
  auto j = tiny_fallback_json();
  j["model"]["type"] = "Unigram";
  expect_load_error(j, ErrorKind::kUnsupported, "model type 'Unigram' is not supported");
  j = tiny_fallback_json();
  j["normalizer"] = {{"type", "NFKC"}};
  expect_load_error(j, ErrorKind::kUnsupported, "normalizer type 'NFKC' is not supported");
  j = tiny_fallback_json();
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  expect_load_error(j, ErrorKind::kUnsupported, "pre_tokenizer type 'Whitespace' is not supported");
  j = tiny_fallback_json();
  j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}}}}};
  expect_load_error(j, ErrorKind::kUnsupported, "pre_tokenizer.pretokenizers[0] type 'Digits' is not supported");
  j = tiny_fallback_json();
  j["decoder"]["decoders"][2] = {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}};
  expect_load_error(j, ErrorKind::kUnsupported, "decoder.decoders[2] type 'Strip' is not supported");
  j = tiny_fallback_json();
  j["post_processor"] = {{"type", "BertProcessing"}};
  expect_load_error(j, ErrorKind::kUnsupported, "post_processor type 'BertProcessing' is not supported");
  j = tiny_fallback_json();
  j["model"]["dropout"] = 0.1;
  expect_load_error(j, ErrorKind::kUnsupported, "model.dropout");
  j = tiny_fallback_json();
  j["truncation"] = {{"max_length", 5}};
  expect_load_error(j, ErrorKind::kUnsupported, "truncation");
  j = tiny_fallback_json();
  j["added_tokens"][0]["single_word"] = true;
  expect_load_error(j, ErrorKind::kUnsupported, "single_word");
  j = tiny_byte_level_json();
  j["pre_tokenizer"]["pretokenizers"][1]["use_regex"] = true;
  expect_load_error(j, ErrorKind::kUnsupported, "use_regex");
}

TEST(TokenizerBadInput, RegexThatDoesNotCompile) {
  auto j = tiny_byte_level_json();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(\\p{L}+";
  expect_load_error(j, ErrorKind::kBadInput, "does not compile");
}

TEST(TokenizerBadInput, InvalidUtf8TextNamesTheOffset) {
  auto t = tiny(tiny_fallback_json());
  try {
    t.encode("abc\xC3(");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
    EXPECT_NE(std::string(e.what()).find("byte offset 3"), std::string::npos) << e.what();
  }
}

TEST(TokenizerBadInput, DecodeRefusesUnknownIds) {
  auto t = tiny(tiny_fallback_json());
  EXPECT_THROW(t.decode(std::vector<int32_t>{1, 265}), Error);
  EXPECT_THROW(t.decode(std::vector<int32_t>{-1}), Error);
  EXPECT_THROW(t.id_to_token(1000), Error);
}

TEST(TokenizerBadInput, MissingFile) {
  try {
    tok::Tokenizer::load(work_path("no-such-model"));
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no-such-model"), std::string::npos);
  }
}

}  // namespace
}  // namespace kestrel::test
