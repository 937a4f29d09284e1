// The tests of transformers' chat-template environment (`x is defined`, `n is divisibleby 3`, …),
// with Jinja's semantics.
#include <unordered_map>

#include "chat/builtins.h"
#include "chat/jinja_error.h"
#include "chat/text_util.h"

namespace kestrel::chat {

namespace {

// ---- tests --------------------------------------------------------------------------------------

bool t_defined(const Value& v, CallArgs& a) { a.finish("defined"); return !v.is_undefined(); }
bool t_undefined(const Value& v, CallArgs& a) { a.finish("undefined"); return v.is_undefined(); }
bool t_none(const Value& v, CallArgs& a) { a.finish("none"); return v.is_none(); }
bool t_string(const Value& v, CallArgs& a) { a.finish("string"); return v.is_string(); }
bool t_number(const Value& v, CallArgs& a) { a.finish("number"); return v.is_number(); }
bool t_integer(const Value& v, CallArgs& a) { a.finish("integer"); return v.is_int(); }
bool t_float(const Value& v, CallArgs& a) { a.finish("float"); return v.is_float(); }
bool t_boolean(const Value& v, CallArgs& a) { a.finish("boolean"); return v.is_bool(); }
bool t_true(const Value& v, CallArgs& a) { a.finish("true"); return v.is_bool() && v.as_bool(); }
bool t_false(const Value& v, CallArgs& a) { a.finish("false"); return v.is_bool() && !v.as_bool(); }
bool t_iterable(const Value& v, CallArgs& a) {
  a.finish("iterable");
  return v.is_string() || v.is_list() || v.is_map() || v.is_undefined();
}
bool t_mapping(const Value& v, CallArgs& a) { a.finish("mapping"); return v.is_map() && !v.is_namespace(); }
bool t_sequence(const Value& v, CallArgs& a) {
  a.finish("sequence");
  return v.is_string() || v.is_list() || (v.is_map() && !v.is_namespace());
}
// Jinja's Undefined defines __call__ (to raise), so Python's callable() says yes.
bool t_callable(const Value& v, CallArgs& a) { a.finish("callable"); return v.is_callable() || v.is_undefined(); }
bool t_eq(const Value& v, CallArgs& a) { Value o = a.get(0, "other"); a.finish("eq"); return equals(v, o); }
bool t_ne(const Value& v, CallArgs& a) { Value o = a.get(0, "other"); a.finish("ne"); return !equals(v, o); }
bool t_lt(const Value& v, CallArgs& a) { Value o = a.get(0, "other"); a.finish("lt"); return less_than(v, o); }
bool t_gt(const Value& v, CallArgs& a) { Value o = a.get(0, "other"); a.finish("gt"); return less_than(o, v); }
bool t_le(const Value& v, CallArgs& a) { Value o = a.get(0, "other"); a.finish("le"); return !less_than(o, v); }
bool t_ge(const Value& v, CallArgs& a) { Value o = a.get(0, "other"); a.finish("ge"); return !less_than(v, o); }
bool t_in(const Value& v, CallArgs& a) { Value s = a.get(0, "seq"); a.finish("in"); return contains(s, v); }
// Jinja: value % 2 == 1, value % 2 == 0, value % num == 0 (Python's %, so floats work too).
Budget& scratch_budget() {
  static thread_local Budget budget{RenderBounds{}};
  return budget;
}
bool t_odd(const Value& v, CallArgs& a) {
  a.finish("odd");
  return equals(binary_op("%", v, Value(2), scratch_budget()), Value(1));
}
bool t_even(const Value& v, CallArgs& a) {
  a.finish("even");
  return equals(binary_op("%", v, Value(2), scratch_budget()), Value(0));
}
bool t_divisibleby(const Value& v, CallArgs& a) {
  Value n = a.get(0, "num");
  a.finish("divisibleby");
  return equals(binary_op("%", v, n, scratch_budget()), Value(0));
}
bool t_sameas(const Value& v, CallArgs& a) {
  Value o = a.get(0, "other");
  a.finish("sameas");
  if (v.kind() != o.kind()) return false;
  if (v.is_none() || v.is_undefined()) return true;
  if (v.is_bool() || v.is_int()) return v.as_int() == o.as_int();
  if (v.is_list()) return &v.list() == &o.list();
  if (v.is_map()) return &v.map() == &o.map();
  return equals(v, o);
}
bool t_lower(const Value& v, CallArgs& a) { a.finish("lower"); return v.is_string() && ascii_lower(v.str()) == v.str(); }
bool t_upper(const Value& v, CallArgs& a) { a.finish("upper"); return v.is_string() && ascii_upper(v.str()) == v.str(); }
bool t_escaped(const Value&, CallArgs& a) { a.finish("escaped"); return false; }

}  // namespace

TestFn find_test(const std::string& name) {
  static const std::unordered_map<std::string, TestFn> tests = {
      {"defined", t_defined},   {"undefined", t_undefined}, {"none", t_none},       {"string", t_string},
      {"number", t_number},     {"integer", t_integer},     {"float", t_float},     {"boolean", t_boolean},
      {"true", t_true},         {"false", t_false},         {"iterable", t_iterable}, {"mapping", t_mapping},
      {"sequence", t_sequence}, {"callable", t_callable},   {"equalto", t_eq},      {"eq", t_eq},
      {"==", t_eq},             {"ne", t_ne},               {"!=", t_ne},           {"lt", t_lt},
      {"<", t_lt},              {"lessthan", t_lt},         {"gt", t_gt},           {">", t_gt},
      {"greaterthan", t_gt},    {"le", t_le},               {"<=", t_le},           {"ge", t_ge},
      {">=", t_ge},             {"in", t_in},               {"odd", t_odd},         {"even", t_even},
      {"divisibleby", t_divisibleby}, {"sameas", t_sameas}, {"lower", t_lower},     {"upper", t_upper},
      {"escaped", t_escaped},
  };
  auto it = tests.find(name);
  return it == tests.end() ? nullptr : it->second;
}

}  // namespace kestrel::chat
