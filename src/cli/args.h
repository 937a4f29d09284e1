// Command-line flags: each command declares its options; anything else is refused by name.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kestrel::cli {

struct OptionSpec {
  std::string name;         // long name without dashes: "model"
  std::string short_name;   // "m" or empty
  std::string value_name;   // "DIR"; empty for a boolean flag
  std::string help;
  std::string default_value;  // shown in --help; not applied automatically
};

class Args {
 public:
  // Parses argv[first..argc). Throws Error(kBadInput) naming an unknown flag or a missing value.
  Args(const std::vector<OptionSpec>& specs, int argc, char** argv, int first);

  bool has(const std::string& name) const { return values_.count(name) != 0; }
  std::string get(const std::string& name, const std::string& fallback = "") const;
  // Every value of a flag given several times (`--var a=1 --var b=2`), in order; get() keeps the last.
  std::vector<std::string> get_all(const std::string& name) const;
  std::string require(const std::string& name) const;  // error naming --name when absent
  int64_t get_int(const std::string& name, int64_t fallback, int64_t min, int64_t max) const;
  double get_double(const std::string& name, double fallback, double min, double max) const;
  bool flag(const std::string& name) const { return has(name); }
  const std::vector<std::string>& positional() const { return positional_; }
  bool help() const { return help_; }

 private:
  std::map<std::string, std::string> values_;
  std::map<std::string, std::vector<std::string>> all_values_;
  std::vector<std::string> positional_;
  bool help_ = false;
};

std::string format_options(const std::vector<OptionSpec>& specs);

// Parses "1,2,3" into integers; error names `what`.
std::vector<int64_t> parse_int_list(const std::string& text, const std::string& what);

}  // namespace kestrel::cli
