// Errors an HTTP handler answers with, in OpenAI's error shape:
//   {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}
#pragma once

#include <string>

namespace kestrel::server {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the request field at fault, when there is one
  std::string code;

  std::string body() const;
};

[[noreturn]] void throw_api(int status, std::string message, std::string param = {},
                            std::string type = "invalid_request_error", std::string code = {});

}  // namespace kestrel::server
