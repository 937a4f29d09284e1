// The Jinja parser class, shared by parser.cc (statements) and parser_expressions.cc.
// Internal to src/chat: use parse_template() from parser.h.
#pragma once

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "chat/ast.h"
#include "chat/lexer.h"

namespace kestrel::chat::detail {

constexpr int kMaxNesting = 200;  // parser recursion; deeper is refused, not a stack overflow
constexpr int kMaxHeight = 256;   // expression tree height (long operator / filter chains)

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  NodePtr parse() {
    auto body = parse_body({});
    return body;
  }

 private:
  // ---- token helpers
  const Token& cur() const { return toks_[i_]; }
  const Token& peek(size_t ahead = 1) const { return toks_[std::min(i_ + ahead, toks_.size() - 1)]; }
  const Token& next() {
    const Token& t = toks_[i_];
    if (i_ + 1 < toks_.size()) ++i_;
    return t;
  }
  bool is_op(const char* op) const { return cur().type == TokenType::kOp && cur().value == op; }
  bool is_name(const char* name) const { return cur().type == TokenType::kName && cur().value == name; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }
  std::string describe(const Token& t) const {
    switch (t.type) {
      case TokenType::kName:
      case TokenType::kOp: return cat("'", t.value, "'");
      case TokenType::kString: return "a string";
      case TokenType::kInt:
      case TokenType::kFloat: return cat("the number ", t.value);
      default: return token_type_name(t.type);
    }
  }
  [[noreturn]] void expected(const std::string& what) const {
    template_error(cur().pos, cat("expected ", what, ", found ", describe(cur())));
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) expected(cat("'", op, "'"));
  }
  std::string expect_name(const std::string& what = "a name") {
    if (cur().type != TokenType::kName) expected(what);
    return next().value;
  }
  void expect_block_end() {
    if (cur().type != TokenType::kBlockEnd) expected("'%}'");
    next();
  }

  // Records the height of a finished expression node; refuses trees the evaluator (and the
  // node destructors) would recurse too deeply into.
  NodePtr sealed(NodePtr node) {
    int h = 0;
    for (const auto& k : node->kids) h = std::max(h, k ? k->height : 0);
    for (const auto& a : node->args) h = std::max(h, a->height);
    for (const auto& kv : node->kwargs) h = std::max(h, kv.second->height);
    node->height = h + 1;
    if (node->height > kMaxHeight) {
      template_error(node->pos, cat("expression nests deeper than ", kMaxHeight, " levels"));
    }
    return node;
  }

  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& parser) : p(parser) {
      if (++p.depth_ > kMaxNesting) {
        template_error(p.cur().pos, cat("template nests deeper than ", kMaxNesting, " levels"));
      }
    }
    ~DepthGuard() { --p.depth_; }
  };

  static bool mentions_loop(const Node& node) {
    if (node.kind == NodeKind::kName && node.name == "loop") return true;
    for (const auto& k : node.kids) {
      if (k && mentions_loop(*k)) return true;
    }
    for (const auto& a : node.args) {
      if (mentions_loop(*a)) return true;
    }
    for (const auto& kv : node.kwargs) {
      if (mentions_loop(*kv.second)) return true;
    }
    return false;
  }

  // ---- statements

  // Parses until a block tag whose name is in `stops` (consumes its '{%' and leaves the name) or
  // the end of the template (an error when `stops` is not empty).
  NodePtr parse_body(const std::set<std::string>& stops);
  NodePtr parse_statement(const std::set<std::string>& stops);
  NodePtr parse_if(SourcePos pos);
  void parse_targets(Node& node);
  NodePtr parse_for(SourcePos pos);
  NodePtr parse_set(SourcePos pos);
  NodePtr parse_macro(SourcePos pos);
  NodePtr parse_filter_block(SourcePos pos);
  // ---- expressions
  // Comma-separated expressions form a tuple: `{{ a, b }}`, `{% set x = 1, 2 %}`.
  NodePtr parse_tuple(bool with_condexpr);
  NodePtr parse_expression(bool with_condexpr);
  NodePtr binary(const std::string& op, NodePtr left, NodePtr right, SourcePos pos);
  NodePtr parse_or();
  NodePtr parse_and();
  NodePtr parse_not();
  NodePtr parse_compare();
  NodePtr parse_math1();
  NodePtr parse_concat();
  NodePtr parse_math2();
  NodePtr parse_pow();
  NodePtr parse_unary(bool with_filter);
  NodePtr parse_primary();
  NodePtr parse_postfix(NodePtr node);
  NodePtr parse_subscript(NodePtr object);
  void parse_call_args(Node& node);
  NodePtr parse_filter(NodePtr subject);
  NodePtr parse_filter_expr(NodePtr node);

  std::vector<Token> toks_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace kestrel::chat::detail
