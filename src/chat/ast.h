// The syntax tree of a Jinja template: one node type, its children laid out per kind.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja_error.h"
#include "chat/value.h"

namespace kestrel::chat {

struct Node;
using NodePtr = std::unique_ptr<Node>;

enum class NodeKind {
  // ---- expressions
  kLiteral,   // value
  kName,      // name
  kList,      // kids: items
  kTuple,     // kids: items
  kDict,      // kids: key0, value0, key1, value1, …
  kGetAttr,   // kids[0]: object; name: attribute
  kGetItem,   // kids[0]: object; kids[1]: key
  kSlice,     // kids[0]: object; kids[1..3]: start, stop, step (each may be null)
  kCall,      // kids[0]: callee; args, kwargs
  kFilter,    // name: filter; kids[0]: subject (null inside {% filter %}); args, kwargs
  kTest,      // name: test; kids[0]: subject; args; negated: `is not`
  kUnary,     // name: "not" | "-" | "+"; kids[0]: operand
  kBinary,    // name: "+" "-" "*" "/" "//" "%" "**" "~" "and" "or"; kids[0], kids[1]
  kCompare,   // kids[0] ops[0] kids[1] ops[1] kids[2] …; ops: "==" "!=" "<" "<=" ">" ">=" "in" "not in"
  kCondExpr,  // kids: value, condition, otherwise (may be null: undefined)
  // ---- statements
  kBody,        // kids: statements in order
  kText,        // value: literal output
  kPrint,       // kids[0]: expression
  kIf,          // kids: cond0, body0, cond1, body1, …, [else body]
  kFor,         // names: targets; kids: iterable, body, filter (may be null), else body (may be null)
  kSet,         // names: targets (or the namespace when attr is set); attr; kids[0]: value
  kSetBlock,    // names[0]: target; kids[0]: body; kids[1..]: filters applied to the body (kFilter)
  kMacro,       // name; names: parameters; kids[0]: body; kids[1+i]: default of parameter i (may be null)
  kFilterBlock, // kids[0]: body; kids[1..]: filters (kFilter with null subject)
  kBreak,
  kContinue,
};

struct Node {
  NodeKind kind;
  SourcePos pos;
  std::string name;
  std::string attr;
  Value value;
  std::vector<NodePtr> kids;
  std::vector<std::string> names;
  std::vector<std::string> ops;
  std::vector<NodePtr> args;
  std::vector<std::pair<std::string, NodePtr>> kwargs;
  bool negated = false;
  int height = 1;
  bool uses_loop = false;  // kFor: the body mentions `loop` (else no loop object is built)  // of the expression tree below this node (bounded by the parser)

  Node(NodeKind k, SourcePos p) : kind(k), pos(p) {}
};

inline NodePtr make_node(NodeKind kind, SourcePos pos) { return std::make_unique<Node>(kind, pos); }

}  // namespace kestrel::chat
