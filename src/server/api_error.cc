#include "server/api_error.h"

#include <nlohmann/json.hpp>

namespace kestrel::server {

std::string ApiError::body() const {
  nlohmann::json e = {{"message", message}, {"type", type}};
  e["param"] = param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param);
  e["code"] = code.empty() ? nlohmann::json(nullptr) : nlohmann::json(code);
  return nlohmann::json({{"error", e}}).dump();
}

void throw_api(int status, std::string message, std::string param, std::string type, std::string code) {
  throw ApiError{status, std::move(message), std::move(type), std::move(param), std::move(code)};
}

}  // namespace kestrel::server
