// The values a chat template computes with: Python's data model, cut down to what Jinja sees.
//
// undefined / none / bool / int / float / string / list / map (insertion-ordered, like a Python
// dict) / callable. Lists and maps are shared by reference (like Python objects), so a
// `namespace()` assigned in a loop is visible after it. Strings are UTF-8; length, indexing and
// slicing count code points, like Python's str.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace kestrel::chat {

class Value;
struct CallArgs;
using List = std::vector<Value>;
using Function = std::function<Value(CallArgs&)>;

// A Python dict with string keys: insertion-ordered, O(1) lookup.
class Map {
 public:
  const Value* find(std::string_view key) const;
  Value* find(std::string_view key);
  void set(const std::string& key, Value value);
  bool erase(const std::string& key);
  size_t size() const { return items_.size(); }
  Value& value_at(size_t i);
  const std::vector<std::pair<std::string, Value>>& items() const { return items_; }

 private:
  std::vector<std::pair<std::string, Value>> items_;
  std::unordered_map<std::string, size_t> index_;
};

constexpr int kMaxValueDepth = 512;       // lists and dicts nested deeper are refused
constexpr uint16_t kNamespaceDepth = 256;  // a namespace counts this deep (it is mutable)

enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kMap, kCallable };

class Value {
 public:
  Value() = default;  // undefined
  static Value undefined(std::string name = {});
  static Value none();
  Value(bool b) : kind_(Kind::kBool), int_(b) {}
  Value(int v) : kind_(Kind::kInt), int_(v) {}
  Value(int64_t v) : kind_(Kind::kInt), int_(v) {}
  Value(double v) : kind_(Kind::kFloat) { float_ = v; }
  Value(std::string s);
  Value(const char* s) : Value(std::string(s)) {}
  Value(List list);
  Value(Map map);
  static Value callable(std::string name, Function fn);
  // A namespace() object: a map whose attributes may be assigned (`{% set ns.x = 1 %}`).
  static Value name_space(Map map);
  // A list built from a Python tuple: printed with parentheses.
  static Value tuple(List items);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_map() const { return kind_ == Kind::kMap; }
  bool is_callable() const { return kind_ == Kind::kCallable; }
  bool is_namespace() const { return kind_ == Kind::kMap && flag_; }
  bool is_tuple() const { return kind_ == Kind::kList && flag_; }

  bool as_bool() const { return int_ != 0; }
  int64_t as_int() const { return int_; }          // int or bool
  double as_float() const { return kind_ == Kind::kFloat ? float_ : double(int_); }
  const std::string& str() const { return *static_cast<const std::string*>(ptr_.get()); }
  const List& list() const { return *static_cast<const List*>(ptr_.get()); }
  List& list_mut() { return *static_cast<List*>(ptr_.get()); }
  const Map& map() const { return *static_cast<const Map*>(ptr_.get()); }
  Map& map_mut() { return *static_cast<Map*>(ptr_.get()); }
  const Function& function() const;
  // For undefined: the name that was looked up; for callables: the function's name.
  const std::string& name() const;

  // Nesting depth: 0 for scalars, 1 + the deepest item for lists and dicts.
  int depth() const { return depth_; }
  // Namespaces are mutable, so what they hold is limited instead of tracked: values nested less
  // than kNamespaceDepth, hence no namespace (no cycles, no unbounded depth). Throws JinjaFault.
  static void check_storable_in_namespace(const Value& v);

  // Python truthiness: undefined, None, False, 0, 0.0, "", [] and {} are false.
  bool truthy() const;
  // Python's type name, for error messages: "str", "int", "list", "dict", "NoneType", ...
  std::string type_name() const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool flag_ = false;  // namespace (map) or tuple (list)
  uint16_t depth_ = 0;
  union {
    int64_t int_ = 0;  // bool, int
    double float_;
  };
  // string: std::string; list: List; map: Map; callable: a name and a Function; undefined: the
  // name that was looked up (may be null). Shared, so copying a Value is cheap (32 bytes).
  std::shared_ptr<void> ptr_;
};

// Positional and keyword arguments of a call (`f(1, x=2)`), for builtins and macros.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;

  // The argument at `index` or named `name`, else `fallback`; consumed arguments are tracked
  // so that finish() can refuse unexpected ones by name.
  Value get(size_t index, const std::string& name, Value fallback = Value());
  bool has(size_t index, const std::string& name) const;
  void finish(const std::string& function_name) const;

 private:
  size_t used_positional_ = 0;
  std::vector<std::string> used_keywords_;
};

// Bounds for expanding a value into text (str, repr, tojson) or comparing it (==): a value built
// by sharing (`{% set ns.l = [ns.l, ns.l] %}` 64 times) expands exponentially. The interpreter sets
// them for the duration of a render; the conversions throw JinjaFault beyond them.
struct ExpansionLimit {
  size_t max_bytes = SIZE_MAX;
  int64_t max_visits = INT64_MAX;
};
class ScopedExpansionLimit {
 public:
  explicit ScopedExpansionLimit(ExpansionLimit limit);
  ~ScopedExpansionLimit();
  ScopedExpansionLimit(const ScopedExpansionLimit&) = delete;
  ScopedExpansionLimit& operator=(const ScopedExpansionLimit&) = delete;

 private:
  ExpansionLimit saved_;
};

// Python's str(): None → "None", True → "True", 1.0 → "1.0", lists and dicts as repr.
// Undefined prints as the empty string (Jinja's default Undefined).
std::string to_str(const Value& v);
// Python's repr(): strings quoted ('a'), everything else as str().
std::string repr(const Value& v);
// Python's repr() of a float: shortest round-trip digits, "1e+16", "1e-05", "inf", "nan".
std::string format_float(double v);

// Python's == (1 == 1.0 == True; lists and dicts compare element-wise).
bool equals(const Value& a, const Value& b);

// json.dumps(v, ensure_ascii=False, indent=indent, separators=..., sort_keys=...) as transformers'
// `tojson` filter does it. Throws std::invalid_argument naming a value JSON cannot hold.
struct JsonStyle {
  int indent = -1;  // -1: single line; otherwise spaces per level
  std::string item_separator;  // defaults: ", " on one line, "," when indented
  std::string key_separator = ": ";
  bool sort_keys = false;
};
std::string to_json(const Value& v, const JsonStyle& style = {});

// Conversion from / to nlohmann::json (objects keep their key order when parsed with
// nlohmann::ordered_json; plain json objects come in sorted order).
Value from_json(const nlohmann::ordered_json& j);
Value from_json(const nlohmann::json& j);

// UTF-8 helpers: code-point count, and decoding into code points (invalid bytes map to U+FFFD).
size_t utf8_length(std::string_view s);
std::vector<char32_t> utf8_decode(std::string_view s);
std::string utf8_encode(const std::vector<char32_t>& cps, size_t begin, size_t end);
void utf8_append(std::string& out, char32_t cp);

}  // namespace kestrel::chat
