// Expression parsing: Jinja's precedence climbing (see parser.h for the grammar).
#include <cerrno>
#include <cstdlib>

#include "chat/parser_impl.h"

namespace kestrel::chat::detail {

// Comma-separated expressions form a tuple: `{{ a, b }}`, `{% set x = 1, 2 %}`.
NodePtr Parser::parse_tuple(bool with_condexpr) {
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

NodePtr Parser::parse_expression(bool with_condexpr) {
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

NodePtr Parser::binary(const std::string& op, NodePtr left, NodePtr right, SourcePos pos) {
  auto node = make_node(NodeKind::kBinary, pos);
  node->name = op;
  node->kids.push_back(std::move(left));
  node->kids.push_back(std::move(right));
  return sealed(std::move(node));
}

NodePtr Parser::parse_or() {
  auto left = parse_and();
  while (is_name("or")) {
    SourcePos pos = next().pos;
    left = binary("or", std::move(left), parse_and(), pos);
  }
  return left;
}

NodePtr Parser::parse_and() {
  auto left = parse_not();
  while (is_name("and")) {
    SourcePos pos = next().pos;
    left = binary("and", std::move(left), parse_not(), pos);
  }
  return left;
}

NodePtr Parser::parse_not() {
  if (is_name("not")) {
    DepthGuard guard(*this);
    auto node = make_node(NodeKind::kUnary, next().pos);
    node->name = "not";
    node->kids.push_back(parse_not());
    return sealed(std::move(node));
  }
  return parse_compare();
}

NodePtr Parser::parse_compare() {
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

NodePtr Parser::parse_math1() {
  auto left = parse_concat();
  while (is_op("+") || is_op("-")) {
    const Token& t = next();
    left = binary(t.value, std::move(left), parse_concat(), t.pos);
  }
  return left;
}

NodePtr Parser::parse_concat() {
  auto left = parse_math2();
  while (is_op("~")) {
    SourcePos pos = next().pos;
    left = binary("~", std::move(left), parse_math2(), pos);
  }
  return left;
}

NodePtr Parser::parse_math2() {
  auto left = parse_pow();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    const Token& t = next();
    left = binary(t.value, std::move(left), parse_pow(), t.pos);
  }
  return left;
}

NodePtr Parser::parse_pow() {
  auto left = parse_unary(true);
  while (is_op("**")) {
    SourcePos pos = next().pos;
    left = binary("**", std::move(left), parse_unary(true), pos);
  }
  return left;
}

NodePtr Parser::parse_unary(bool with_filter) {
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

NodePtr Parser::parse_primary() {
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

NodePtr Parser::parse_postfix(NodePtr node) {
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

NodePtr Parser::parse_subscript(NodePtr object) {
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

void Parser::parse_call_args(Node& node) {
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

NodePtr Parser::parse_filter(NodePtr subject) {
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

NodePtr Parser::parse_filter_expr(NodePtr node) {
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

}  // namespace kestrel::chat::detail
