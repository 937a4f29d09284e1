// Reads tokenizer.json in one SAX pass: the two large members (model.vocab, a map of up to a few
// hundred thousand tokens, and model.merges, up to a million pairs) go straight into flat
// containers; everything else becomes an nlohmann DOM as usual. Loading Gemma 3's 33 MB file this
// way takes a fraction of building a DOM for all of it.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kestrel::tok {

struct TokenizerJson {
  nlohmann::json dom;  // the whole document, with model.vocab / model.merges null when captured
  // model.vocab when it is an object of integers (else left in the DOM for the loader to refuse).
  std::optional<std::vector<std::pair<std::string, int64_t>>> vocab;
  // model.merges when it is an array: "a b" strings are split at load, pairs kept as they are.
  struct Merge {
    std::string a, b;
    bool is_string;  // "a b" form: a holds the whole string
    bool ok;         // false: not a string and not an array of two strings
  };
  std::optional<std::vector<Merge>> merges;
};

// Throws Error(kBadInput) naming `name` when the text is not valid JSON or a vocab entry is not an
// integer.
TokenizerJson read_tokenizer_json(std::string_view text, const std::string& name);

}  // namespace kestrel::tok
