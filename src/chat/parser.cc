#include "chat/parser.h"

#include "chat/parser_impl.h"

namespace kestrel::chat {

namespace detail {

// Parses until a block tag whose name is in `stops` (consumes its '{%' and leaves the name) or
// the end of the template (an error when `stops` is not empty).
NodePtr Parser::parse_body(const std::set<std::string>& stops) {
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

NodePtr Parser::parse_statement(const std::set<std::string>& stops) {
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

NodePtr Parser::parse_if(SourcePos pos) {
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

void Parser::parse_targets(Node& node) {
  bool paren = skip_op("(");
  do {
    node.names.push_back(expect_name("a loop variable"));
  } while (skip_op(","));
  if (paren) expect_op(")");
}

NodePtr Parser::parse_for(SourcePos pos) {
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

NodePtr Parser::parse_set(SourcePos pos) {
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

NodePtr Parser::parse_macro(SourcePos pos) {
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

NodePtr Parser::parse_filter_block(SourcePos pos) {
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

}  // namespace detail

NodePtr parse_template(const std::string& source) { return detail::Parser(tokenize(source)).parse(); }

}  // namespace kestrel::chat
