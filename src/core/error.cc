#include "core/error.h"

#include <cstdio>
#include <cstdlib>

namespace kestrel {

std::string_view error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kBadInput: return "bad input";
    case ErrorKind::kUnsupported: return "unsupported";
    case ErrorKind::kIo: return "I/O error";
    case ErrorKind::kOutOfMemory: return "out of memory";
    case ErrorKind::kInternal: return "internal error";
  }
  return "error";
}

void check_failed(const char* expr, const char* file, int line, const std::string& msg) {
  std::fprintf(stderr, "kestrel: internal check failed at %s:%d: %s%s%s\n", file, line, expr,
               msg.empty() ? "" : ": ", msg.c_str());
  std::abort();
}

}  // namespace kestrel
