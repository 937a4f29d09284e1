// The filters of transformers' chat-template environment (Jinja's builtins, with transformers'
// own `tojson`). Tests (`is defined`, …) are in jinja_tests.cc.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <unordered_map>

#include "chat/builtins.h"
#include "chat/jinja_error.h"
#include "chat/text_util.h"

namespace kestrel::chat {

namespace {

// ---- helpers ------------------------------------------------------------------------------------

// Jinja's attribute getter: "a.b.0" follows items, numbers index lists.
Value get_path(const Value& v, const std::string& path, Budget& budget) {
  Value cur = v;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    cur = cur.is_undefined() ? cur : get_item(cur, digits ? Value(int64_t(std::stoll(part))) : Value(part), budget);
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

Value lower_if_string(const Value& v, bool case_sensitive) {
  return !case_sensitive && v.is_string() ? Value(ascii_lower(v.str())) : v;
}

int64_t as_int_arg(const Value& v, const std::string& what) {
  if (!v.is_number() || v.is_float()) throw JinjaFault(cat(what, " must be an integer, not ", v.type_name()));
  return v.as_int();
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

// Escapes non-ASCII as \uXXXX (json.dumps with ensure_ascii=True).
std::string ascii_json(const std::string& json) {
  std::string out;
  char buf[16];
  for (char32_t cp : utf8_decode(json)) {
    if (cp < 0x80) {
      out += char(cp);
    } else if (cp < 0x10000) {
      std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(cp));
      out += buf;
    } else {
      char32_t v = cp - 0x10000;
      std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(0xD800 + (v >> 10)));
      out += buf;
      std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(0xDC00 + (v & 0x3FF)));
      out += buf;
    }
  }
  return out;
}

// ---- filters ------------------------------------------------------------------------------------

Value f_tojson(const Value& v, CallArgs& a, Budget& budget) {
  JsonStyle style;
  // transformers' signature: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
  Value ensure_ascii = a.get(0, "ensure_ascii", Value(false));
  Value indent = a.get(1, "indent", Value::none());
  Value separators = a.get(2, "separators", Value::none());
  Value sort_keys = a.get(3, "sort_keys", Value(false));
  a.finish("tojson");
  if (indent.is_int()) style.indent = int(std::clamp<int64_t>(indent.as_int(), 0, 64));
  else if (!indent.is_none()) throw JinjaFault("tojson indent must be an integer or none");
  if (separators.is_list() && separators.list().size() == 2 && separators.list()[0].is_string() &&
      separators.list()[1].is_string()) {
    style.item_separator = separators.list()[0].str();
    style.key_separator = separators.list()[1].str();
  } else if (!separators.is_none()) {
    throw JinjaFault("tojson separators must be a pair of strings");
  }
  style.sort_keys = sort_keys.truthy();
  budget.charge(16);
  std::string out;
  try {
    out = to_json(v, style);
  } catch (const std::invalid_argument& e) {
    throw JinjaFault(e.what());
  }
  budget.check_size(out.size());
  budget.charge(int64_t(out.size() / 16));
  return Value(ensure_ascii.truthy() ? ascii_json(out) : out);
}

Value f_trim(const Value& v, CallArgs& a, Budget&) {
  Value chars = a.get(0, "chars", Value::none());
  a.finish("trim");
  std::optional<std::string> set;
  if (chars.is_string()) set = chars.str();
  return Value(py_strip(to_str(v), set, true, true));
}

Value f_length(const Value& v, CallArgs& a, Budget&) { a.finish("length"); return Value(length(v)); }

Value f_items(const Value& v, CallArgs& a, Budget&) {
  a.finish("items");
  if (v.is_undefined()) return Value(List{});
  if (!v.is_map()) throw JinjaFault(cat("items filter needs a mapping, not ", v.type_name()));
  List out;
  for (const auto& [k, item] : v.map().items()) out.push_back(Value::tuple({Value(k), item}));
  return Value(std::move(out));
}

Value f_join(const Value& v, CallArgs& a, Budget& budget) {
  Value sep = a.get(0, "d", Value(""));
  Value attribute = a.get(1, "attribute", Value::none());
  a.finish("join");
  std::string out;
  bool first = true;
  for (const auto& item : iterate(v, budget)) {
    if (!first) out += to_str(sep);
    first = false;
    out += to_str(attribute.is_none() ? item : get_path(item, to_str(attribute), budget));
    budget.check_size(out.size());
  }
  return Value(std::move(out));
}

Value f_default(const Value& v, CallArgs& a, Budget&) {
  Value fallback = a.get(0, "default_value", Value(""));
  Value boolean = a.get(1, "boolean", Value(false));
  a.finish("default");
  if (v.is_undefined() || (boolean.truthy() && !v.truthy())) return fallback;
  return v;
}

Value f_upper(const Value& v, CallArgs& a, Budget&) { a.finish("upper"); return Value(ascii_upper(to_str(v))); }
Value f_lower(const Value& v, CallArgs& a, Budget&) { a.finish("lower"); return Value(ascii_lower(to_str(v))); }
// Jinja's title filter (not Python's str.title): the first character after the start or after a
// run of '-', whitespace, '(', '{', '[' or '<' is upper-cased, the rest of each piece lower-cased.
Value f_title(const Value& v, CallArgs& a, Budget&) {
  a.finish("title");
  std::string s = to_str(v), out;
  auto is_delim = [](char c) { return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || std::isspace((unsigned char)c); };
  bool piece_start = true;
  for (char c : s) {
    if (is_delim(c)) {
      out += c;
      piece_start = true;
    } else {
      out += char(piece_start ? std::toupper((unsigned char)c) : std::tolower((unsigned char)c));
      piece_start = false;
    }
  }
  return Value(out);
}
Value f_capitalize(const Value& v, CallArgs& a, Budget&) { a.finish("capitalize"); return Value(py_capitalize(to_str(v))); }

Value f_replace(const Value& v, CallArgs& a, Budget& budget) {
  std::string old_s = to_str(a.get(0, "old"));
  std::string new_s = to_str(a.get(1, "new"));
  Value count = a.get(2, "count", Value::none());
  a.finish("replace");
  return Value(py_replace(to_str(v), old_s, new_s, count.is_int() ? count.as_int() : -1, budget));
}

Value f_first(const Value& v, CallArgs& a, Budget& budget) {
  a.finish("first");
  List items = iterate(v, budget);
  return items.empty() ? Value::undefined("first item of an empty sequence") : items.front();
}

Value f_last(const Value& v, CallArgs& a, Budget& budget) {
  a.finish("last");
  List items = iterate(v, budget);
  return items.empty() ? Value::undefined("last item of an empty sequence") : items.back();
}

Value f_list(const Value& v, CallArgs& a, Budget& budget) { a.finish("list"); return Value(iterate(v, budget)); }
Value f_string(const Value& v, CallArgs& a, Budget&) { a.finish("string"); return Value(to_str(v)); }
Value f_safe(const Value& v, CallArgs& a, Budget&) { a.finish("safe"); return v; }
Value f_escape(const Value& v, CallArgs& a, Budget&) { a.finish("escape"); return Value(html_escape(to_str(v))); }

Value f_int(const Value& v, CallArgs& a, Budget&) {
  Value fallback = a.get(0, "default", Value(0));
  Value base = a.get(1, "base", Value(10));
  a.finish("int");
  if (v.is_undefined()) throw JinjaFault(v.name().empty() ? "int of an undefined value" : cat("'", v.name(), "' is undefined"));
  if (v.is_float()) {
    double f = v.as_float();
    if (!std::isfinite(f) || std::fabs(f) > 9.2e18) return fallback;
    return Value(int64_t(f));
  }
  if (v.is_number()) return Value(v.as_int());
  if (!v.is_string()) return fallback;
  std::string s = py_strip(v.str(), std::nullopt, true, true);
  s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
  if (s.empty()) return fallback;
  char* end = nullptr;
  errno = 0;
  long long n = std::strtoll(s.c_str(), &end, int(base.is_int() ? base.as_int() : 10));
  if (end && *end == '\0' && errno == 0) return Value(int64_t(n));
  double d = std::strtod(s.c_str(), &end);
  if (end && *end == '\0' && std::isfinite(d) && std::fabs(d) < 9.2e18) return Value(int64_t(d));
  return fallback;
}

Value f_float(const Value& v, CallArgs& a, Budget&) {
  Value fallback = a.get(0, "default", Value(0.0));
  a.finish("float");
  if (v.is_undefined()) throw JinjaFault(v.name().empty() ? "float of an undefined value" : cat("'", v.name(), "' is undefined"));
  if (v.is_number()) return Value(v.as_float());
  if (!v.is_string()) return fallback;
  std::string s = py_strip(v.str(), std::nullopt, true, true);
  char* end = nullptr;
  double d = std::strtod(s.c_str(), &end);
  if (s.empty() || !end || *end != '\0') return fallback;
  return Value(d);
}

Value f_abs(const Value& v, CallArgs& a, Budget&) {
  a.finish("abs");
  if (v.is_float()) return Value(std::fabs(v.as_float()));
  if (v.is_number()) return v.as_int() < 0 ? negate(v) : Value(v.as_int());
  throw JinjaFault(cat("bad operand type for abs(): '", v.type_name(), "'"));
}

Value f_round(const Value& v, CallArgs& a, Budget&) {
  int64_t precision = as_int_arg(a.get(0, "precision", Value(0)), "round precision");
  std::string method = to_str(a.get(1, "method", Value("common")));
  a.finish("round");
  if (!v.is_number()) throw JinjaFault(cat("round filter needs a number, not ", v.type_name()));
  if (method == "common" && !v.is_float()) return Value(v.as_int());  // Python: round(int, n) is that int
  double scale = std::pow(10.0, double(precision));
  double x = v.as_float() * scale;
  if (method == "common") x = std::nearbyint(x);  // Python's round(): half to even
  else if (method == "ceil") x = std::ceil(x);
  else if (method == "floor") x = std::floor(x);
  else throw JinjaFault("round method must be 'common', 'ceil' or 'floor'");
  return Value(x / scale);
}

// select / reject / selectattr / rejectattr share one implementation.
Value select_impl(const Value& v, CallArgs& a, Budget& budget, bool keep, bool by_attr, const char* name) {
  size_t first_test_arg = by_attr ? 2 : 1;
  std::string attribute;
  if (by_attr) {
    if (a.positional.empty()) throw JinjaFault(cat(name, "() needs an attribute name"));
    attribute = to_str(a.positional[0]);
  }
  std::string test_name;
  if (a.positional.size() >= first_test_arg) test_name = to_str(a.positional[first_test_arg - 1]);
  TestFn test = nullptr;
  if (!test_name.empty()) {
    test = find_test(test_name);
    if (!test) throw JinjaFault(cat("unknown test '", test_name, "' in ", name, "()"));
  }
  if (!a.keyword.empty()) throw JinjaFault(cat(name, "() takes no keyword arguments"));
  List out;
  for (const auto& item : iterate(v, budget)) {
    Value subject = by_attr ? get_path(item, attribute, budget) : item;
    bool pass;
    if (test) {
      CallArgs test_args;
      test_args.positional.assign(a.positional.begin() + long(std::min(first_test_arg, a.positional.size())),
                                  a.positional.end());
      pass = test(subject, test_args);
    } else {
      pass = subject.truthy();
    }
    if (pass == keep) out.push_back(item);
  }
  return Value(std::move(out));
}

Value f_select(const Value& v, CallArgs& a, Budget& b) { return select_impl(v, a, b, true, false, "select"); }
Value f_reject(const Value& v, CallArgs& a, Budget& b) { return select_impl(v, a, b, false, false, "reject"); }
Value f_selectattr(const Value& v, CallArgs& a, Budget& b) { return select_impl(v, a, b, true, true, "selectattr"); }
Value f_rejectattr(const Value& v, CallArgs& a, Budget& b) { return select_impl(v, a, b, false, true, "rejectattr"); }

Value f_map(const Value& v, CallArgs& a, Budget& budget) {
  List out;
  List items = iterate(v, budget);
  if (a.positional.empty()) {
    Value attribute = a.get(SIZE_MAX, "attribute");
    Value fallback = a.get(SIZE_MAX, "default");
    a.finish("map");
    if (attribute.is_undefined()) throw JinjaFault("map() needs a filter name or attribute=");
    for (const auto& item : items) {
      Value got = get_path(item, to_str(attribute), budget);
      out.push_back(got.is_undefined() && !fallback.is_undefined() ? fallback : got);
    }
    return Value(std::move(out));
  }
  std::string filter_name = to_str(a.positional[0]);
  FilterFn filter = find_filter(filter_name);
  if (!filter) throw JinjaFault(cat("unknown filter '", filter_name, "' in map()"));
  for (const auto& item : items) {
    CallArgs filter_args;
    filter_args.positional.assign(a.positional.begin() + 1, a.positional.end());
    filter_args.keyword = a.keyword;
    out.push_back(filter(item, filter_args, budget));
  }
  return Value(std::move(out));
}

Value f_unique(const Value& v, CallArgs& a, Budget& budget) {
  bool case_sensitive = a.get(0, "case_sensitive", Value(false)).truthy();
  Value attribute = a.get(1, "attribute", Value::none());
  a.finish("unique");
  List out, seen;
  for (const auto& item : iterate(v, budget)) {
    Value key = lower_if_string(attribute.is_none() ? item : get_path(item, to_str(attribute), budget), case_sensitive);
    bool dup = false;
    for (const auto& s : seen) dup = dup || equals(s, key);
    budget.charge(int64_t(seen.size()));
    if (!dup) {
      seen.push_back(key);
      out.push_back(item);
    }
  }
  return Value(std::move(out));
}

Value f_sort(const Value& v, CallArgs& a, Budget& budget) {
  bool reverse = a.get(0, "reverse", Value(false)).truthy();
  bool case_sensitive = a.get(1, "case_sensitive", Value(false)).truthy();
  Value attribute = a.get(2, "attribute", Value::none());
  a.finish("sort");
  List items = iterate(v, budget);
  std::vector<std::pair<Value, Value>> keyed;
  for (const auto& item : items) {
    keyed.emplace_back(lower_if_string(attribute.is_none() ? item : get_path(item, to_str(attribute), budget), case_sensitive), item);
  }
  budget.charge(int64_t(items.size()) * 8);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return reverse ? less_than(y.first, x.first) : less_than(x.first, y.first);
  });
  List out;
  for (auto& kv : keyed) out.push_back(kv.second);
  return Value(std::move(out));
}

Value f_dictsort(const Value& v, CallArgs& a, Budget& budget) {
  bool case_sensitive = a.get(0, "case_sensitive", Value(false)).truthy();
  std::string by = to_str(a.get(1, "by", Value("key")));
  bool reverse = a.get(2, "reverse", Value(false)).truthy();
  a.finish("dictsort");
  if (!v.is_map()) throw JinjaFault(cat("dictsort needs a mapping, not ", v.type_name()));
  int pos = by == "key" ? 0 : by == "value" ? 1 : -1;
  if (pos < 0) throw JinjaFault("dictsort: 'by' must be 'key' or 'value'");
  List items;
  for (const auto& [k, item] : v.map().items()) items.push_back(Value::tuple({Value(k), item}));
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    Value kx = lower_if_string(x.list()[pos], case_sensitive), ky = lower_if_string(y.list()[pos], case_sensitive);
    return reverse ? less_than(ky, kx) : less_than(kx, ky);
  });
  budget.charge(int64_t(items.size()) * 8);
  return Value(std::move(items));
}

Value min_max(const Value& v, CallArgs& a, Budget& budget, bool want_max) {
  bool case_sensitive = a.get(0, "case_sensitive", Value(false)).truthy();
  Value attribute = a.get(1, "attribute", Value::none());
  a.finish(want_max ? "max" : "min");
  List items = iterate(v, budget);
  if (items.empty()) return Value::undefined("min/max of an empty sequence");
  size_t best = 0;
  auto key = [&](size_t i) {
    return lower_if_string(attribute.is_none() ? items[i] : get_path(items[i], to_str(attribute), budget), case_sensitive);
  };
  for (size_t i = 1; i < items.size(); ++i) {
    if (want_max ? less_than(key(best), key(i)) : less_than(key(i), key(best))) best = i;
  }
  return items[best];
}
Value f_min(const Value& v, CallArgs& a, Budget& b) { return min_max(v, a, b, false); }
Value f_max(const Value& v, CallArgs& a, Budget& b) { return min_max(v, a, b, true); }

Value f_sum(const Value& v, CallArgs& a, Budget& budget) {
  Value attribute = a.get(0, "attribute", Value::none());
  Value total = a.get(1, "start", Value(0));
  a.finish("sum");
  for (const auto& item : iterate(v, budget)) {
    total = binary_op("+", total, attribute.is_none() ? item : get_path(item, to_str(attribute), budget), budget);
  }
  return total;
}

Value f_reverse(const Value& v, CallArgs& a, Budget& budget) {
  a.finish("reverse");
  if (v.is_string()) return slice(v, Value::none(), Value::none(), Value(-1));
  List items = iterate(v, budget);
  std::reverse(items.begin(), items.end());
  return Value(std::move(items));
}

Value f_indent(const Value& v, CallArgs& a, Budget& budget) {
  Value width = a.get(0, "width", Value(4));
  bool first = a.get(1, "first", Value(false)).truthy();
  bool blank = a.get(2, "blank", Value(false)).truthy();
  a.finish("indent");
  std::string pad = width.is_string() ? width.str() : std::string(size_t(std::clamp<int64_t>(as_int_arg(width, "indent width"), 0, 1024)), ' ');
  std::string s = to_str(v);
  std::string out;
  size_t start = 0;
  bool is_first = true;
  while (start <= s.size()) {
    size_t nl = s.find('\n', start);
    std::string line = s.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
    bool indent_line = (is_first ? first : true) && (blank || !py_strip(line, std::nullopt, true, true).empty());
    if (indent_line) out += pad;
    out += line;
    if (nl == std::string::npos) break;
    out += '\n';
    start = nl + 1;
    is_first = false;
    budget.check_size(out.size());
  }
  return Value(std::move(out));
}

// Jinja counts runs of word characters (\w+).
Value f_wordcount(const Value& v, CallArgs& a, Budget&) {
  a.finish("wordcount");
  int64_t n = 0;
  bool in_word = false;
  for (unsigned char c : to_str(v)) {
    bool word = std::isalnum(c) || c == '_' || c >= 0x80;
    if (word && !in_word) ++n;
    in_word = word;
  }
  return Value(n);
}

Value f_format(const Value& v, CallArgs& a, Budget& budget) {
  if (!a.keyword.empty()) throw JinjaFault("format filter: keyword arguments are not supported");
  return binary_op("%", Value(to_str(v)), Value::tuple(a.positional), budget);
}

Value f_attr(const Value& v, CallArgs& a, Budget& budget) {
  Value name = a.get(0, "name");
  a.finish("attr");
  return get_attr(v, to_str(name), budget);
}

Value f_batch(const Value& v, CallArgs& a, Budget& budget) {
  int64_t n = as_int_arg(a.get(0, "linecount"), "batch size");
  Value fill = a.get(1, "fill_with", Value::none());
  a.finish("batch");
  if (n <= 0) throw JinjaFault("batch size must be positive");
  List out, cur;
  for (const auto& item : iterate(v, budget)) {
    cur.push_back(item);
    if (int64_t(cur.size()) == n) out.push_back(Value(std::move(cur))), cur.clear();
  }
  if (!cur.empty()) {
    if (!fill.is_none()) while (int64_t(cur.size()) < n) cur.push_back(fill);
    out.push_back(Value(std::move(cur)));
  }
  return Value(std::move(out));
}

}  // namespace

FilterFn find_filter(const std::string& name) {
  static const std::unordered_map<std::string, FilterFn> filters = {
      {"tojson", f_tojson},       {"trim", f_trim},           {"length", f_length},     {"count", f_length},
      {"items", f_items},         {"join", f_join},           {"default", f_default},   {"d", f_default},
      {"upper", f_upper},         {"lower", f_lower},         {"title", f_title},       {"capitalize", f_capitalize},
      {"replace", f_replace},     {"first", f_first},         {"last", f_last},         {"list", f_list},
      {"string", f_string},       {"int", f_int},             {"float", f_float},       {"abs", f_abs},
      {"round", f_round},         {"select", f_select},       {"reject", f_reject},     {"selectattr", f_selectattr},
      {"rejectattr", f_rejectattr}, {"map", f_map},           {"unique", f_unique},     {"sort", f_sort},
      {"dictsort", f_dictsort},   {"min", f_min},             {"max", f_max},           {"sum", f_sum},
      {"reverse", f_reverse},     {"indent", f_indent},       {"safe", f_safe},         {"e", f_escape},
      {"escape", f_escape},       {"forceescape", f_escape},  {"wordcount", f_wordcount}, {"format", f_format},
      {"attr", f_attr},           {"batch", f_batch},
  };
  auto it = filters.find(name);
  return it == filters.end() ? nullptr : it->second;
}

}  // namespace kestrel::chat
