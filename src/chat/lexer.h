// Jinja lexer: template source → tokens, with Jinja's whitespace rules applied to the text.
//
// The environment is the one transformers renders chat templates with: trim_blocks=True (the
// first newline after a block or comment tag is dropped), lstrip_blocks=True (spaces and tabs
// before a block or comment tag at the start of a line are dropped), keep_trailing_newline=False
// (one newline at the very end of the template is dropped), and newlines normalized to "\n".
// `{%-` / `{{-` / `{#-` strip all whitespace before the tag, `-%}` / `-}}` / `-#}` after it;
// `{%+` and `+%}` turn lstrip_blocks / trim_blocks off for one tag. `{% raw %}` … `{% endraw %}`
// comes out as one text token.
#pragma once

#include <string>
#include <vector>

#include "chat/jinja_error.h"

namespace kestrel::chat {

enum class TokenType {
  kText,        // literal template text (value)
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,        // identifier or keyword (value)
  kString,      // string literal, escapes decoded (value)
  kInt,         // integer literal (value: digits)
  kFloat,       // float literal (value: text)
  kOp,          // operator or punctuation (value): + - * / // % ** ~ ( ) [ ] { } , . : | = == != < <= > >=
  kEof,
};

struct Token {
  TokenType type;
  std::string value;
  SourcePos pos;
};

struct LexerOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  bool keep_trailing_newline = false;
};

// Throws Error(kBadInput) with the position of an unterminated tag, string or bad character.
std::vector<Token> tokenize(const std::string& source, const LexerOptions& options = {});

const char* token_type_name(TokenType type);

}  // namespace kestrel::chat
