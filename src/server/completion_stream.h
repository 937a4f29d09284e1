// ChoiceStream: turns one request's token events into text deltas for an OpenAI choice —
// incremental detokenization (complete UTF-8 only), stop strings (text that may begin a stop
// string is held back), reasoning / tool-call parsing for chat, and logprobs.
#pragma once

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "chat/output_parser.h"
#include "engine/request.h"
#include "server/openai_request.h"
#include "server/served_model.h"

namespace kestrel::server {

struct ChoiceDelta {
  std::string content;
  std::string reasoning;
  std::vector<chat::ToolCall> tool_calls;
  nlohmann::json logprobs = nlohmann::json::array();  // chat-format entries for the new tokens
  bool empty() const { return content.empty() && reasoning.empty() && tool_calls.empty() && logprobs.empty(); }
};

class ChoiceStream {
 public:
  ChoiceStream(const ServedModel& model, std::shared_ptr<Request> request, const GenerationParams& params, bool chat,
               bool starts_in_reasoning);

  // Waits up to `timeout` for tokens; appends what they say to `out`. Returns true once finished.
  bool poll(std::chrono::milliseconds timeout, ChoiceDelta& out);
  bool finished() const { return finished_; }
  // "stop", "length", "tool_calls", or "error"/"cancelled"
  std::string finish_reason() const;
  std::string error() const { return request_->error(); }
  int completion_tokens() const { return completion_tokens_; }
  const std::shared_ptr<Request>& request() const { return request_; }
  bool saw_tool_calls() const { return saw_tool_calls_; }

 private:
  void take_text(std::string text, ChoiceDelta& out, bool final);
  void emit(const std::string& text, ChoiceDelta& out, bool final);

  const ServedModel& model_;
  std::shared_ptr<Request> request_;
  GenerationParams params_;
  bool chat_;
  tok::StreamDecoder decoder_;
  std::optional<chat::OutputParser> parser_;
  std::string text_;     // decoded text not yet emitted (may start a stop string)
  size_t max_stop_ = 0;
  bool finished_ = false, stopped_by_string_ = false, saw_tool_calls_ = false;
  FinishReason reason_ = FinishReason::kNone;
  int completion_tokens_ = 0;
};

// Chat-format logprob entry for one token.
nlohmann::json logprob_entry(const tok::Tokenizer& tok, const TokenOut& t);

}  // namespace kestrel::server
