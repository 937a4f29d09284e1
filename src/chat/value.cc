#include "chat/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "chat/jinja_error.h"

namespace kestrel::chat {

// ---- Map ----------------------------------------------------------------------------------------

const Value* Map::find(std::string_view key) const {
  auto it = index_.find(std::string(key));
  return it == index_.end() ? nullptr : &items_[it->second].second;
}

Value* Map::find(std::string_view key) {
  auto it = index_.find(std::string(key));
  return it == index_.end() ? nullptr : &items_[it->second].second;
}

void Map::set(const std::string& key, Value value) {
  if (Value* v = find(key)) {
    *v = std::move(value);
    return;
  }
  index_[key] = items_.size();
  items_.emplace_back(key, std::move(value));
}

Value& Map::value_at(size_t i) { return items_[i].second; }

bool Map::erase(const std::string& key) {
  auto it = index_.find(key);
  if (it == index_.end()) return false;
  items_.erase(items_.begin() + it->second);
  index_.clear();
  for (size_t i = 0; i < items_.size(); ++i) index_[items_[i].first] = i;
  return true;
}

// ---- Value --------------------------------------------------------------------------------------

namespace {
struct Callable {
  std::string name;
  Function fn;
};
}  // namespace

Value Value::undefined(std::string name) {
  Value v;
  if (!name.empty()) v.ptr_ = std::make_shared<std::string>(std::move(name));
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value::Value(std::string s) : kind_(Kind::kString), ptr_(std::make_shared<std::string>(std::move(s))) {}
// Containers record how deeply they nest, so no value is deep enough to overflow the stack when it
// is printed, compared or destroyed.
static uint16_t container_depth(int deepest_item) {
  if (deepest_item + 1 > kMaxValueDepth) {
    throw JinjaFault(cat("value nested deeper than ", kMaxValueDepth, " levels"));
  }
  return uint16_t(deepest_item + 1);
}

Value::Value(List list) : kind_(Kind::kList) {
  int deepest = 0;
  for (const auto& item : list) deepest = std::max(deepest, int(item.depth_));
  depth_ = container_depth(deepest);
  ptr_ = std::make_shared<List>(std::move(list));
}

Value::Value(Map map) : kind_(Kind::kMap) {
  int deepest = 0;
  for (const auto& kv : map.items()) deepest = std::max(deepest, int(kv.second.depth_));
  depth_ = container_depth(deepest);
  ptr_ = std::make_shared<Map>(std::move(map));
}

void Value::check_storable_in_namespace(const Value& v) {
  if (v.depth_ >= kNamespaceDepth) {
    throw JinjaFault(cat("a namespace can hold only values nested less than ", int(kNamespaceDepth),
                         " levels deep, and no namespaces"));
  }
}

Value Value::callable(std::string name, Function fn) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.ptr_ = std::make_shared<Callable>(Callable{std::move(name), std::move(fn)});
  return v;
}

Value Value::name_space(Map map) {
  for (const auto& kv : map.items()) check_storable_in_namespace(kv.second);
  Value v(std::move(map));
  v.flag_ = true;
  v.depth_ = kNamespaceDepth;  // whatever it will hold: see check_storable_in_namespace
  return v;
}

Value Value::tuple(List items) {
  Value v(std::move(items));
  v.flag_ = true;
  return v;
}

const Function& Value::function() const { return static_cast<const Callable*>(ptr_.get())->fn; }

const std::string& Value::name() const {
  static const std::string empty;
  if (kind_ == Kind::kCallable) return static_cast<const Callable*>(ptr_.get())->name;
  if (kind_ == Kind::kUndefined && ptr_) return *static_cast<const std::string*>(ptr_.get());
  return empty;
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool:
    case Kind::kInt: return int_ != 0;
    case Kind::kFloat: return float_ != 0.0;
    case Kind::kString: return !str().empty();
    case Kind::kList: return !list().empty();
    case Kind::kMap: return map().size() != 0;
    case Kind::kCallable: return true;
  }
  return false;
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return flag_ ? "tuple" : "list";
    case Kind::kMap: return flag_ ? "Namespace" : "dict";
    case Kind::kCallable: return "function";
  }
  return "?";
}

// ---- CallArgs -----------------------------------------------------------------------------------

Value CallArgs::get(size_t index, const std::string& name, Value fallback) {
  if (index < positional.size()) {
    used_positional_ = std::max(used_positional_, index + 1);
    return positional[index];
  }
  for (const auto& [k, v] : keyword) {
    if (k == name) {
      used_keywords_.push_back(name);
      return v;
    }
  }
  return fallback;
}

bool CallArgs::has(size_t index, const std::string& name) const {
  if (index < positional.size()) return true;
  for (const auto& kv : keyword) {
    if (kv.first == name) return true;
  }
  return false;
}

void CallArgs::finish(const std::string& function_name) const {
  if (positional.size() > used_positional_) {
    throw JinjaFault(cat(function_name, "() takes at most ", used_positional_, " positional argument",
                         used_positional_ == 1 ? "" : "s", " (", positional.size(), " given)"));
  }
  for (const auto& kv : keyword) {
    if (std::find(used_keywords_.begin(), used_keywords_.end(), kv.first) == used_keywords_.end()) {
      throw JinjaFault(cat(function_name, "() got an unexpected keyword argument '", kv.first, "'"));
    }
  }
}

// ---- printing -----------------------------------------------------------------------------------

std::string format_float(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  if (v == 0) return std::signbit(v) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // "-1.2345e+02"
  bool negative = sci[0] == '-';
  if (negative) sci.erase(0, 1);
  size_t e_pos = sci.find('e');
  int exponent = std::stoi(sci.substr(e_pos + 1));
  std::string digits;
  for (size_t i = 0; i < e_pos; ++i) {
    if (sci[i] != '.') digits += sci[i];
  }
  int decpt = exponent + 1;  // position of the decimal point relative to the digits
  std::string out = negative ? "-" : "";
  if (decpt <= -4 || decpt > 16) {
    out += digits[0];
    if (digits.size() > 1) out += "." + digits.substr(1);
    out += exponent < 0 ? "e-" : "e+";
    int a = std::abs(exponent);
    if (a < 10) out += '0';
    out += std::to_string(a);
  } else if (decpt <= 0) {
    out += "0." + std::string(-decpt, '0') + digits;
  } else if (size_t(decpt) >= digits.size()) {
    out += digits + std::string(decpt - digits.size(), '0') + ".0";
  } else {
    out += digits.substr(0, decpt) + "." + digits.substr(decpt);
  }
  return out;
}

static std::string repr_string(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c == quote) {
          out += '\\';
          out += char(c);
        } else if (c < 0x20 || c == 0x7f) {
          static const char* hex = "0123456789abcdef";
          out += "\\x";
          out += hex[c >> 4];
          out += hex[c & 15];
        } else {
          out += char(c);
        }
    }
  }
  out += quote;
  return out;
}

// ---- expansion limits ---------------------------------------------------------------------------

namespace {
thread_local ExpansionLimit g_limit{};
thread_local int64_t g_visits = 0;

void count_visit() {
  if (++g_visits > g_limit.max_visits) {
    throw JinjaFault(cat("comparing or converting a value took more than ", g_limit.max_visits,
                         " steps (a value built to expand exponentially?)"));
  }
}

void check_expansion(size_t size, int depth) {
  if (size > g_limit.max_bytes) {
    throw JinjaFault(cat("converting a value to text exceeds the bound of ", g_limit.max_bytes, " bytes"));
  }
  if (depth > 512) throw JinjaFault("value nested deeper than 512 levels");
}
}  // namespace

ScopedExpansionLimit::ScopedExpansionLimit(ExpansionLimit limit) : saved_(g_limit) {
  g_limit = limit;
  g_visits = 0;  // one budget of comparison visits per render
}
ScopedExpansionLimit::~ScopedExpansionLimit() { g_limit = saved_; }

static void append_str(std::string& out, const Value& v, bool quoted, int depth) {
  check_expansion(out.size(), depth);
  switch (v.kind()) {
    case Kind::kUndefined: return;
    case Kind::kNone: out += "None"; return;
    case Kind::kBool: out += v.as_bool() ? "True" : "False"; return;
    case Kind::kInt: out += std::to_string(v.as_int()); return;
    case Kind::kFloat: out += format_float(v.as_float()); return;
    case Kind::kString: out += quoted ? repr_string(v.str()) : v.str(); return;
    case Kind::kList: {
      out += v.is_tuple() ? "(" : "[";
      for (size_t i = 0; i < v.list().size(); ++i) {
        if (i) out += ", ";
        append_str(out, v.list()[i], true, depth + 1);
      }
      if (v.is_tuple() && v.list().size() == 1) out += ",";
      out += v.is_tuple() ? ")" : "]";
      return;
    }
    case Kind::kMap: {
      if (v.is_namespace()) {
        out += "<Namespace>";
        return;
      }
      out += "{";
      bool first = true;
      for (const auto& [k, item] : v.map().items()) {
        if (!first) out += ", ";
        first = false;
        out += repr_string(k);
        out += ": ";
        append_str(out, item, true, depth + 1);
      }
      out += "}";
      return;
    }
    case Kind::kCallable: out += "<function " + v.name() + ">"; return;
  }
}

std::string repr(const Value& v) {
  std::string out;
  append_str(out, v, true, 0);
  return out;
}

std::string to_str(const Value& v) {
  if (v.is_string()) return v.str();
  std::string out;
  append_str(out, v, false, 0);
  return out;
}

static bool equals_at(const Value& a, const Value& b, int depth) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  count_visit();
  if (depth > 512) throw JinjaFault("value nested deeper than 512 levels");
  switch (a.kind()) {
    case Kind::kUndefined:
    case Kind::kNone: return true;
    case Kind::kString: return a.str() == b.str();
    case Kind::kList: {
      if (a.is_tuple() != b.is_tuple() || a.list().size() != b.list().size()) return false;  // [1] != (1,)
      if (&a.list() == &b.list()) return true;
      for (size_t i = 0; i < a.list().size(); ++i) {
        if (!equals_at(a.list()[i], b.list()[i], depth + 1)) return false;
      }
      return true;
    }
    case Kind::kMap: {
      if (a.map().size() != b.map().size()) return false;
      if (&a.map() == &b.map()) return true;
      for (const auto& [k, item] : a.map().items()) {
        const Value* other = b.map().find(k);
        if (!other || !equals_at(item, *other, depth + 1)) return false;
      }
      return true;
    }
    case Kind::kCallable: return &a.function() == &b.function();
    default: return false;
  }
}

bool equals(const Value& a, const Value& b) { return equals_at(a, b, 0); }

// ---- JSON ---------------------------------------------------------------------------------------

static void json_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          static const char* hex = "0123456789abcdef";
          out += "\\u00";
          out += hex[c >> 4];
          out += hex[c & 15];
        } else {
          out += char(c);
        }
    }
  }
  out += '"';
}

static void json_value(std::string& out, const Value& v, const JsonStyle& style, int depth) {
  auto newline = [&](int level) {
    if (style.indent < 0) return;
    out += '\n';
    out.append(size_t(style.indent) * level, ' ');
  };
  const std::string& item_sep =
      !style.item_separator.empty() ? style.item_separator : (style.indent < 0 ? ", " : ",");
  if (depth > 512) throw std::invalid_argument("tojson: value nested deeper than 512 levels");
  if (out.size() > g_limit.max_bytes) {
    throw std::invalid_argument(cat("tojson: the JSON text exceeds the bound of ", g_limit.max_bytes, " bytes"));
  }
  switch (v.kind()) {
    case Kind::kNone: out += "null"; return;
    case Kind::kBool: out += v.as_bool() ? "true" : "false"; return;
    case Kind::kInt: out += std::to_string(v.as_int()); return;
    case Kind::kFloat: {
      double f = v.as_float();
      if (std::isnan(f)) out += "NaN";
      else if (std::isinf(f)) out += f < 0 ? "-Infinity" : "Infinity";
      else out += format_float(f);
      return;
    }
    case Kind::kString: json_string(out, v.str()); return;
    case Kind::kList: {
      if (v.list().empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < v.list().size(); ++i) {
        if (i) out += item_sep;
        newline(depth + 1);
        json_value(out, v.list()[i], style, depth + 1);
      }
      newline(depth);
      out += ']';
      return;
    }
    case Kind::kMap: {
      if (v.map().size() == 0) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.map().items()) items.push_back(&kv);
      if (style.sort_keys) {
        std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
      }
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += item_sep;
        newline(depth + 1);
        json_string(out, items[i]->first);
        out += style.key_separator;
        json_value(out, items[i]->second, style, depth + 1);
      }
      newline(depth);
      out += '}';
      return;
    }
    case Kind::kUndefined:
    case Kind::kCallable:
      throw std::invalid_argument(cat("tojson: object of type ", v.type_name(), " is not JSON serializable"));
  }
}

std::string to_json(const Value& v, const JsonStyle& style) {
  std::string out;
  json_value(out, v, style, 0);
  return out;
}

template <typename J>
static Value from_json_impl(const J& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return Value::none();
    case nlohmann::json::value_t::boolean: return Value(j.template get<bool>());
    case nlohmann::json::value_t::number_integer: return Value(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      uint64_t u = j.template get<uint64_t>();
      if (u > uint64_t(INT64_MAX)) return Value(double(u));
      return Value(int64_t(u));
    }
    case nlohmann::json::value_t::number_float: return Value(j.template get<double>());
    case nlohmann::json::value_t::string: return Value(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      List list;
      list.reserve(j.size());
      for (const auto& item : j) list.push_back(from_json_impl(item));
      return Value(std::move(list));
    }
    case nlohmann::json::value_t::object: {
      Map map;
      for (auto it = j.begin(); it != j.end(); ++it) map.set(it.key(), from_json_impl(it.value()));
      return Value(std::move(map));
    }
    default: return Value::none();
  }
}

Value from_json(const nlohmann::ordered_json& j) { return from_json_impl(j); }
Value from_json(const nlohmann::json& j) { return from_json_impl(j); }

// ---- UTF-8 --------------------------------------------------------------------------------------

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::vector<char32_t> utf8_decode(std::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = s[i];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + len > s.size()) {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    char32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    bool ok = true;
    for (int k = 1; k < len; ++k) {
      unsigned char cc = s[i + k];
      if ((cc & 0xC0) != 0x80) ok = false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (!ok) {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    out.push_back(cp);
    i += len;
  }
  return out;
}

void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

std::string utf8_encode(const std::vector<char32_t>& cps, size_t begin, size_t end) {
  std::string out;
  for (size_t i = begin; i < end && i < cps.size(); ++i) utf8_append(out, cps[i]);
  return out;
}

}  // namespace kestrel::chat
