// One exception type for everything a user can cause, and a check macro for what they cannot.
//
// Errors are thrown at validation edges (file loaders, config parsing, CLI flags, HTTP requests)
// and caught at the CLI and server boundaries. The message names the thing at fault (file,
// tensor, field, flag) and what was expected. Internal invariants use KCHECK, which aborts with
// file:line: a failed KCHECK is a bug in kestrel, never a user's mistake.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace kestrel {

enum class ErrorKind {
  kBadInput,     // malformed file, request or argument
  kUnsupported,  // well-formed but not something kestrel implements (refused by name)
  kIo,           // the operating system said no (open, read, write, rename, mmap)
  kOutOfMemory,  // a model, cache or request does not fit
  kInternal,     // a failure that is not the user's fault but is recoverable (device error, ...)
};

std::string_view error_kind_name(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

// Concatenates any streamable values: cat("tensor ", name, " has ", n, " dims").
template <typename... Args>
std::string cat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

template <typename... Args>
[[noreturn]] void fail(ErrorKind kind, const Args&... args) {
  throw Error(kind, cat(args...));
}

template <typename... Args>
[[noreturn]] void bad_input(const Args&... args) {
  fail(ErrorKind::kBadInput, args...);
}

template <typename... Args>
[[noreturn]] void unsupported(const Args&... args) {
  fail(ErrorKind::kUnsupported, args...);
}

[[noreturn]] void check_failed(const char* expr, const char* file, int line, const std::string& msg);

}  // namespace kestrel

// Internal invariant: aborts with the location. Never use for input validation.
#define KCHECK(cond)                                                      \
  do {                                                                    \
    if (!(cond)) ::kestrel::check_failed(#cond, __FILE__, __LINE__, {}); \
  } while (0)
#define KCHECK_MSG(cond, ...)                                                                  \
  do {                                                                                         \
    if (!(cond)) ::kestrel::check_failed(#cond, __FILE__, __LINE__, ::kestrel::cat(__VA_ARGS__)); \
  } while (0)
