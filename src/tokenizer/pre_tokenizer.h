// The pre-tokenizers kestrel supports: Split (a PCRE2 regex or a literal string, behaviour
// Isolated / Removed / MergedWithPrevious / MergedWithNext) in a Sequence. ByteLevel with
// use_regex=false only marks the model as byte-level and splits nothing.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex.h"

namespace kestrel::tok {

enum class SplitBehavior { kIsolated, kRemoved, kMergedWithPrevious, kMergedWithNext };

struct SplitStep {
  std::optional<Regex> regex;  // set: split on its matches
  std::string literal;         // otherwise: split on occurrences of this non-empty string
  SplitBehavior behavior = SplitBehavior::kIsolated;
};

class PreTokenizer {
 public:
  PreTokenizer() = default;
  explicit PreTokenizer(std::vector<SplitStep> steps) : steps_(std::move(steps)) {}

  // Splits text (valid UTF-8) into non-empty pieces, left to right; writes them to `pieces`.
  void split(std::string_view text, std::vector<Span>& pieces) const;

 private:
  std::vector<SplitStep> steps_;
};

}  // namespace kestrel::tok
