#include "tokenizer/normalizer.h"

#include "tokenizer/nfc.h"

namespace kestrel::tok {
namespace {

void replace_all(std::string_view text, const std::string& from, const std::string& to, std::string& out) {
  size_t pos = 0;
  while (true) {
    size_t hit = text.find(from, pos);
    if (hit == std::string_view::npos) break;
    out.append(text.data() + pos, hit - pos);
    out += to;
    pos = hit + from.size();
  }
  out.append(text.data() + pos, text.size() - pos);
}

}  // namespace

std::string_view Normalizer::apply(std::string_view text, std::string& scratch) const {
  for (const auto& step : steps_) {
    if (step.kind == NormalizerStep::Kind::kNfc) {
      if (nfc_quick_check(text)) continue;
    } else if (text.find(step.from) == std::string_view::npos) {
      continue;
    }
    // `text` may point into scratch: build the result aside, then move it in.
    std::string result;
    result.reserve(text.size() + text.size() / 2);
    if (step.kind == NormalizerStep::Kind::kNfc) {
      append_nfc(result, text);
    } else {
      replace_all(text, step.from, step.to, result);
    }
    scratch = std::move(result);
    text = scratch;
  }
  return text;
}

}  // namespace kestrel::tok
