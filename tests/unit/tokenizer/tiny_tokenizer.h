// Small hand-made tokenizer.json documents for unit tests: a SentencePiece-style BPE with byte
// fallback, and a byte-level BPE. Tests mutate them to check every load error.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace kestrel::test {

// vocab: <unk>=0, <0x00>..<0xFF> = 1..256, then a b c ▁ ab ▁ab abc (257..263); added <s>=264.
inline nlohmann::json tiny_fallback_json() {
  nlohmann::json vocab = nlohmann::json::object();
  vocab["<unk>"] = 0;
  char name[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab[name] = b + 1;
  }
  int next = 257;
  for (const char* t : {"a", "b", "c", "\u2581", "ab", "\u2581ab", "abc"}) vocab[t] = next++;
  return {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens",
       {{{"id", 264}, {"content", "<s>"}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
         {"normalized", false}, {"special", true}}}},
      {"normalizer", {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}},
      {"pre_tokenizer", {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "MergedWithPrevious"}, {"invert", false}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"pair", nlohmann::json::array()},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {264}}, {"tokens", {"<s>"}}}}}}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
          {{"type", "ByteFallback"}},
          {{"type", "Fuse"}}}}}},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", "<unk>"}, {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr}, {"fuse_unk", true}, {"byte_fallback", true}, {"ignore_merges", false},
        {"vocab", vocab}, {"merges", nlohmann::json::array({nlohmann::json::array({"a", "b"}), nlohmann::json::array({"\u2581", "ab"}),
                                          nlohmann::json::array({"ab", "c"})})}}}};
}

// Byte-level: the 256 byte tokens (ids 0..255), then "ab" (256), " a" (257) as byte-level text.
inline nlohmann::json tiny_byte_level_json() {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) {
    std::string t;
    tok::append_utf8(t, tok::byte_level_char(static_cast<uint8_t>(b)));
    vocab[t] = b;
  }
  std::string space = tok::byte_level_encode(" ");
  vocab["ab"] = 256;
  vocab[space + "a"] = 257;
  nlohmann::json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
  return {
      {"version", "1.0"},
      {"added_tokens", nlohmann::json::array()},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", " ?\\p{L}+|\\p{N}|\\s+|[^\\s\\p{L}\\p{N}]+"}}}, {"behavior", "Isolated"}, {"invert", false}},
          byte_level}}}},
      {"post_processor", byte_level},
      {"decoder", byte_level},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", ""},
        {"end_of_word_suffix", ""}, {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
        {"vocab", vocab}, {"merges", {"a b", space + " a"}}}}};
}

inline tok::Tokenizer tiny(const nlohmann::json& j) { return tok::Tokenizer::from_json(j.dump(), {}, "tiny.json"); }

}  // namespace kestrel::test
