// Added tokens (special or not): matched in the text before normalization and pre-tokenization,
// leftmost-longest, with a byte trie. Tokens with normalized=false are matched in the raw text;
// tokens with normalized=true in each normalized piece between them (as Hugging Face does).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/regex.h"

namespace kestrel::tok {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool lstrip = false;      // the match swallows whitespace on its left
  bool rstrip = false;      // ... and on its right
  bool normalized = false;  // matched in normalized text rather than raw text
};

struct Segment {
  Span span;       // byte range in the text
  int32_t id;      // the added token's id, or -1 for plain text to tokenize
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  // Builds a matcher over the tokens with tokens[i].normalized == normalized.
  AddedTokenMatcher(const std::vector<AddedToken>& tokens, bool normalized);

  bool empty() const { return nodes_.size() <= 1; }

  // Splits text into plain-text segments and matched tokens, appending to out.
  void split(std::string_view text, uint32_t base, std::vector<Segment>& out) const;

 private:
  struct Node {
    int32_t token = -1;  // index into tokens_ when a token ends here
  };
  int32_t child(int32_t node, unsigned char byte) const;

  std::vector<Node> nodes_;                          // [0] is the root
  std::unordered_map<uint64_t, int32_t> children_;   // (node << 8 | byte) → node
  bool first_byte_[256] = {};
  std::vector<AddedToken> tokens_;
};

}  // namespace kestrel::tok
