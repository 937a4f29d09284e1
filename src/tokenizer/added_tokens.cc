#include "tokenizer/added_tokens.h"

namespace kestrel::tok {
namespace {

bool is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(const std::vector<AddedToken>& tokens, bool normalized) {
  nodes_.push_back({});
  for (const AddedToken& token : tokens) {
    if (token.normalized != normalized || token.content.empty()) continue;
    int32_t node = 0;
    for (unsigned char b : token.content) {
      uint64_t key = (static_cast<uint64_t>(node) << 8) | b;
      auto it = children_.find(key);
      if (it == children_.end()) {
        nodes_.push_back({});
        it = children_.emplace(key, static_cast<int32_t>(nodes_.size() - 1)).first;
      }
      node = it->second;
    }
    // A repeated content keeps the first token, as the first one listed wins in Hugging Face.
    if (nodes_[node].token < 0) {
      nodes_[node].token = static_cast<int32_t>(tokens_.size());
      tokens_.push_back(token);
    }
    first_byte_[static_cast<unsigned char>(token.content[0])] = true;
  }
}

int32_t AddedTokenMatcher::child(int32_t node, unsigned char byte) const {
  auto it = children_.find((static_cast<uint64_t>(node) << 8) | byte);
  return it == children_.end() ? -1 : it->second;
}

void AddedTokenMatcher::split(std::string_view text, uint32_t base, std::vector<Segment>& out) const {
  const size_t n = text.size();
  size_t text_from = 0;  // start of the pending plain text
  size_t i = 0;
  while (i < n) {
    if (!first_byte_[static_cast<unsigned char>(text[i])]) { ++i; continue; }
    int32_t node = 0, best = -1;
    size_t best_end = 0;
    for (size_t k = i; k < n; ++k) {
      node = child(node, static_cast<unsigned char>(text[k]));
      if (node < 0) break;
      if (nodes_[node].token >= 0) {
        best = nodes_[node].token;
        best_end = k + 1;
      }
    }
    if (best < 0) { ++i; continue; }
    const AddedToken& token = tokens_[best];
    size_t begin = i, end = best_end;
    if (token.lstrip) while (begin > text_from && is_space(static_cast<unsigned char>(text[begin - 1]))) --begin;
    if (token.rstrip) while (end < n && is_space(static_cast<unsigned char>(text[end]))) ++end;
    if (begin > text_from) {
      out.push_back({{static_cast<uint32_t>(base + text_from), static_cast<uint32_t>(base + begin)}, -1});
    }
    out.push_back({{static_cast<uint32_t>(base + begin), static_cast<uint32_t>(base + end)}, token.id});
    text_from = i = end;
  }
  if (n > text_from) {
    out.push_back({{static_cast<uint32_t>(base + text_from), static_cast<uint32_t>(base + n)}, -1});
  }
}

}  // namespace kestrel::tok
