// Parsing and validating OpenAI-style request bodies into what the engine runs. Every problem is
// an ApiError(400) naming the field, never an exception escaping as a 500.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/request.h"

namespace kestrel::server {

struct ServerLimits {
  int64_t max_prompt_tokens = 32768;
  int max_tokens = 4096;          // upper bound for max_tokens
  int default_max_tokens = 256;
  int max_n = 8;
  int max_stop = 16;
  int max_logit_bias = 1024;      // entries of logit_bias
};

struct GenerationParams {
  RequestOptions options;             // max_tokens, sampling, stop ids, logprobs
  std::vector<std::string> stop;      // stop strings
  int n = 1;
  bool stream = false;
  bool include_usage = false;
  bool seeded = false;
  bool logprobs = false;
};

// Common sampling fields of /v1/chat/completions and /v1/completions.
GenerationParams parse_generation_params(const nlohmann::json& body, const ServerLimits& limits, int64_t vocab,
                                         bool chat);

// The JSON body, or ApiError naming the problem.
nlohmann::ordered_json parse_body(const std::string& text);

// Validates chat messages; returns them normalized for the template (content parts joined).
nlohmann::ordered_json validate_messages(const nlohmann::ordered_json& messages);
void validate_tools(const nlohmann::ordered_json& tools);

}  // namespace kestrel::server
