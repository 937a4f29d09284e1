// The normalizers kestrel supports: NFC and Replace (literal string), in a Sequence.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kestrel::tok {

struct NormalizerStep {
  enum class Kind { kNfc, kReplace };
  Kind kind;
  std::string from, to;  // kReplace: every occurrence of `from` (non-empty) becomes `to`
};

class Normalizer {
 public:
  Normalizer() = default;
  explicit Normalizer(std::vector<NormalizerStep> steps) : steps_(std::move(steps)) {}

  bool empty() const { return steps_.empty(); }

  // Normalizes `text` (valid UTF-8). Returns a view of either `text` itself (nothing changed) or
  // `scratch`, which it overwrites.
  std::string_view apply(std::string_view text, std::string& scratch) const;

 private:
  std::vector<NormalizerStep> steps_;
};

}  // namespace kestrel::tok
