#include "cli/args.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "core/error.h"

namespace kestrel::cli {

Args::Args(const std::vector<OptionSpec>& specs, int argc, char** argv, int first) {
  auto find = [&](const std::string& name, bool is_short) -> const OptionSpec* {
    for (const auto& spec : specs) {
      if ((is_short ? spec.short_name : spec.name) == name) return &spec;
    }
    return nullptr;
  };
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      help_ = true;
      continue;
    }
    if (arg == "--") {
      for (++i; i < argc; ++i) positional_.push_back(argv[i]);
      break;
    }
    if (arg.size() > 1 && arg[0] == '-' && arg != "-") {
      bool is_long = arg.rfind("--", 0) == 0;
      std::string name = arg.substr(is_long ? 2 : 1);
      std::optional<std::string> inline_value;
      if (auto eq = name.find('='); is_long && eq != std::string::npos) {
        inline_value = name.substr(eq + 1);
        name = name.substr(0, eq);
      }
      const OptionSpec* spec = find(name, !is_long);
      if (!spec) {
        // Negative numbers are positional values, not flags.
        char* end = nullptr;
        std::strtod(arg.c_str(), &end);
        if (end && *end == '\0') {
          positional_.push_back(arg);
          continue;
        }
        bad_input("unknown option ", arg, " (see --help)");
      }
      if (spec->value_name.empty()) {
        if (inline_value) bad_input("option --", spec->name, " takes no value");
        values_[spec->name] = "1";
      } else if (inline_value) {
        values_[spec->name] = *inline_value;
      } else {
        if (i + 1 >= argc) bad_input("option --", spec->name, " needs a value (", spec->value_name, ")");
        values_[spec->name] = argv[++i];
      }
      all_values_[spec->name].push_back(values_[spec->name]);
      continue;
    }
    positional_.push_back(arg);
  }
}

std::string Args::get(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

std::vector<std::string> Args::get_all(const std::string& name) const {
  auto it = all_values_.find(name);
  return it == all_values_.end() ? std::vector<std::string>{} : it->second;
}

std::string Args::require(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) bad_input("missing required option --", name);
  return it->second;
}

int64_t Args::get_int(const std::string& name, int64_t fallback, int64_t min, int64_t max) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  const std::string& text = it->second;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE)
    bad_input("option --", name, " expects an integer, got '", text, "'");
  if (v < min || v > max) bad_input("option --", name, " must be in [", min, ", ", max, "], got ", v);
  return v;
}

double Args::get_double(const std::string& name, double fallback, double min, double max) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  const std::string& text = it->second;
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(v))
    bad_input("option --", name, " expects a number, got '", text, "'");
  if (v < min || v > max) bad_input("option --", name, " must be in [", min, ", ", max, "], got ", v);
  return v;
}

std::string format_options(const std::vector<OptionSpec>& specs) {
  std::ostringstream out;
  for (const auto& spec : specs) {
    std::string left = spec.short_name.empty() ? "      " : "  -" + spec.short_name + ", ";
    left += "--" + spec.name;
    if (!spec.value_name.empty()) left += " " + spec.value_name;
    out << left;
    if (left.size() < 30) out << std::string(30 - left.size(), ' ');
    else out << "\n" << std::string(30, ' ');
    out << spec.help;
    if (!spec.default_value.empty()) out << " (default " << spec.default_value << ")";
    out << "\n";
  }
  out << "  -h, --help                  show this help\n";
  return out.str();
}

std::vector<int64_t> parse_int_list(const std::string& text, const std::string& what) {
  std::vector<int64_t> out;
  std::string item;
  std::istringstream in(text);
  while (std::getline(in, item, ',')) {
    size_t a = item.find_first_not_of(" \t"), b = item.find_last_not_of(" \t");
    if (a == std::string::npos) bad_input(what, ": empty item in '", text, "'");
    item = item.substr(a, b - a + 1);
    errno = 0;
    char* end = nullptr;
    long long v = std::strtoll(item.c_str(), &end, 10);
    if (*end != '\0' || errno == ERANGE) bad_input(what, ": '", item, "' is not an integer");
    out.push_back(v);
  }
  if (out.empty()) bad_input(what, ": expected a comma-separated list of integers");
  return out;
}

}  // namespace kestrel::cli
