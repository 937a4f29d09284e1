// Attribute access, Python's str and dict methods, and the template globals.
#include <algorithm>
#include <ctime>
#include <set>

#include "chat/builtins.h"
#include "chat/jinja_error.h"
#include "chat/text_util.h"

namespace kestrel::chat {

namespace {

const std::set<std::string>& string_methods() {
  static const std::set<std::string> names = {
      "startswith", "endswith", "split",   "rsplit",  "strip",   "lstrip",  "rstrip",       "upper",
      "lower",      "title",    "capitalize", "replace", "find",  "rfind",   "count",        "format",
      "join",       "isdigit",  "isalpha", "isalnum", "isspace", "isupper", "islower",      "splitlines",
      "removeprefix", "removesuffix", "swapcase", "index", "rindex"};
  return names;
}

std::string arg_string(CallArgs& args, size_t i, const std::string& name, const std::string& method) {
  Value v = args.get(i, name);
  if (!v.is_string()) throw JinjaFault(cat(method, "() argument '", name, "' must be str, not ", v.type_name()));
  return v.str();
}

// Optional `chars` argument of strip/lstrip/rstrip: none or absent means whitespace.
std::optional<std::string> strip_chars(CallArgs& args, const std::string& method) {
  Value v = args.get(0, "chars", Value::none());
  if (v.is_none()) return std::nullopt;
  if (!v.is_string()) throw JinjaFault(cat(method, "() argument must be str or None, not ", v.type_name()));
  return v.str();
}

int64_t cp_index(const std::string& s, size_t byte_pos) {
  if (byte_pos == std::string::npos) return -1;
  return int64_t(utf8_length(std::string_view(s).substr(0, byte_pos)));
}

Value split_value(const std::vector<std::string>& parts) {
  List out;
  for (const auto& p : parts) out.push_back(Value(p));
  return Value(std::move(out));
}

// "{} and {name}".format(...): positional, numbered and named fields; no format specs.
std::string format_method(const std::string& fmt, CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '{' && i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
    } else if (c == '}' && i + 1 < fmt.size() && fmt[i + 1] == '}') {
      out += '}';
      ++i;
    } else if (c == '{') {
      size_t close = fmt.find('}', i);
      if (close == std::string::npos) throw JinjaFault("format(): single '{' encountered in format string");
      std::string field = fmt.substr(i + 1, close - i - 1);
      if (field.find_first_of(":!") != std::string::npos) {
        throw JinjaFault(cat("format(): format specifications ('", field, "') are not supported"));
      }
      Value v;
      if (field.empty()) {
        v = auto_index < args.positional.size() ? args.positional[auto_index] : Value();
        ++auto_index;
        if (v.is_undefined() && auto_index > args.positional.size()) throw JinjaFault("format(): not enough arguments");
      } else if (std::all_of(field.begin(), field.end(), ::isdigit)) {
        size_t k = std::stoul(field);
        if (k >= args.positional.size()) throw JinjaFault(cat("format(): no argument ", k));
        v = args.positional[k];
      } else {
        bool found = false;
        for (const auto& [name, value] : args.keyword) {
          if (name == field) v = value, found = true;
        }
        if (!found) throw JinjaFault(cat("format(): no argument named '", field, "'"));
      }
      out += to_str(v);
      i = close;
    } else if (c == '}') {
      throw JinjaFault("format(): single '}' encountered in format string");
    } else {
      out += c;
    }
  }
  return out;
}

Value bound(const std::string& name, std::function<Value(CallArgs&)> fn) { return Value::callable(name, std::move(fn)); }

}  // namespace

Value call_string_method(const std::string& s, const std::string& m, CallArgs& args, Budget& budget) {
  budget.charge(int64_t(s.size() / 16));
  Value result;
  if (m == "startswith" || m == "endswith") {
    Value prefix = args.get(0, "prefix");
    List options = prefix.is_list() ? prefix.list() : List{prefix};
    bool hit = false;
    for (const auto& p : options) {
      if (!p.is_string()) throw JinjaFault(cat(m, "() argument must be str or a tuple of str, not ", p.type_name()));
      const std::string& t = p.str();
      hit = hit || (t.size() <= s.size() &&
                    (m == "startswith" ? s.compare(0, t.size(), t) == 0 : s.compare(s.size() - t.size(), t.size(), t) == 0));
    }
    result = Value(hit);
  } else if (m == "split" || m == "rsplit") {
    Value sep = args.get(0, "sep", Value::none());
    Value maxsplit = args.get(1, "maxsplit", Value(-1));
    if (!sep.is_none() && !sep.is_string()) throw JinjaFault(cat(m, "() separator must be str or None"));
    if (!maxsplit.is_int()) throw JinjaFault(cat(m, "() maxsplit must be an integer"));
    std::optional<std::string> sep_str;
    if (sep.is_string()) sep_str = sep.str();
    if (sep_str && sep_str->empty()) throw JinjaFault(cat(m, "(): empty separator"));
    result = split_value(py_split(s, sep_str, maxsplit.as_int(), m == "rsplit"));
  } else if (m == "strip" || m == "lstrip" || m == "rstrip") {
    auto chars = strip_chars(args, m);
    result = Value(py_strip(s, chars, m != "rstrip", m != "lstrip"));
  } else if (m == "upper") {
    result = Value(ascii_upper(s));
  } else if (m == "lower") {
    result = Value(ascii_lower(s));
  } else if (m == "swapcase") {
    std::string out = s;
    for (auto& c : out) c = std::isupper((unsigned char)c) ? char(std::tolower(c)) : char(std::toupper(c));
    result = Value(out);
  } else if (m == "title") {
    result = Value(py_title(s));
  } else if (m == "capitalize") {
    result = Value(py_capitalize(s));
  } else if (m == "replace") {
    std::string old_s = arg_string(args, 0, "old", m);
    std::string new_s = arg_string(args, 1, "new", m);
    Value count = args.get(2, "count", Value(-1));
    std::string out = py_replace(s, old_s, new_s, count.is_int() ? count.as_int() : -1, budget);
    result = Value(std::move(out));
  } else if (m == "find" || m == "index") {
    std::string sub = arg_string(args, 0, "sub", m);
    int64_t i = cp_index(s, s.find(sub));
    if (i < 0 && m == "index") throw JinjaFault("substring not found");
    result = Value(i);
  } else if (m == "rfind" || m == "rindex") {
    std::string sub = arg_string(args, 0, "sub", m);
    int64_t i = cp_index(s, s.rfind(sub));
    if (i < 0 && m == "rindex") throw JinjaFault("substring not found");
    result = Value(i);
  } else if (m == "count") {
    std::string sub = arg_string(args, 0, "sub", m);
    int64_t n = 0;
    if (sub.empty()) {
      n = int64_t(utf8_length(s)) + 1;
    } else {
      for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
    }
    result = Value(n);
  } else if (m == "format") {
    std::string out = format_method(s, args);
    budget.check_size(out.size());
    return Value(std::move(out));  // format takes any arguments
  } else if (m == "join") {
    Value items = args.get(0, "iterable");
    std::string out;
    bool first = true;
    for (const auto& item : iterate(items, budget)) {
      if (!item.is_string()) throw JinjaFault(cat("join(): expected str items, found ", item.type_name()));
      if (!first) out += s;
      first = false;
      out += item.str();
      budget.check_size(out.size());
    }
    result = Value(std::move(out));
  } else if (m == "isdigit" || m == "isalpha" || m == "isalnum" || m == "isspace" || m == "isupper" || m == "islower") {
    result = Value(py_is(s, m));
  } else if (m == "splitlines") {
    result = split_value(py_splitlines(s));
  } else if (m == "removeprefix" || m == "removesuffix") {
    std::string a = arg_string(args, 0, m == "removeprefix" ? "prefix" : "suffix", m);
    std::string out = s;
    if (m == "removeprefix" && s.compare(0, a.size(), a) == 0) out = s.substr(a.size());
    if (m == "removesuffix" && a.size() <= s.size() && s.compare(s.size() - a.size(), a.size(), a) == 0) {
      out = s.substr(0, s.size() - a.size());
    }
    result = Value(out);
  } else {
    throw JinjaFault(cat("'str' object has no method '", m, "'"));
  }
  args.finish(m);
  return result;
}

Value get_attr(const Value& obj, const std::string& name, Budget& budget) {
  if (obj.is_undefined()) {
    if (obj.name().empty()) throw JinjaFault(cat("undefined value has no attribute '", name, "'"));
    throw JinjaFault(cat("'", obj.name(), "' is undefined (reading its attribute '", name, "')"));
  }
  Budget* b = &budget;
  if (obj.is_map() && !obj.is_namespace()) {
    if (name == "items" || name == "keys" || name == "values") {
      return bound(name, [obj, name](CallArgs& args) {
        args.finish(name);
        List out;
        for (const auto& [k, v] : obj.map().items()) {
          if (name == "items") out.push_back(Value::tuple({Value(k), v}));
          else out.push_back(name == "keys" ? Value(k) : v);
        }
        return Value(std::move(out));
      });
    }
    if (name == "get") {
      return bound(name, [obj](CallArgs& args) {
        Value key = args.get(0, "key");
        Value fallback = args.get(1, "default", Value::none());
        args.finish("get");
        if (key.is_string()) {
          if (const Value* v = obj.map().find(key.str())) return *v;
        }
        return fallback;
      });
    }
  }
  if (obj.is_map()) {
    if (const Value* v = obj.map().find(name)) return *v;
    return Value::undefined(name);
  }
  if (obj.is_string() && string_methods().count(name)) {
    std::string s = obj.str();
    return bound(name, [s, name, b](CallArgs& args) { return call_string_method(s, name, args, *b); });
  }
  return Value::undefined(name);
}

Map make_globals(Budget& budget) {
  Budget* b = &budget;
  Map g;
  g.set("range", Value::callable("range", [b](CallArgs& args) {
          int64_t start = 0, stop = 0, step = 1;
          auto as_int = [](const Value& v) {
            if (!v.is_number() || v.is_float()) throw JinjaFault(cat("range() arguments must be integers, not ", v.type_name()));
            return v.as_int();
          };
          if (args.positional.size() == 1) {
            stop = as_int(args.positional[0]);
          } else if (args.positional.size() == 2 || args.positional.size() == 3) {
            start = as_int(args.positional[0]);
            stop = as_int(args.positional[1]);
            if (args.positional.size() == 3) step = as_int(args.positional[2]);
          } else {
            throw JinjaFault(cat("range() expects 1 to 3 arguments, got ", args.positional.size()));
          }
          if (!args.keyword.empty()) throw JinjaFault("range() takes no keyword arguments");
          if (step == 0) throw JinjaFault("range() step must not be zero");
          __int128 count = 0;
          if (step > 0 && stop > start) count = ((__int128)stop - start + step - 1) / step;
          if (step < 0 && stop < start) count = ((__int128)start - stop - step - 1) / -step;
          if (count > (__int128)b->max_items()) {
            throw JinjaFault(cat("range() of ", int64_t(count), " items exceeds the bound of ", b->max_items(),
                                 " items"));
          }
          b->charge(int64_t(count));
          List out;
          out.reserve(size_t(count));
          for (int64_t i = 0, v = start; i < int64_t(count); ++i, v += step) out.push_back(Value(v));
          return Value(std::move(out));
        }));
  g.set("namespace", Value::callable("namespace", [](CallArgs& args) {
          Map m;
          for (const auto& p : args.positional) {
            if (!p.is_map()) throw JinjaFault(cat("namespace() positional argument must be a dict, not ", p.type_name()));
            for (const auto& [k, v] : p.map().items()) m.set(k, v);
          }
          for (const auto& [k, v] : args.keyword) m.set(k, v);
          return Value::name_space(std::move(m));
        }));
  g.set("dict", Value::callable("dict", [](CallArgs& args) {
          Map m;
          for (const auto& p : args.positional) {
            if (!p.is_map()) throw JinjaFault(cat("dict() positional argument must be a dict, not ", p.type_name()));
            for (const auto& [k, v] : p.map().items()) m.set(k, v);
          }
          for (const auto& [k, v] : args.keyword) m.set(k, v);
          return Value(std::move(m));
        }));
  g.set("raise_exception", Value::callable("raise_exception", [](CallArgs& args) -> Value {
          Value message = args.get(0, "message", Value(""));
          throw JinjaFault(cat("the template raised an error: ", to_str(message)));
        }));
  g.set("strftime_now", Value::callable("strftime_now", [](CallArgs& args) {
          Value format = args.get(0, "format");
          args.finish("strftime_now");
          if (!format.is_string()) throw JinjaFault("strftime_now() format must be a string");
          std::time_t now = std::time(nullptr);
          std::tm tm{};
          localtime_r(&now, &tm);
          char buf[512];
          size_t n = std::strftime(buf, sizeof buf, format.str().c_str(), &tm);
          return Value(std::string(buf, n));
        }));
  return g;
}

}  // namespace kestrel::chat
