#include "chat/parser.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <set>

#include "chat/lexer.h"

namespace kestrel::chat {

namespace {

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
  NodePtr parse_body(const std::set<std::string>& stops) {
    DepthGuard guard(*this);
    auto body = make_node(NodeKind::kBody, cur().pos);
    while (true) {
      const Token& t = cur();
      switch (t.type) {
        case TokenType::kText: {
          auto text = make_node(NodeKind::kText, t.pos);
          text->value = Value(t.value);
          body->kids.push_back(std::move(text));
          next();
          break;
        }
        case TokenType::kVarBegin: {
          next();
          auto print = make_node(NodeKind::kPrint, t.pos);
          print->kids.push_back(parse_tuple(true));
          if (cur().type != TokenType::kVarEnd) expected("'}}'");
          next();
          body->kids.push_back(std::move(print));
          break;
        }
        case TokenType::kBlockBegin: {
          next();
          if (cur().type == TokenType::kName && stops.count(cur().value)) return body;
          body->kids.push_back(parse_statement(stops));
          break;
        }
        case TokenType::kEof: {
          if (!stops.empty()) {
            std::string names;
            for (const auto& s : stops) names += (names.empty() ? "'" : " or '") + s + "'";
            template_error(t.pos, cat("unexpected end of template, expected ", names));
          }
          return body;
        }
        default: expected("text or a tag");
      }
    }
  }

  NodePtr parse_statement(const std::set<std::string>& stops) {
    const Token& t = cur();
    if (t.type != TokenType::kName) expected("a tag name");
    std::string tag = t.value;
    SourcePos pos = t.pos;
    next();
    if (tag == "if") return parse_if(pos);
    if (tag == "for") return parse_for(pos);
    if (tag == "set") return parse_set(pos);
    if (tag == "macro") return parse_macro(pos);
    if (tag == "filter") return parse_filter_block(pos);
    if (tag == "generation") {
      expect_block_end();
      auto body = parse_body({"endgeneration"});
      next();
      expect_block_end();
      return body;
    }
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) template_error(pos, cat("'", tag, "' outside of a for loop"));
      expect_block_end();
      return make_node(tag == "break" ? NodeKind::kBreak : NodeKind::kContinue, pos);
    }
    static const std::set<std::string> kUnsupported = {"include", "import", "from", "extends", "block",
                                                        "call", "with", "autoescape", "trans", "do"};
    if (kUnsupported.count(tag)) template_error(pos, cat("tag '", tag, "' is not supported in chat templates"));
    if (!stops.empty()) {
      std::string names;
      for (const auto& s : stops) names += (names.empty() ? "'" : " or '") + s + "'";
      template_error(pos, cat("unexpected tag '", tag, "', expected ", names));
    }
    template_error(pos, cat("unknown tag '", tag, "'"));
  }

  NodePtr parse_if(SourcePos pos) {
    auto node = make_node(NodeKind::kIf, pos);
    node->kids.push_back(parse_tuple(false));
    expect_block_end();
    while (true) {
      node->kids.push_back(parse_body({"elif", "else", "endif"}));
      std::string tag = next().value;
      if (tag == "elif") {
        node->kids.push_back(parse_tuple(false));
        expect_block_end();
      } else if (tag == "else") {
        expect_block_end();
        node->kids.push_back(parse_body({"endif"}));
        next();
        expect_block_end();
        return node;
      } else {
        expect_block_end();
        return node;
      }
    }
  }

  void parse_targets(Node& node) {
    bool paren = skip_op("(");
    do {
      node.names.push_back(expect_name("a loop variable"));
    } while (skip_op(","));
    if (paren) expect_op(")");
  }

  NodePtr parse_for(SourcePos pos) {
    auto node = make_node(NodeKind::kFor, pos);
    parse_targets(*node);
    if (!skip_name("in")) expected("'in'");
    node->kids.push_back(parse_tuple(false));
    NodePtr filter;
    if (skip_name("if")) filter = parse_expression(true);
    if (is_name("recursive")) template_error(cur().pos, "recursive for loops are not supported");
    expect_block_end();
    ++loop_depth_;
    node->kids.push_back(parse_body({"else", "endfor"}));
    --loop_depth_;
    node->uses_loop = mentions_loop(*node->kids.back()) || (filter && mentions_loop(*filter));
    node->kids.push_back(std::move(filter));
    std::string tag = next().value;
    expect_block_end();
    if (tag == "else") {
      node->kids.push_back(parse_body({"endfor"}));
      next();
      expect_block_end();
    } else {
      node->kids.push_back(nullptr);
    }
    return node;
  }

  NodePtr parse_set(SourcePos pos) {
    std::string first = expect_name("a variable name");
    if (skip_op(".")) {
      auto node = make_node(NodeKind::kSet, pos);
      node->names.push_back(first);
      node->attr = expect_name("an attribute name");
      expect_op("=");
      node->kids.push_back(parse_tuple(true));
      expect_block_end();
      return node;
    }
    if (cur().type == TokenType::kBlockEnd || is_op("|")) {
      auto node = make_node(NodeKind::kSetBlock, pos);
      node->names.push_back(first);
      std::vector<NodePtr> filters;
      while (skip_op("|")) filters.push_back(parse_filter(nullptr));
      expect_block_end();
      node->kids.push_back(parse_body({"endset"}));
      next();
      expect_block_end();
      for (auto& f : filters) node->kids.push_back(std::move(f));
      return node;
    }
    auto node = make_node(NodeKind::kSet, pos);
    node->names.push_back(first);
    while (skip_op(",")) node->names.push_back(expect_name("a variable name"));
    expect_op("=");
    node->kids.push_back(parse_tuple(true));
    expect_block_end();
    return node;
  }

  NodePtr parse_macro(SourcePos pos) {
    auto node = make_node(NodeKind::kMacro, pos);
    node->name = expect_name("a macro name");
    expect_op("(");
    std::vector<NodePtr> defaults;
    while (!is_op(")")) {
      if (!node->names.empty()) expect_op(",");
      if (is_op(")")) break;
      node->names.push_back(expect_name("a parameter name"));
      defaults.push_back(skip_op("=") ? parse_expression(true) : nullptr);
    }
    expect_op(")");
    expect_block_end();
    int saved = loop_depth_;
    loop_depth_ = 0;
    node->kids.push_back(parse_body({"endmacro"}));
    loop_depth_ = saved;
    next();
    if (cur().type == TokenType::kName) next();  // {% endmacro name %}
    expect_block_end();
    for (auto& d : defaults) node->kids.push_back(std::move(d));
    return node;
  }

  NodePtr parse_filter_block(SourcePos pos) {
    auto node = make_node(NodeKind::kFilterBlock, pos);
    std::vector<NodePtr> filters;
    do {
      filters.push_back(parse_filter(nullptr));
    } while (skip_op("|"));
    expect_block_end();
    node->kids.push_back(parse_body({"endfilter"}));
    next();
    expect_block_end();
    for (auto& f : filters) node->kids.push_back(std::move(f));
    return node;
  }

  // ---- expressions

  // Comma-separated expressions form a tuple: `{{ a, b }}`, `{% set x = 1, 2 %}`.
  NodePtr parse_tuple(bool with_condexpr) {
    SourcePos pos = cur().pos;
    auto first = parse_expression(with_condexpr);
    if (!is_op(",")) return first;
    auto tuple = make_node(NodeKind::kTuple, pos);
    tuple->kids.push_back(std::move(first));
    while (skip_op(",")) {
      if (cur().type == TokenType::kBlockEnd || cur().type == TokenType::kVarEnd) break;
      tuple->kids.push_back(parse_expression(with_condexpr));
    }
    return tuple;
  }

  NodePtr parse_expression(bool with_condexpr) {
    DepthGuard guard(*this);
    SourcePos pos = cur().pos;
    auto value = parse_or();
    if (!with_condexpr) return value;
    while (is_name("if")) {
      next();
      auto cond = make_node(NodeKind::kCondExpr, pos);
      cond->kids.push_back(std::move(value));
      cond->kids.push_back(parse_or());
      cond->kids.push_back(skip_name("else") ? parse_expression(true) : nullptr);
      value = sealed(std::move(cond));
    }
    return value;
  }

  NodePtr binary(const std::string& op, NodePtr left, NodePtr right, SourcePos pos) {
    auto node = make_node(NodeKind::kBinary, pos);
    node->name = op;
    node->kids.push_back(std::move(left));
    node->kids.push_back(std::move(right));
    return sealed(std::move(node));
  }

  NodePtr parse_or() {
    auto left = parse_and();
    while (is_name("or")) {
      SourcePos pos = next().pos;
      left = binary("or", std::move(left), parse_and(), pos);
    }
    return left;
  }

  NodePtr parse_and() {
    auto left = parse_not();
    while (is_name("and")) {
      SourcePos pos = next().pos;
      left = binary("and", std::move(left), parse_not(), pos);
    }
    return left;
  }

  NodePtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(*this);
      auto node = make_node(NodeKind::kUnary, next().pos);
      node->name = "not";
      node->kids.push_back(parse_not());
      return sealed(std::move(node));
    }
    return parse_compare();
  }

  NodePtr parse_compare() {
    SourcePos pos = cur().pos;
    auto left = parse_math1();
    NodePtr cmp;
    while (true) {
      std::string op;
      if (cur().type == TokenType::kOp &&
          (is_op("==") || is_op("!=") || is_op("<") || is_op("<=") || is_op(">") || is_op(">="))) {
        op = next().value;
      } else if (is_name("in")) {
        next();
        op = "in";
      } else if (is_name("not") && peek().type == TokenType::kName && peek().value == "in") {
        next();
        next();
        op = "not in";
      } else {
        break;
      }
      if (!cmp) {
        cmp = make_node(NodeKind::kCompare, pos);
        cmp->kids.push_back(std::move(left));
      }
      cmp->ops.push_back(op);
      cmp->kids.push_back(parse_math1());
      if (cmp->kids.size() > size_t(kMaxHeight)) template_error(cmp->pos, "comparison chain is too long");
    }
    return cmp ? sealed(std::move(cmp)) : std::move(left);
  }

  NodePtr parse_math1() {
    auto left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& t = next();
      left = binary(t.value, std::move(left), parse_concat(), t.pos);
    }
    return left;
  }

  NodePtr parse_concat() {
    auto left = parse_math2();
    while (is_op("~")) {
      SourcePos pos = next().pos;
      left = binary("~", std::move(left), parse_math2(), pos);
    }
    return left;
  }

  NodePtr parse_math2() {
    auto left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& t = next();
      left = binary(t.value, std::move(left), parse_pow(), t.pos);
    }
    return left;
  }

  NodePtr parse_pow() {
    auto left = parse_unary(true);
    while (is_op("**")) {
      SourcePos pos = next().pos;
      left = binary("**", std::move(left), parse_unary(true), pos);
    }
    return left;
  }

  NodePtr parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    NodePtr node;
    if (is_op("-") || is_op("+")) {
      const Token& t = next();
      node = make_node(NodeKind::kUnary, t.pos);
      node->name = t.value;
      node->kids.push_back(parse_unary(false));
      node = sealed(std::move(node));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  NodePtr parse_primary() {
    DepthGuard guard(*this);
    const Token& t = cur();
    switch (t.type) {
      case TokenType::kName: {
        next();
        auto lit = make_node(NodeKind::kLiteral, t.pos);
        if (t.value == "true" || t.value == "True") lit->value = Value(true);
        else if (t.value == "false" || t.value == "False") lit->value = Value(false);
        else if (t.value == "none" || t.value == "None") lit->value = Value::none();
        else {
          auto name = make_node(NodeKind::kName, t.pos);
          name->name = t.value;
          return name;
        }
        return lit;
      }
      case TokenType::kString: {
        auto lit = make_node(NodeKind::kLiteral, t.pos);
        std::string s;
        while (cur().type == TokenType::kString) s += next().value;  // "a" "b" concatenates
        lit->value = Value(std::move(s));
        return lit;
      }
      case TokenType::kInt: {
        next();
        auto lit = make_node(NodeKind::kLiteral, t.pos);
        errno = 0;
        long long v = std::strtoll(t.value.c_str(), nullptr, 10);
        if (errno == ERANGE) template_error(t.pos, cat("integer literal ", t.value, " is too large"));
        lit->value = Value(int64_t(v));
        return lit;
      }
      case TokenType::kFloat: {
        next();
        auto lit = make_node(NodeKind::kLiteral, t.pos);
        lit->value = Value(std::strtod(t.value.c_str(), nullptr));
        return lit;
      }
      case TokenType::kOp: {
        if (t.value == "(") {
          next();
          if (skip_op(")")) return make_node(NodeKind::kTuple, t.pos);
          auto first = parse_expression(true);
          if (skip_op(")")) return first;
          auto tuple = make_node(NodeKind::kTuple, t.pos);
          tuple->kids.push_back(std::move(first));
          while (skip_op(",")) {
            if (is_op(")")) break;
            tuple->kids.push_back(parse_expression(true));
          }
          expect_op(")");
          return sealed(std::move(tuple));
        }
        if (t.value == "[") {
          next();
          auto list = make_node(NodeKind::kList, t.pos);
          while (!is_op("]")) {
            if (!list->kids.empty()) expect_op(",");
            if (is_op("]")) break;
            list->kids.push_back(parse_expression(true));
          }
          expect_op("]");
          return sealed(std::move(list));
        }
        if (t.value == "{") {
          next();
          auto dict = make_node(NodeKind::kDict, t.pos);
          while (!is_op("}")) {
            if (!dict->kids.empty()) expect_op(",");
            if (is_op("}")) break;
            dict->kids.push_back(parse_expression(true));
            expect_op(":");
            dict->kids.push_back(parse_expression(true));
          }
          expect_op("}");
          return sealed(std::move(dict));
        }
        break;
      }
      default: break;
    }
    expected("an expression");
  }

  NodePtr parse_postfix(NodePtr node) {
    while (true) {
      if (is_op(".")) {
        SourcePos pos = next().pos;
        if (cur().type == TokenType::kInt) {
          auto item = make_node(NodeKind::kGetItem, pos);
          item->kids.push_back(std::move(node));
          item->kids.push_back(parse_primary());
          node = sealed(std::move(item));
          continue;
        }
        auto attr = make_node(NodeKind::kGetAttr, pos);
        attr->name = expect_name("an attribute name after '.'");
        attr->kids.push_back(std::move(node));
        node = sealed(std::move(attr));
      } else if (is_op("[")) {
        node = parse_subscript(std::move(node));
      } else if (is_op("(")) {
        auto call = make_node(NodeKind::kCall, cur().pos);
        call->kids.push_back(std::move(node));
        parse_call_args(*call);
        node = sealed(std::move(call));
      } else {
        return node;
      }
    }
  }

  NodePtr parse_subscript(NodePtr object) {
    SourcePos pos = next().pos;  // '['
    NodePtr parts[3];
    int colons = 0;
    if (!is_op(":")) parts[0] = parse_expression(true);
    while (colons < 2 && skip_op(":")) {
      ++colons;
      if (!is_op(":") && !is_op("]")) parts[colons] = parse_expression(true);
    }
    expect_op("]");
    if (colons == 0) {
      auto item = make_node(NodeKind::kGetItem, pos);
      item->kids.push_back(std::move(object));
      item->kids.push_back(std::move(parts[0]));
      return sealed(std::move(item));
    }
    auto slice = make_node(NodeKind::kSlice, pos);
    slice->kids.push_back(std::move(object));
    for (auto& p : parts) slice->kids.push_back(std::move(p));
    return sealed(std::move(slice));
  }

  void parse_call_args(Node& node) {
    expect_op("(");
    while (!is_op(")")) {
      if (!node.args.empty() || !node.kwargs.empty()) expect_op(",");
      if (is_op(")")) break;
      if (is_op("*") || is_op("**")) template_error(cur().pos, "*args and **kwargs in calls are not supported");
      if (cur().type == TokenType::kName && peek().type == TokenType::kOp && peek().value == "=") {
        std::string name = next().value;
        next();
        node.kwargs.emplace_back(name, parse_expression(true));
      } else {
        if (!node.kwargs.empty()) template_error(cur().pos, "positional argument follows keyword argument");
        node.args.push_back(parse_expression(true));
      }
    }
    expect_op(")");
  }

  NodePtr parse_filter(NodePtr subject) {
    auto node = make_node(NodeKind::kFilter, cur().pos);
    node->name = expect_name("a filter name");
    while (is_op(".") && peek().type == TokenType::kName) {
      next();
      node->name += "." + next().value;
    }
    node->kids.push_back(std::move(subject));
    if (is_op("(")) parse_call_args(*node);
    return sealed(std::move(node));
  }

  NodePtr parse_filter_expr(NodePtr node) {
    while (true) {
      if (skip_op("|")) {
        node = parse_filter(std::move(node));
      } else if (is_name("is")) {
        auto test = make_node(NodeKind::kTest, next().pos);
        test->negated = skip_name("not");
        test->name = expect_name("a test name after 'is'");
        test->kids.push_back(std::move(node));
        const Token& t = cur();
        if (is_op("(")) {
          parse_call_args(*test);
        } else if ((t.type == TokenType::kName || t.type == TokenType::kString || t.type == TokenType::kInt ||
                    t.type == TokenType::kFloat || is_op("[") || is_op("{")) &&
                   !(is_name("else") || is_name("or") || is_name("and") || is_name("if"))) {
          if (is_name("is")) template_error(t.pos, "tests cannot be chained with 'is'");
          test->args.push_back(parse_postfix(parse_primary()));
        }
        node = sealed(std::move(test));
      } else if (is_op("(")) {
        auto call = make_node(NodeKind::kCall, cur().pos);
        call->kids.push_back(std::move(node));
        parse_call_args(*call);
        node = sealed(std::move(call));
      } else {
        return node;
      }
    }
  }

  std::vector<Token> toks_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

NodePtr parse_template(const std::string& source) { return Parser(tokenize(source)).parse(); }

}  // namespace kestrel::chat
