#include "io/json_fields.h"

#include <cmath>

#include "core/error.h"

namespace kestrel {

JsonFields::JsonFields(const nlohmann::json& obj, std::string where) : obj_(obj), where_(std::move(where)) {
  if (!obj_.is_object()) bad_input(where_, ": expected a JSON object");
}

bool JsonFields::has(const std::string& key) const { return obj_.contains(key) && !obj_[key].is_null(); }

const nlohmann::json& JsonFields::get(const std::string& key) const {
  if (!has(key)) bad_input(field(key), " is missing");
  return obj_[key];
}

int64_t JsonFields::get_int(const std::string& key, int64_t min, int64_t max) const {
  const auto& v = get(key);
  int64_t x;
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX))
      bad_input(field(key), " = ", v.dump(), " is out of range [", min, ", ", max, "]");
    x = v.get<int64_t>();
  } else if (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>() && std::fabs(v.get<double>()) < 9e15) {
    x = int64_t(v.get<double>());
  } else {
    bad_input(field(key), " must be an integer, got ", v.dump());
  }
  if (x < min || x > max) bad_input(field(key), " = ", x, " is out of range [", min, ", ", max, "]");
  return x;
}

int64_t JsonFields::get_int(const std::string& key, int64_t fallback, int64_t min, int64_t max) const {
  return has(key) ? get_int(key, min, max) : fallback;
}

double JsonFields::get_double(const std::string& key, double min, double max) const {
  const auto& v = get(key);
  if (!v.is_number()) bad_input(field(key), " must be a number, got ", v.dump());
  double x = v.get<double>();
  if (!std::isfinite(x) || x < min || x > max) bad_input(field(key), " = ", x, " is out of range [", min, ", ", max, "]");
  return x;
}

double JsonFields::get_double(const std::string& key, double fallback, double min, double max) const {
  return has(key) ? get_double(key, min, max) : fallback;
}

std::vector<int> JsonFields::get_token_ids(const std::string& key) const {
  std::vector<int> out;
  if (!has(key)) return out;
  const auto& v = obj_[key];
  auto one = [&](const nlohmann::json& x) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > (1 << 30))
      bad_input(field(key), " must be a token id or a list of token ids, got ", v.dump());
    out.push_back(int(x.get<int64_t>()));
  };
  if (v.is_array()) {
    for (const auto& x : v) one(x);
  } else {
    one(v);
  }
  return out;
}

bool JsonFields::get_bool(const std::string& key, bool fallback) const {
  if (!has(key)) return fallback;
  const auto& v = obj_[key];
  if (!v.is_boolean()) bad_input(field(key), " must be true or false, got ", v.dump());
  return v.get<bool>();
}

std::string JsonFields::get_string(const std::string& key, const std::string& fallback) const {
  if (!has(key)) return fallback;
  const auto& v = obj_[key];
  if (!v.is_string()) bad_input(field(key), " must be a string, got ", v.dump());
  return v.get<std::string>();
}

}  // namespace kestrel
