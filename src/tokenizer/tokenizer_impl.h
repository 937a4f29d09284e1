// Internal: the parts of a loaded Tokenizer. Built by tokenizer_json.cc, run by tokenizer.cc.
#pragma once

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::tok {

struct Tokenizer::Impl {
  std::string name;  // the file, for error messages

  // ---- encoding
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  std::optional<Bpe> bpe;
  AddedTokenMatcher raw_added;         // added tokens with normalized=false
  AddedTokenMatcher normalized_added;  // added tokens with normalized=true
  std::vector<int32_t> prefix_ids;     // post-processor: before the sequence
  std::vector<int32_t> suffix_ids;     // ... and after it

  // ---- vocabulary and decoding, indexed by id: [vocab_size]
  std::vector<std::string> tokens;      // text as in tokenizer.json; empty for an unused id
  std::vector<uint8_t> present;         // 1 where an id names a token
  std::vector<std::string> pieces;      // bytes after the decoders' per-token steps
  std::vector<uint8_t> raw;             // 1: piece is raw bytes (may be partial UTF-8)
  std::vector<uint8_t> special;         // 1: added token with special=true
  std::unordered_map<std::string, int32_t> added_ids;  // added token content → id
  bool lossy = false;  // raw bytes decode like from_utf8_lossy (ByteLevel); else per-run fallback

  std::optional<int32_t> bos, eos;
};

// Parses tokenizer.json (and tokenizer_config.json when config_json is not empty).
std::unique_ptr<Tokenizer::Impl> parse_tokenizer(std::string_view tokenizer_json, std::string_view config_json,
                                                 const std::string& name);

}  // namespace kestrel::tok
