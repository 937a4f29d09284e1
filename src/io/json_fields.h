// Typed, bounded reads of config.json fields. Every failure names the file and the field.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace kestrel {

class JsonFields {
 public:
  // `where` prefixes messages: "model/config.json" or "model/config.json: text_config".
  JsonFields(const nlohmann::json& obj, std::string where);

  bool has(const std::string& key) const;  // present and not null
  int64_t get_int(const std::string& key, int64_t min, int64_t max) const;
  int64_t get_int(const std::string& key, int64_t fallback, int64_t min, int64_t max) const;
  double get_double(const std::string& key, double min, double max) const;
  double get_double(const std::string& key, double fallback, double min, double max) const;
  bool get_bool(const std::string& key, bool fallback) const;
  std::string get_string(const std::string& key, const std::string& fallback) const;
  const nlohmann::json& get(const std::string& key) const;  // error when absent
  // A token id or a list of them (eos_token_id, bos_token_id); empty when absent or null.
  std::vector<int> get_token_ids(const std::string& key) const;
  std::string where() const { return where_; }
  std::string field(const std::string& key) const { return where_ + ": field '" + key + "'"; }

 private:
  const nlohmann::json& obj_;
  std::string where_;
};

}  // namespace kestrel
