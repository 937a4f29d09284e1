#include "tokenizer/pre_tokenizer.h"

namespace kestrel::tok {
namespace {

void find_literal(std::string_view text, const std::string& literal, uint32_t base, std::vector<Span>& out) {
  size_t pos = 0;
  while ((pos = text.find(literal, pos)) != std::string_view::npos) {
    out.push_back({static_cast<uint32_t>(base + pos), static_cast<uint32_t>(base + pos + literal.size())});
    pos += literal.size();
  }
}

// Cuts `piece` at `matches` (sorted, inside the piece) according to the behaviour.
void cut(Span piece, const std::vector<Span>& matches, SplitBehavior behavior, std::vector<Span>& out) {
  auto emit = [&](uint32_t b, uint32_t e) {
    if (e > b) out.push_back({b, e});
  };
  uint32_t from = piece.begin;  // start of the text not yet emitted
  for (const Span& m : matches) {
    switch (behavior) {
      case SplitBehavior::kIsolated:
        emit(from, m.begin);
        emit(m.begin, m.end);
        from = m.end;
        break;
      case SplitBehavior::kRemoved:
        emit(from, m.begin);
        from = m.end;
        break;
      case SplitBehavior::kMergedWithPrevious:
        emit(from, m.end);
        from = m.end;
        break;
      case SplitBehavior::kMergedWithNext:
        emit(from, m.begin);
        from = m.begin;
        break;
    }
  }
  emit(from, piece.end);
}

}  // namespace

void PreTokenizer::split(std::string_view text, std::vector<Span>& pieces) const {
  pieces.clear();
  if (text.empty()) return;
  pieces.push_back({0, static_cast<uint32_t>(text.size())});
  thread_local std::vector<Span> matches, next;
  for (const SplitStep& step : steps_) {
    next.clear();
    for (const Span& piece : pieces) {
      matches.clear();
      std::string_view sub = text.substr(piece.begin, piece.end - piece.begin);
      if (step.regex) {
        step.regex->find_all(sub, piece.begin, matches);
      } else {
        find_literal(sub, step.literal, piece.begin, matches);
      }
      if (matches.empty()) {
        next.push_back(piece);
      } else {
        cut(piece, matches, step.behavior, next);
      }
    }
    pieces.swap(next);
  }
}

}  // namespace kestrel::tok
