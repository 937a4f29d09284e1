// What the interpreter calls on values: operators, attribute and item access, iteration, and the
// builtin filters, tests, methods and globals of transformers' chat-template environment.
// Everything here throws JinjaFault; the interpreter adds the template position.
#pragma once

#include <cstdint>
#include <string>

#include "chat/value.h"

namespace kestrel::chat {

struct RenderBounds {
  int64_t max_steps = 10'000'000;           // evaluation steps (nodes, loop iterations, copied items)
  size_t max_output_bytes = 16u << 20;     // rendered text, and any single string or list built
  int max_depth = 64;                       // nested macro calls
};

// Counts work against the bounds; shared by the interpreter and the builtins.
class Budget {
 public:
  explicit Budget(const RenderBounds& bounds) : bounds_(bounds) {}
  void charge(int64_t steps) {
    steps_ += steps;
    if (steps_ > bounds_.max_steps) over_steps();
  }
  // A string or list of `size` bytes / items is about to be built.
  void check_size(size_t size) const {
    if (size > bounds_.max_output_bytes) over_size(size);
  }
  // A list of `items` items is about to be built (each item counts as 16 bytes of the bound).
  void check_items(size_t items) const {
    if (items > bounds_.max_output_bytes / 16) over_items(items);
  }
  size_t max_items() const { return bounds_.max_output_bytes / 16; }
  const RenderBounds& bounds() const { return bounds_; }
  int64_t steps() const { return steps_; }

 private:
  [[noreturn]] void over_steps() const;
  [[noreturn]] void over_size(size_t size) const;
  [[noreturn]] void over_items(size_t items) const;
  RenderBounds bounds_;
  int64_t steps_ = 0;
};

// ---- operators (Python semantics) ---------------------------------------------------------------
Value binary_op(const std::string& op, const Value& a, const Value& b, Budget& budget);
Value negate(const Value& v);
// "==" "!=" "<" "<=" ">" ">=" "in" "not in"
bool compare(const std::string& op, const Value& a, const Value& b);
bool contains(const Value& container, const Value& item);
// Python ordering for sort/min/max; throws on unorderable types.
bool less_than(const Value& a, const Value& b);

// ---- access -------------------------------------------------------------------------------------
// obj.name: a method of str/dict, else the item; undefined when neither exists.
Value get_attr(const Value& obj, const std::string& name, Budget& budget);
// obj[key]: the item, else an attribute named by a string key; undefined when missing.
Value get_item(const Value& obj, const Value& key, Budget& budget);
// obj[start:stop:step] on strings and lists (any part may be none).
Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
// What `for x in v` iterates: list items, dict keys, string characters; undefined is empty.
List iterate(const Value& v, Budget& budget);
int64_t length(const Value& v);

// ---- filters, tests, globals ----------------------------------------------------------------------
using FilterFn = Value (*)(const Value& subject, CallArgs& args, Budget& budget);
using TestFn = bool (*)(const Value& subject, CallArgs& args);
FilterFn find_filter(const std::string& name);
TestFn find_test(const std::string& name);
// range, namespace, dict, raise_exception, strftime_now (bound to `budget` for range's size).
Map make_globals(Budget& budget);

// Python's str methods that chat templates call: "abc".startswith(...), .split(), .strip(), …
Value call_string_method(const std::string& s, const std::string& method, CallArgs& args, Budget& budget);

}  // namespace kestrel::chat
