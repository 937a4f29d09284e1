#include "chat/lexer.h"

#include <algorithm>
#include <cctype>

#include "chat/value.h"

namespace kestrel::chat {

namespace {

// Python's str.splitlines() + "\n".join(): every line break becomes "\n"; one trailing break is
// dropped unless keep_trailing_newline.
std::string normalize_newlines(const std::string& src, bool keep_trailing_newline) {
  std::string out;
  out.reserve(src.size());
  bool ended_with_break = false;
  for (size_t i = 0; i < src.size(); ++i) {
    unsigned char c = src[i];
    size_t extra = 0;
    bool brk = false;
    if (c == '\r') {
      brk = true;
      if (i + 1 < src.size() && src[i + 1] == '\n') extra = 1;
    } else if (c == '\n' || c == '\v' || c == '\f' || c == 0x1c || c == 0x1d || c == 0x1e) {
      brk = true;
    } else if (c == 0xC2 && i + 1 < src.size() && (unsigned char)src[i + 1] == 0x85) {
      brk = true, extra = 1;  // U+0085
    } else if (c == 0xE2 && i + 2 < src.size() && (unsigned char)src[i + 1] == 0x80 &&
               ((unsigned char)src[i + 2] == 0xA8 || (unsigned char)src[i + 2] == 0xA9)) {
      brk = true, extra = 2;  // U+2028, U+2029
    }
    if (brk) {
      out += '\n';
      i += extra;
      ended_with_break = i + 1 == src.size();
    } else {
      out += char(c);
    }
  }
  if (ended_with_break && !keep_trailing_newline) out.pop_back();
  return out;
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

class Lexer {
 public:
  Lexer(const std::string& source, const LexerOptions& options)
      : src_(normalize_newlines(source, options.keep_trailing_newline)), opt_(options) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;  // the text at `pos` begins a line
    while (pos < src_.size()) {
      size_t open = find_tag(pos);
      std::string text = src_.substr(pos, open - pos);
      if (open == src_.size()) {
        add_text(std::move(text), pos);
        break;
      }
      char kind = src_[open + 1];  // '{', '%' or '#'
      char modifier = open + 2 < src_.size() ? src_[open + 2] : '\0';
      if (modifier == '-') {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      } else if (modifier != '+' && kind != '{' && opt_.lstrip_blocks) {
        lstrip_line(text, line_starting);
      }
      size_t body = open + 2 + (modifier == '-' || modifier == '+');
      if (kind == '%' && is_raw_begin(body)) {
        add_text(std::move(text), pos);
        pos = lex_raw(open, body, line_starting);
        continue;
      }
      add_text(std::move(text), pos);
      if (kind == '#') {
        size_t close = src_.find("#}", body);
        if (close == std::string::npos) template_error(pos_of(open), "unterminated comment (missing '#}')");
        pos = after_tag(close, close + 2, close > body && src_[close - 1] == '-', true, line_starting);
        continue;
      }
      tokens_.push_back({kind == '{' ? TokenType::kVarBegin : TokenType::kBlockBegin, "", pos_of(open)});
      pos = lex_expression(body, kind, open, line_starting);
    }
    tokens_.push_back({TokenType::kEof, "", pos_of(src_.size())});
    return std::move(tokens_);
  }

 private:
  // Line and column (in code points) of a byte offset; amortized O(distance) from the last call.
  SourcePos pos_of(size_t offset) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    size_t line = it - line_starts_.begin();
    size_t start = line_starts_[line - 1];
    size_t from = start, column = 1;
    if (cached_line_ == line && cached_offset_ >= start && cached_offset_ <= offset) {
      from = cached_offset_;
      column = cached_column_;
    }
    column += utf8_length(std::string_view(src_).substr(from, offset - from));
    cached_line_ = line, cached_offset_ = offset, cached_column_ = column;
    return {int(line), int(column)};
  }

  size_t find_tag(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return src_.size();
  }

  void add_text(std::string text, size_t offset) {
    if (!text.empty()) tokens_.push_back({TokenType::kText, std::move(text), pos_of(offset)});
  }

  // lstrip_blocks: drop spaces and tabs between the start of the line and the tag.
  static void lstrip_line(std::string& text, bool line_starting) {
    size_t nl = text.rfind('\n');
    size_t start = nl == std::string::npos ? 0 : nl + 1;
    if (nl == std::string::npos && !line_starting) return;
    for (size_t i = start; i < text.size(); ++i) {
      if (text[i] != ' ' && text[i] != '\t') return;
    }
    text.resize(start);
  }

  // After a tag that ends at `end` (its closing delimiter starts at `close`): '-' strips all
  // following whitespace, otherwise trim_blocks drops one newline. Returns the next position.
  size_t after_tag(size_t close, size_t end, bool strip_after, bool is_block, bool& line_starting) {
    bool plus = !strip_after && close > 0 && src_[close - 1] == '+';
    size_t pos = end;
    if (strip_after) {
      while (pos < src_.size() && is_space(src_[pos])) ++pos;
    } else if (is_block && opt_.trim_blocks && !plus && pos < src_.size() && src_[pos] == '\n') {
      ++pos;
    }
    line_starting = pos > 0 && src_[pos - 1] == '\n';
    return pos;
  }

  bool is_raw_begin(size_t body) const {
    size_t p = body;
    while (p < src_.size() && is_space(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") != 0) return false;
    p += 3;
    if (p < src_.size() && (std::isalnum((unsigned char)src_[p]) || src_[p] == '_')) return false;
    while (p < src_.size() && is_space(src_[p])) ++p;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
    return src_.compare(p, 2, "%}") == 0;
  }

  size_t lex_raw(size_t open, size_t body, bool& line_starting) {
    size_t close = src_.find("%}", body);
    size_t pos = after_tag(close, close + 2, src_[close - 1] == '-', true, line_starting);
    // Find "{% endraw %}" (any whitespace control) after the raw tag.
    size_t search = pos;
    while (true) {
      size_t tag = src_.find("{%", search);
      if (tag == std::string::npos) template_error(pos_of(open), "unterminated raw block (missing '{% endraw %}')");
      size_t p = tag + 2;
      char modifier = p < src_.size() ? src_[p] : '\0';
      if (modifier == '-' || modifier == '+') ++p;
      while (p < src_.size() && is_space(src_[p])) ++p;
      if (src_.compare(p, 6, "endraw") != 0) {
        search = tag + 2;
        continue;
      }
      p += 6;
      while (p < src_.size() && is_space(src_[p])) ++p;
      bool strip_after = false;
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) strip_after = src_[p++] == '-';
      if (src_.compare(p, 2, "%}") != 0) {
        search = tag + 2;
        continue;
      }
      std::string text = src_.substr(pos, tag - pos);
      if (modifier == '-') {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      } else if (modifier != '+' && opt_.lstrip_blocks) {
        lstrip_line(text, line_starting);
      }
      add_text(std::move(text), pos);
      return after_tag(p, p + 2, strip_after, true, line_starting);
    }
  }

  // Lexes the inside of {{ … }} or {% … %}; returns the position after the closing delimiter.
  size_t lex_expression(size_t p, char kind, size_t open, bool& line_starting) {
    const char* close = kind == '{' ? "}}" : "%}";
    int depth = 0;  // brackets opened inside the tag: a "}}" inside a dict literal does not close it
    while (true) {
      while (p < src_.size() && is_space(src_[p])) ++p;
      if (p >= src_.size()) {
        template_error(pos_of(open), cat("unterminated tag (missing '", close, "')"));
      }
      if (depth == 0) {
        bool dash = src_[p] == '-' || (kind == '%' && src_[p] == '+');
        size_t q = dash ? p + 1 : p;
        if (src_.compare(q, 2, close) == 0) {
          tokens_.push_back({kind == '{' ? TokenType::kVarEnd : TokenType::kBlockEnd, "", pos_of(p)});
          return after_tag(q, q + 2, src_[p] == '-', kind == '%', line_starting);
        }
      }
      SourcePos at = pos_of(p);
      char c = src_[p];
      if (std::isalpha((unsigned char)c) || c == '_') {
        size_t q = p;
        while (q < src_.size() && (std::isalnum((unsigned char)src_[q]) || src_[q] == '_')) ++q;
        tokens_.push_back({TokenType::kName, src_.substr(p, q - p), at});
        p = q;
      } else if (std::isdigit((unsigned char)c)) {
        p = lex_number(p, at);
      } else if (c == '\'' || c == '"') {
        p = lex_string(p, at);
      } else {
        static const char* kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op;
        for (const char* two : kTwo) {
          if (src_.compare(p, 2, two) == 0) op = two;
        }
        if (op.empty() && std::string_view("+-*/%~()[]{},.:|=<>").find(c) != std::string_view::npos) op = c;
        if (op.empty()) template_error(at, cat("unexpected character '", c, "' in tag"));
        if (op == "(" || op == "[" || op == "{") ++depth;
        if ((op == ")" || op == "]" || op == "}") && depth > 0) --depth;
        tokens_.push_back({TokenType::kOp, op, at});
        p += op.size();
      }
    }
  }

  size_t lex_number(size_t p, SourcePos at) {
    size_t q = p;
    auto digits = [&] {
      while (q < src_.size() && (std::isdigit((unsigned char)src_[q]) || src_[q] == '_')) ++q;
    };
    digits();
    bool is_float = false;
    if (q + 1 < src_.size() && src_[q] == '.' && std::isdigit((unsigned char)src_[q + 1])) {
      is_float = true;
      ++q;
      digits();
    }
    if (q < src_.size() && (src_[q] == 'e' || src_[q] == 'E')) {
      size_t r = q + 1;
      if (r < src_.size() && (src_[r] == '+' || src_[r] == '-')) ++r;
      if (r < src_.size() && std::isdigit((unsigned char)src_[r])) {
        is_float = true;
        q = r;
        digits();
      }
    }
    std::string text;
    for (size_t i = p; i < q; ++i) {
      if (src_[i] != '_') text += src_[i];
    }
    tokens_.push_back({is_float ? TokenType::kFloat : TokenType::kInt, text, at});
    return q;
  }

  // Python string literal escapes, as Jinja decodes them.
  size_t lex_string(size_t p, SourcePos at) {
    char quote = src_[p];
    std::string out;
    size_t q = p + 1;
    auto hex = [&](size_t start, int n) -> long {
      if (start + n > src_.size()) return -1;
      long v = 0;
      for (int i = 0; i < n; ++i) {
        char h = src_[start + i];
        if (!std::isxdigit((unsigned char)h)) return -1;
        v = v * 16 + (std::isdigit((unsigned char)h) ? h - '0' : std::tolower(h) - 'a' + 10);
      }
      return v;
    };
    while (true) {
      if (q >= src_.size()) template_error(at, "unterminated string literal");
      char c = src_[q];
      if (c == quote) break;
      if (c != '\\') {
        out += c;
        ++q;
        continue;
      }
      if (q + 1 >= src_.size()) template_error(at, "unterminated string literal");
      char e = src_[q + 1];
      q += 2;
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case '\n': break;  // line continuation
        case 'x':
        case 'u':
        case 'U': {
          int n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          long v = hex(q, n);
          if (v < 0 || v > 0x10FFFF) template_error(at, cat("invalid \\", e, " escape in string literal"));
          utf8_append(out, char32_t(v));
          q += n;
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            int v = e - '0';
            for (int i = 0; i < 2 && q < src_.size() && src_[q] >= '0' && src_[q] <= '7'; ++i) v = v * 8 + (src_[q++] - '0');
            utf8_append(out, char32_t(v));
          } else {
            out += '\\';
            out += e;
          }
      }
    }
    tokens_.push_back({TokenType::kString, std::move(out), at});
    return q + 1;
  }

  std::string src_;
  LexerOptions opt_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
  mutable size_t cached_line_ = 0, cached_offset_ = 0, cached_column_ = 1;
};

}  // namespace

std::vector<Token> tokenize(const std::string& source, const LexerOptions& options) {
  return Lexer(source, options).run();
}

const char* token_type_name(TokenType type) {
  switch (type) {
    case TokenType::kText: return "text";
    case TokenType::kVarBegin: return "'{{'";
    case TokenType::kVarEnd: return "'}}'";
    case TokenType::kBlockBegin: return "'{%'";
    case TokenType::kBlockEnd: return "'%}'";
    case TokenType::kName: return "name";
    case TokenType::kString: return "string";
    case TokenType::kInt: return "integer";
    case TokenType::kFloat: return "float";
    case TokenType::kOp: return "operator";
    case TokenType::kEof: return "end of template";
  }
  return "?";
}

}  // namespace kestrel::chat
