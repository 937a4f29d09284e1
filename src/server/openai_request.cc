#include "server/openai_request.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <random>

#include "server/api_error.h"

namespace kestrel::server {

using json = nlohmann::json;


nlohmann::ordered_json parse_body(const std::string& text) {
  nlohmann::ordered_json body;
  try {
    body = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw_api(400, std::string("request body is not valid JSON: ") + e.what());
  }
  if (!body.is_object()) throw_api(400, "request body must be a JSON object");
  return body;
}

namespace {

double number(const json& body, const char* key, double fallback, double lo, double hi, bool lo_open = false) {
  if (!body.contains(key) || body[key].is_null()) return fallback;
  const json& v = body[key];
  if (!v.is_number()) throw_api(400, std::string("'") + key + "' must be a number", key);
  double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi || (lo_open && x == lo))
    throw_api(400, std::string("'") + key + "' must be in " + (lo_open ? "(" : "[") + std::to_string(lo) + ", " +
                       std::to_string(hi) + "], got " + v.dump(),
              key);
  return x;
}

int64_t integer(const json& body, const char* key, int64_t fallback, int64_t lo, int64_t hi) {
  if (!body.contains(key) || body[key].is_null()) return fallback;
  const json& v = body[key];
  if (!v.is_number_integer()) throw_api(400, std::string("'") + key + "' must be an integer, got " + v.dump(), key);
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX))
    throw_api(400, std::string("'") + key + "' is out of range", key);
  int64_t x = v.get<int64_t>();
  if (x < lo || x > hi)
    throw_api(400, std::string("'") + key + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                       "], got " + std::to_string(x),
              key);
  return x;
}

bool boolean(const json& body, const char* key, bool fallback) {
  if (!body.contains(key) || body[key].is_null()) return fallback;
  if (!body[key].is_boolean()) throw_api(400, std::string("'") + key + "' must be true or false", key);
  return body[key].get<bool>();
}

}  // namespace

GenerationParams parse_generation_params(const json& body, const ServerLimits& limits, int64_t vocab, bool chat) {
  GenerationParams g;
  auto& o = g.options;
  auto& s = o.sampling;
  const char* max_key = chat && body.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  o.max_tokens = int(integer(body, max_key, limits.default_max_tokens, 1, limits.max_tokens));
  s.temperature = float(number(body, "temperature", 1.0, 0.0, 2.0));
  s.top_p = float(number(body, "top_p", 1.0, 0.0, 1.0, /*lo_open=*/true));
  const int64_t top_k = integer(body, "top_k", 0, -1, vocab);
  s.top_k = top_k < 0 ? 0 : int(top_k);
  s.min_p = float(number(body, "min_p", 0.0, 0.0, 1.0));
  s.presence_penalty = float(number(body, "presence_penalty", 0.0, -2.0, 2.0));
  s.frequency_penalty = float(number(body, "frequency_penalty", 0.0, -2.0, 2.0));
  s.repetition_penalty = float(number(body, "repetition_penalty", 1.0, 0.0, 10.0, true));
  if (body.contains("logit_bias") && !body["logit_bias"].is_null()) {
    // OpenAI's: {"token id": bias in [-100, 100]}, added to the logits before sampling.
    const json& lb = body["logit_bias"];
    if (!lb.is_object()) throw_api(400, "'logit_bias' must be an object of {\"token id\": bias}", "logit_bias");
    if (int64_t(lb.size()) > limits.max_logit_bias)
      throw_api(400, "'logit_bias' holds more than " + std::to_string(limits.max_logit_bias) + " tokens", "logit_bias");
    for (const auto& [key, value] : lb.items()) {
      char* end = nullptr;
      errno = 0;
      const long long id = std::strtoll(key.c_str(), &end, 10);
      if (key.empty() || *end != '\0' || errno != 0 || id < 0 || id >= vocab)
        throw_api(400, "'logit_bias' key '" + key + "' is not a token id below " + std::to_string(vocab), "logit_bias");
      if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() < -100.0 ||
          value.get<double>() > 100.0)
        throw_api(400, "'logit_bias' for token " + key + " must be a number in [-100, 100], got " + value.dump(),
                  "logit_bias");
      s.logit_bias.emplace_back(int32_t(id), float(value.get<double>()));
    }
  }
  // OpenAI parameters kestrel cannot honour are refused by name rather than ignored.
  auto present = [&](const char* key) { return body.contains(key) && !body[key].is_null(); };
  if (chat) {
    if (present("modalities")) {
      const json& m = body["modalities"];
      if (!m.is_array() || std::any_of(m.begin(), m.end(), [](const json& x) { return x != "text"; }))
        throw_api(400, "'modalities' other than [\"text\"] is not supported", "modalities");
    }
    if (present("audio")) throw_api(400, "'audio' output is not supported", "audio");
    if (present("prediction")) throw_api(400, "'prediction' (predicted outputs) is not supported", "prediction");
    if (present("functions") || present("function_call"))
      throw_api(400, "'functions' / 'function_call' are not supported: use 'tools'",
                present("functions") ? "functions" : "function_call");
    if (present("reasoning_effort"))
      throw_api(400, "'reasoning_effort' is not supported: switch reasoning with chat_template_kwargs "
                     "{\"enable_thinking\": false} where the model's template takes it",
                "reasoning_effort");
    if (present("parallel_tool_calls") && body["parallel_tool_calls"] != true)
      throw_api(400, "'parallel_tool_calls': false is not supported (the model may call several tools)",
                "parallel_tool_calls");
  } else {
    if (present("echo") && body["echo"] != false) throw_api(400, "'echo' is not supported", "echo");
    if (present("suffix")) throw_api(400, "'suffix' (insertion) is not supported", "suffix");
    if (present("best_of") && body["best_of"] != 1)
      throw_api(400, "'best_of' other than 1 is not supported", "best_of");
  }
  if (body.contains("response_format") && !body["response_format"].is_null()) {
    const json& rf = body["response_format"];
    const bool text = rf.is_object() && rf.contains("type") && rf["type"] == "text";
    if (!text)
      throw_api(400, "'response_format' other than {\"type\": \"text\"} is not supported: kestrel has no "
                     "constrained (JSON / JSON schema) decoding",
                "response_format");
  }
  if (body.contains("seed") && !body["seed"].is_null()) {
    g.seeded = true;
    s.seed = uint64_t(integer(body, "seed", 0, INT64_MIN, INT64_MAX));
  } else {
    static std::mt19937_64 rng{std::random_device{}()};
    static std::mutex mu;
    std::lock_guard<std::mutex> lock(mu);
    s.seed = rng();
  }
  g.n = int(integer(body, "n", 1, 1, limits.max_n));
  g.stream = boolean(body, "stream", false);
  if (body.contains("stream_options") && !body["stream_options"].is_null()) {
    const json& so = body["stream_options"];
    if (!so.is_object()) throw_api(400, "'stream_options' must be an object", "stream_options");
    if (!g.stream) throw_api(400, "'stream_options' is only allowed when 'stream' is true", "stream_options");
    g.include_usage = boolean(so, "include_usage", false);
  }
  if (chat) {
    g.logprobs = boolean(body, "logprobs", false);
    const int64_t top = integer(body, "top_logprobs", -1, 0, 20);
    if (top >= 0 && !g.logprobs) throw_api(400, "'top_logprobs' needs 'logprobs': true", "top_logprobs");
    o.top_logprobs = g.logprobs ? int(std::max<int64_t>(top, 0)) : -1;
  } else if (body.contains("logprobs") && !body["logprobs"].is_null()) {
    const int64_t lp = integer(body, "logprobs", 0, 0, 20);
    g.logprobs = true;
    o.top_logprobs = int(lp);
  }
  if (body.contains("stop") && !body["stop"].is_null()) {
    const json& st = body["stop"];
    if (st.is_string()) {
      g.stop.push_back(st.get<std::string>());
    } else if (st.is_array()) {
      if (int(st.size()) > limits.max_stop)
        throw_api(400, "'stop' holds more than " + std::to_string(limits.max_stop) + " strings", "stop");
      for (const auto& x : st) {
        if (!x.is_string()) throw_api(400, "'stop' must be a string or an array of strings", "stop");
        g.stop.push_back(x.get<std::string>());
      }
    } else {
      throw_api(400, "'stop' must be a string or an array of strings", "stop");
    }
    for (const auto& x : g.stop) {
      if (x.empty()) throw_api(400, "'stop' strings must not be empty", "stop");
    }
  }
  if (body.contains("stop_token_ids") && !body["stop_token_ids"].is_null()) {
    const json& ids = body["stop_token_ids"];
    if (!ids.is_array()) throw_api(400, "'stop_token_ids' must be an array of token ids", "stop_token_ids");
    for (const auto& x : ids) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= vocab)
        throw_api(400, "'stop_token_ids' holds " + x.dump() + ", not a token id below " + std::to_string(vocab),
                  "stop_token_ids");
      o.stop_token_ids.push_back(int32_t(x.get<int64_t>()));
    }
  }
  o.ignore_eos = boolean(body, "ignore_eos", false);
  return g;
}

nlohmann::ordered_json validate_messages(const nlohmann::ordered_json& messages) {
  if (!messages.is_array()) throw_api(400, "'messages' must be an array", "messages");
  if (messages.empty()) throw_api(400, "'messages' must not be empty", "messages");
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) throw_api(400, "'" + where + "' must be an object", where);
    if (!m.contains("role") || !m["role"].is_string()) throw_api(400, "'" + where + ".role' must be a string", where + ".role");
    const std::string role = m["role"].get<std::string>();
    if (role != "system" && role != "user" && role != "assistant" && role != "tool" && role != "developer")
      throw_api(400, "'" + where + ".role' is '" + role + "'; expected system, developer, user, assistant or tool",
                where + ".role");
    nlohmann::ordered_json nm = m;
    if (role == "developer") nm["role"] = "system";
    const bool has_calls = m.contains("tool_calls") && !m["tool_calls"].is_null();
    if (!m.contains("content") || m["content"].is_null()) {
      if (!(role == "assistant" && has_calls))
        throw_api(400, "'" + where + ".content' is missing", where + ".content");
      nm["content"] = "";
    } else if (m["content"].is_array()) {  // content parts: text only
      std::string text;
      for (const auto& part : m["content"]) {
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
          throw_api(400, "'" + where + ".content' parts must be {\"type\": \"text\", \"text\": ...}; other part types are not supported",
                    where + ".content");
        text += part["text"].get<std::string>();
      }
      nm["content"] = text;
    } else if (!m["content"].is_string()) {
      throw_api(400, "'" + where + ".content' must be a string or an array of text parts", where + ".content");
    }
    if (has_calls) {
      if (!m["tool_calls"].is_array()) throw_api(400, "'" + where + ".tool_calls' must be an array", where + ".tool_calls");
      nlohmann::ordered_json calls = nlohmann::ordered_json::array();
      for (const auto& c : m["tool_calls"]) {
        if (!c.is_object() || !c.contains("function") || !c["function"].is_object() ||
            !c["function"].contains("name") || !c["function"]["name"].is_string())
          throw_api(400, "'" + where + ".tool_calls' entries need function.name", where + ".tool_calls");
        nlohmann::ordered_json nc = c;
        // Templates expect arguments as an object; OpenAI clients send a JSON string.
        if (c["function"].contains("arguments") && c["function"]["arguments"].is_string()) {
          try {
            nc["function"]["arguments"] = nlohmann::ordered_json::parse(c["function"]["arguments"].get<std::string>());
          } catch (const nlohmann::json::exception&) {
            throw_api(400, "'" + where + ".tool_calls[].function.arguments' is not valid JSON", where + ".tool_calls");
          }
        }
        calls.push_back(nc);
      }
      nm["tool_calls"] = calls;
    }
    out.push_back(nm);
  }
  return out;
}

void validate_tools(const nlohmann::ordered_json& tools) {
  if (tools.is_null()) return;
  if (!tools.is_array()) throw_api(400, "'tools' must be an array", "tools");
  for (size_t i = 0; i < tools.size(); ++i) {
    const auto& t = tools[i];
    if (!t.is_object() || t.value("type", "") != "function" || !t.contains("function") || !t["function"].is_object() ||
        !t["function"].contains("name") || !t["function"]["name"].is_string())
      throw_api(400, "'tools[" + std::to_string(i) + "]' must be {\"type\": \"function\", \"function\": {\"name\": ...}}",
                "tools");
  }
}

}  // namespace kestrel::server
