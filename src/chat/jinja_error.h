// How template errors are reported.
//
// Every error a template causes (syntax, unknown filter, type error, raise_exception, a bound
// exceeded) becomes a kestrel::Error(kBadInput) whose message starts with the template position:
//   "chat template line 12, column 5: unknown filter 'frobnicate'"
// Builtins (filters, tests, methods) throw JinjaFault without a position; the evaluator adds the
// position of the expression that called them.
#pragma once

#include <stdexcept>
#include <string>

#include "core/error.h"

namespace kestrel::chat {

struct SourcePos {
  int line = 1;
  int column = 1;
};

class JinjaFault : public std::runtime_error {
 public:
  explicit JinjaFault(const std::string& message) : std::runtime_error(message) {}
};

[[noreturn]] inline void template_error(SourcePos pos, const std::string& message) {
  bad_input("chat template line ", pos.line, ", column ", pos.column, ": ", message);
}

}  // namespace kestrel::chat
