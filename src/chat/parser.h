// Jinja parser: tokens → syntax tree, with Jinja's operator precedence.
//
//   expression := or ['if' or ['else' expression]]
//   or := and ('or' and)*          and := not ('and' not)*        not := 'not' not | compare
//   compare := math1 (('=='|'!='|'<'|'<='|'>'|'>='|'in'|'not in') math1)*
//   math1 := concat (('+'|'-') concat)*    concat := math2 ('~' math2)*
//   math2 := pow (('*'|'/'|'//'|'%') pow)*  pow := unary ('**' unary)*
//   unary := ('-'|'+') unary-without-filters | primary postfix* ('|' filter | 'is' test | call)*
//
// Statements: if/elif/else, for (with `if` filter and `else`), set (plain, tuple, namespace
// attribute, block), macro, filter blocks, break/continue, and transformers' generation blocks.
// Syntax errors name the position and what was expected.
#pragma once

#include <string>

#include "chat/ast.h"

namespace kestrel::chat {

// Parses a whole template; the result is a kBody node.
NodePtr parse_template(const std::string& source);

}  // namespace kestrel::chat
