// Tool-call bodies: Qwen's JSON object and Gemma 4's `call:NAME{key:value}` notation.
#include <nlohmann/json.hpp>

#include "chat/output_parser.h"

namespace kestrel::chat {

namespace {

using ojson = nlohmann::ordered_json;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\n' || s.front() == '\r' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n' || s.back() == '\r' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool parse_json_call(std::string_view body, ToolCall& call) {
  ojson j = ojson::parse(trim(body), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
  call.name = j["name"].get<std::string>();
  const char* key = j.contains("arguments") ? "arguments" : j.contains("parameters") ? "parameters" : nullptr;
  if (!key) {
    call.arguments = "{}";
  } else if (j[key].is_string()) {
    call.arguments = j[key].get<std::string>();  // already JSON text
  } else {
    call.arguments = j[key].dump();
  }
  return !call.name.empty();
}

// Gemma 4's argument notation: JSON-like, keys bare, strings between <|"|> delimiters.
class Gemma4Args {
 public:
  explicit Gemma4Args(std::string_view text) : s_(text) {}

  bool value(ojson& out, int depth = 0) {
    if (depth > 64) return false;
    skip_ws();
    if (starts(kQuote)) {
      pos_ += kQuote.size();
      size_t end = s_.find(kQuote, pos_);
      if (end == std::string_view::npos) return false;
      out = std::string(s_.substr(pos_, end - pos_));
      pos_ = end + kQuote.size();
      return true;
    }
    if (peek() == '{') {
      ++pos_;
      out = ojson::object();
      skip_ws();
      if (peek() == '}') return ++pos_, true;
      while (true) {
        std::string key;
        if (!parse_key(key)) return false;
        ojson v;
        if (!value(v, depth + 1)) return false;
        out[key] = std::move(v);
        skip_ws();
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        if (peek() == '}') return ++pos_, true;
        return false;
      }
    }
    if (peek() == '[') {
      ++pos_;
      out = ojson::array();
      skip_ws();
      if (peek() == ']') return ++pos_, true;
      while (true) {
        ojson v;
        if (!value(v, depth + 1)) return false;
        out.push_back(std::move(v));
        skip_ws();
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        if (peek() == ']') return ++pos_, true;
        return false;
      }
    }
    // A bare scalar: number, true/false/null, or a word.
    size_t start = pos_;
    while (pos_ < s_.size() && s_[pos_] != ',' && s_[pos_] != '}' && s_[pos_] != ']') ++pos_;
    std::string_view word = trim(s_.substr(start, pos_ - start));
    if (word.empty()) return false;
    ojson parsed = ojson::parse(word, nullptr, false);
    out = (!parsed.is_discarded() && !parsed.is_object() && !parsed.is_array()) ? parsed : ojson(std::string(word));
    return true;
  }

  bool at_end() {
    skip_ws();
    return pos_ == s_.size();
  }

 private:
  static constexpr std::string_view kQuote = "<|\"|>";

  bool parse_key(std::string& key) {
    skip_ws();
    if (starts(kQuote)) {
      pos_ += kQuote.size();
      size_t end = s_.find(kQuote, pos_);
      if (end == std::string_view::npos) return false;
      key = std::string(s_.substr(pos_, end - pos_));
      pos_ = end + kQuote.size();
      skip_ws();
    } else {
      size_t start = pos_;
      while (pos_ < s_.size() && s_[pos_] != ':' && s_[pos_] != ',' && s_[pos_] != '}') ++pos_;
      key = std::string(trim(s_.substr(start, pos_ - start)));
      if (key.empty()) return false;
    }
    if (peek() != ':') return false;
    ++pos_;
    return true;
  }

  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  bool starts(std::string_view p) const { return s_.substr(pos_, p.size()) == p; }
  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\r' || s_[pos_] == '\t')) ++pos_;
  }

  std::string_view s_;
  size_t pos_ = 0;
};

bool parse_gemma4_call(std::string_view body, ToolCall& call) {
  body = trim(body);
  if (body.substr(0, 5) != "call:") return false;
  body.remove_prefix(5);
  size_t brace = body.find('{');
  if (brace == std::string_view::npos) return false;
  std::string_view name = trim(body.substr(0, brace));
  if (name.empty()) return false;
  for (char c : name) {
    if (!(std::isalnum((unsigned char)c) || c == '_' || c == '-' || c == '.')) return false;
  }
  Gemma4Args args(body.substr(brace));
  ojson value;
  if (!args.value(value) || !value.is_object() || !args.at_end()) return false;
  call.name = std::string(name);
  call.arguments = value.dump();
  return true;
}

}  // namespace

bool parse_tool_call(ToolCallSyntax syntax, std::string_view body, ToolCall& call) {
  switch (syntax) {
    case ToolCallSyntax::kJson: return parse_json_call(body, call);
    case ToolCallSyntax::kGemma4: return parse_gemma4_call(body, call);
    case ToolCallSyntax::kNone: return false;
  }
  return false;
}

}  // namespace kestrel::chat
