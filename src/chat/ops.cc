// Operators, comparisons, attribute / item access and iteration with Python's semantics.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string_view>

#include "chat/builtins.h"
#include "chat/jinja_error.h"

namespace kestrel::chat {

void Budget::over_steps() const {
  throw JinjaFault(cat("rendering exceeded the bound of ", bounds_.max_steps,
                       " evaluation steps (a loop that does not end, or too much work)"));
}

void Budget::over_size(size_t size) const {
  throw JinjaFault(cat("rendering would build a string of ", size, " bytes, over the bound of ",
                       bounds_.max_output_bytes, " bytes"));
}

void Budget::over_items(size_t items) const {
  throw JinjaFault(cat("rendering would build a list of ", items, " items, over the bound of ", max_items(), " items"));
}

namespace {

[[noreturn]] void undefined_error(const Value& v) {
  if (v.name().empty()) throw JinjaFault("value is undefined");
  throw JinjaFault(cat("'", v.name(), "' is undefined"));
}

[[noreturn]] void type_error(const std::string& op, const Value& a, const Value& b) {
  throw JinjaFault(cat("unsupported operand type(s) for ", op, ": '", a.type_name(), "' and '", b.type_name(), "'"));
}

[[noreturn]] void overflow() { throw JinjaFault("integer overflow (kestrel's template integers are 64-bit)"); }

int64_t checked_add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) overflow();
  return r;
}
int64_t checked_sub(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) overflow();
  return r;
}
int64_t checked_mul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) overflow();
  return r;
}

int64_t floor_div(int64_t a, int64_t b) {
  if (b == 0) throw JinjaFault("integer division or modulo by zero");
  if (a == INT64_MIN && b == -1) overflow();
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t py_mod(int64_t a, int64_t b) {
  if (b == 0) throw JinjaFault("integer division or modulo by zero");
  if (b == -1) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

Value int_pow(int64_t base, int64_t exp) {
  if (exp < 0) {
    if (base == 0) throw JinjaFault("0 cannot be raised to a negative power");
    return Value(std::pow(double(base), double(exp)));
  }
  int64_t result = 1;
  while (exp > 0) {
    if (exp & 1) result = checked_mul(result, base);
    exp >>= 1;
    if (exp > 0) base = checked_mul(base, base);
  }
  return Value(result);
}

Value repeat(const Value& seq, int64_t n, Budget& budget) {
  if (n <= 0) return seq.is_string() ? Value(std::string()) : Value(List{});
  if (seq.is_string()) {
    budget.check_size(seq.str().size() * size_t(std::min<int64_t>(n, INT32_MAX)));
    budget.charge(int64_t(seq.str().size() * n / 16));
    std::string out;
    out.reserve(seq.str().size() * n);
    for (int64_t i = 0; i < n; ++i) out += seq.str();
    return Value(std::move(out));
  }
  budget.check_items(seq.list().size() * size_t(std::min<int64_t>(n, INT32_MAX)));
  budget.charge(int64_t(seq.list().size() * n));
  List out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.list().begin(), seq.list().end());
  return Value(std::move(out));
}

// Python's printf-style `"%s and %.2f" % (a, b)`: flags (-+ #0), width, precision and the
// conversions s r d i u f F e E g G x X o c %; no `%(name)s` or `*` widths.
Value percent_format(const std::string& fmt, const Value& args, Budget& budget) {
  List items = args.is_tuple() ? args.list() : List{args};
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    size_t spec_start = i;
    ++i;
    while (i < fmt.size() && std::string_view("-+ #0").find(fmt[i]) != std::string_view::npos) ++i;
    while (i < fmt.size() && std::isdigit((unsigned char)fmt[i])) ++i;
    if (i < fmt.size() && fmt[i] == '.') {
      ++i;
      while (i < fmt.size() && std::isdigit((unsigned char)fmt[i])) ++i;
    }
    if (i >= fmt.size()) throw JinjaFault("incomplete format");
    char c = fmt[i];
    std::string spec = fmt.substr(spec_start, i - spec_start);  // "%-8.3" without the conversion
    for (size_t k = 1, n = 0; k <= spec.size(); ++k) {  // widths and precisions up to 256
      if (k < spec.size() && std::isdigit((unsigned char)spec[k])) {
        n = n * 10 + size_t(spec[k] - '0');
        if (n > 256) throw JinjaFault("format widths and precisions above 256 are not supported");
      } else {
        n = 0;
      }
    }
    if (c == '%') {
      out += '%';
      continue;
    }
    if (next >= items.size()) throw JinjaFault("not enough arguments for format string");
    const Value& v = items[next++];
    char buf[512];
    if (c == 's' || c == 'r') {
      std::string text = c == 's' ? to_str(v) : repr(v);
      size_t dot = spec.find('.');
      if (dot != std::string::npos) {
        size_t precision = 0;
        for (size_t k = dot + 1; k < spec.size(); ++k) precision = precision * 10 + size_t(spec[k] - '0');
        if (utf8_length(text) > precision) text = utf8_encode(utf8_decode(text), 0, precision);
      }
      size_t w_start = spec.find_first_of("123456789");
      size_t width = (w_start != std::string::npos && (dot == std::string::npos || w_start < dot))
                         ? std::stoul(spec.substr(w_start, (dot == std::string::npos ? spec.size() : dot) - w_start))
                         : 0;
      size_t len = utf8_length(text);
      if (len < width) {
        if (spec.find('-') != std::string::npos) text += std::string(width - len, ' ');
        else text = std::string(width - len, ' ') + text;
      }
      out += text;
    } else if (std::string_view("diuxXoc").find(c) != std::string_view::npos) {
      if (!v.is_number()) throw JinjaFault(cat("%", c, " format: a number is required, not ", v.type_name()));
      long long n = v.is_float() ? (long long)v.as_float() : (long long)v.as_int();
      if (c == 'c') {
        utf8_append(out, char32_t(n));
        continue;
      }
      char conv = c == 'i' || c == 'u' ? 'd' : c;
      std::snprintf(buf, sizeof buf, (spec + "ll" + conv).c_str(), n);
      out += buf;
    } else if (std::string_view("fFeEgG").find(c) != std::string_view::npos) {
      if (!v.is_number()) throw JinjaFault(cat("%", c, " format: a number is required, not ", v.type_name()));
      std::snprintf(buf, sizeof buf, (spec + c).c_str(), v.as_float());
      out += buf;
    } else {
      throw JinjaFault(cat("unsupported format character '", c, "'"));
    }
    budget.check_size(out.size());
  }
  // Python lets a single list or dict argument go unused (it could be a mapping for %(name)s).
  bool mapping_like = !args.is_tuple() && (args.is_list() || args.is_map());
  if (next < items.size() && !mapping_like) throw JinjaFault("not all arguments converted during string formatting");
  return Value(std::move(out));
}

}  // namespace

Value negate(const Value& v) {
  if (v.is_undefined()) undefined_error(v);
  if (v.is_float()) return Value(-v.as_float());
  if (v.is_number()) return Value(checked_sub(0, v.as_int()));
  throw JinjaFault(cat("bad operand type for unary -: '", v.type_name(), "'"));
}

Value binary_op(const std::string& op, const Value& a, const Value& b, Budget& budget) {
  if (op == "~") {
    std::string s = to_str(a);
    std::string t = to_str(b);
    budget.check_size(s.size() + t.size());
    budget.charge(int64_t((s.size() + t.size()) / 16));
    return Value(s + t);
  }
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  bool numbers = a.is_number() && b.is_number();
  bool floats = numbers && (a.is_float() || b.is_float());
  if (op == "+") {
    if (floats) return Value(a.as_float() + b.as_float());
    if (numbers) return Value(checked_add(a.as_int(), b.as_int()));
    if (a.is_string() && b.is_string()) {
      budget.check_size(a.str().size() + b.str().size());
      budget.charge(int64_t((a.str().size() + b.str().size()) / 16));
      return Value(a.str() + b.str());
    }
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
      budget.check_items(a.list().size() + b.list().size());
      budget.charge(int64_t(a.list().size() + b.list().size()));
      List out = a.list();
      out.insert(out.end(), b.list().begin(), b.list().end());
      return a.is_tuple() ? Value::tuple(std::move(out)) : Value(std::move(out));
    }
    if (a.is_string() || b.is_string()) {
      throw JinjaFault(cat("can only concatenate str (not \"", (a.is_string() ? b : a).type_name(),
                           "\") to str; use '~' to join text and other values"));
    }
    type_error(op, a, b);
  }
  if (op == "-") {
    if (floats) return Value(a.as_float() - b.as_float());
    if (numbers) return Value(checked_sub(a.as_int(), b.as_int()));
    type_error(op, a, b);
  }
  if (op == "*") {
    if (floats) return Value(a.as_float() * b.as_float());
    if (numbers) return Value(checked_mul(a.as_int(), b.as_int()));
    if ((a.is_string() || a.is_list()) && b.is_number() && !b.is_float()) return repeat(a, b.as_int(), budget);
    if ((b.is_string() || b.is_list()) && a.is_number() && !a.is_float()) return repeat(b, a.as_int(), budget);
    type_error(op, a, b);
  }
  if (op == "/") {
    if (!numbers) type_error(op, a, b);
    if (b.as_float() == 0) throw JinjaFault("division by zero");
    return Value(a.as_float() / b.as_float());
  }
  if (op == "//") {
    if (!numbers) type_error(op, a, b);
    if (floats) {
      if (b.as_float() == 0) throw JinjaFault("float floor division by zero");
      return Value(std::floor(a.as_float() / b.as_float()));
    }
    return Value(floor_div(a.as_int(), b.as_int()));
  }
  if (op == "%") {
    if (a.is_string()) return percent_format(a.str(), b, budget);
    if (!numbers) type_error(op, a, b);
    if (floats) {
      double y = b.as_float();
      if (y == 0) throw JinjaFault("float modulo by zero");
      double r = std::fmod(a.as_float(), y);
      if (r != 0 && ((r < 0) != (y < 0))) r += y;
      return Value(r);
    }
    return Value(py_mod(a.as_int(), b.as_int()));
  }
  if (op == "**") {
    if (!numbers) type_error(op, a, b);
    if (floats) {
      if (a.as_float() == 0 && b.as_float() < 0) throw JinjaFault("0.0 cannot be raised to a negative power");
      return Value(std::pow(a.as_float(), b.as_float()));
    }
    return int_pow(a.as_int(), b.as_int());
  }
  throw JinjaFault(cat("unknown operator '", op, "'"));
}

bool less_than(const Value& a, const Value& b) {
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() < b.as_float();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();  // UTF-8 byte order = code point order
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const List& x = a.list();
    const List& y = b.list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equals(x[i], y[i])) return less_than(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  throw JinjaFault(cat("'<' not supported between instances of '", a.type_name(), "' and '", b.type_name(), "'"));
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Kind::kUndefined: return false;
    case Kind::kString:
      if (!item.is_string()) {
        throw JinjaFault(cat("'in <string>' requires string as left operand, not ", item.type_name()));
      }
      return container.str().find(item.str()) != std::string::npos;
    case Kind::kList:
      for (const auto& v : container.list()) {
        if (equals(v, item)) return true;
      }
      return false;
    case Kind::kMap: return item.is_string() && container.map().find(item.str()) != nullptr;
    default: throw JinjaFault(cat("argument of type '", container.type_name(), "' is not iterable"));
  }
}

bool compare(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return equals(a, b);
  if (op == "!=") return !equals(a, b);
  if (op == "<") return less_than(a, b);
  if (op == ">") return less_than(b, a);
  if (op == "<=") return less_than(a, b) || equals(a, b);
  if (op == ">=") return less_than(b, a) || equals(a, b);
  if (op == "in") return contains(b, a);
  if (op == "not in") return !contains(b, a);
  throw JinjaFault(cat("unknown comparison '", op, "'"));
}

int64_t length(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined: return 0;
    case Kind::kString: return int64_t(utf8_length(v.str()));
    case Kind::kList: return int64_t(v.list().size());
    case Kind::kMap: return int64_t(v.map().size());
    default: throw JinjaFault(cat("object of type '", v.type_name(), "' has no len()"));
  }
}

List iterate(const Value& v, Budget& budget) {
  switch (v.kind()) {
    case Kind::kUndefined: return {};
    case Kind::kList: budget.charge(int64_t(v.list().size())); return v.list();
    case Kind::kMap: {
      budget.check_items(v.map().size());
      budget.charge(int64_t(v.map().size()));
      List keys;
      for (const auto& kv : v.map().items()) keys.push_back(Value(kv.first));
      return keys;
    }
    case Kind::kString: {
      budget.check_items(v.str().size());
      budget.charge(int64_t(v.str().size()));
      List chars;
      std::vector<char32_t> cps = utf8_decode(v.str());
      for (size_t i = 0; i < cps.size(); ++i) chars.push_back(Value(utf8_encode(cps, i, i + 1)));
      return chars;
    }
    default: throw JinjaFault(cat("'", v.type_name(), "' object is not iterable"));
  }
}

Value get_item(const Value& obj, const Value& key, Budget& budget) {
  if (obj.is_undefined()) undefined_error(obj);
  if ((obj.is_list() || obj.is_string()) && key.is_number() && !key.is_float()) {
    int64_t n = obj.is_list() ? int64_t(obj.list().size()) : length(obj);
    int64_t i = key.as_int();
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value::undefined(cat(repr(obj).substr(0, 40), "[", key.as_int(), "]"));
    if (obj.is_list()) return obj.list()[size_t(i)];
    if (utf8_length(obj.str()) == obj.str().size()) return Value(obj.str().substr(size_t(i), 1));
    std::vector<char32_t> cps = utf8_decode(obj.str());
    return Value(utf8_encode(cps, size_t(i), size_t(i) + 1));
  }
  if (obj.is_map() && key.is_string()) {
    if (const Value* v = obj.map().find(key.str())) return *v;
  }
  if (key.is_string()) return get_attr(obj, key.str(), budget);
  return Value::undefined(to_str(key));
}

Value slice(const Value& obj, const Value& start_v, const Value& stop_v, const Value& step_v) {
  if (obj.is_undefined()) undefined_error(obj);
  if (!obj.is_list() && !obj.is_string()) throw JinjaFault(cat("'", obj.type_name(), "' object is not subscriptable"));
  auto as_index = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_none() || v.is_undefined()) return std::nullopt;
    if (!v.is_number() || v.is_float()) throw JinjaFault(cat("slice ", what, " must be an integer or none"));
    return v.as_int();
  };
  std::vector<char32_t> cps;
  bool ascii = obj.is_string() && utf8_length(obj.str()) == obj.str().size();
  if (obj.is_string() && !ascii) cps = utf8_decode(obj.str());
  int64_t n = obj.is_list() ? int64_t(obj.list().size()) : ascii ? int64_t(obj.str().size()) : int64_t(cps.size());
  int64_t step = as_index(step_v, "step").value_or(1);
  if (step == 0) throw JinjaFault("slice step cannot be zero");
  auto clamp = [&](std::optional<int64_t> idx, int64_t def) {
    if (!idx) return def;
    int64_t i = *idx;
    if (i < 0) i += n;
    if (step > 0) return std::clamp<int64_t>(i, 0, n);
    return std::clamp<int64_t>(i, -1, n - 1);
  };
  int64_t start = clamp(as_index(start_v, "start"), step > 0 ? 0 : n - 1);
  int64_t stop = clamp(as_index(stop_v, "stop"), step > 0 ? n : -1);
  std::vector<int64_t> picks;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) picks.push_back(i);
  if (obj.is_list()) {
    List out;
    out.reserve(picks.size());
    for (int64_t i : picks) out.push_back(obj.list()[size_t(i)]);
    return obj.is_tuple() ? Value::tuple(std::move(out)) : Value(std::move(out));
  }
  std::string out;
  for (int64_t i : picks) {
    if (ascii) out += obj.str()[size_t(i)];
    else utf8_append(out, cps[size_t(i)]);
  }
  return Value(std::move(out));
}

}  // namespace kestrel::chat
