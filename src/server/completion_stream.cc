#include "server/completion_stream.h"

#include <algorithm>

namespace kestrel::server {

namespace {

nlohmann::json token_json(const tok::Tokenizer& tok, int32_t id, float logprob) {
  const int32_t one[1] = {id};
  // A model's vocabulary may be padded past the tokenizer's (Qwen: 151936 vs 151669): such ids
  // have no text.
  std::string text = id < tok.vocab_size() ? tok.decode(one) : std::string();
  nlohmann::json bytes = nlohmann::json::array();
  for (unsigned char c : text) bytes.push_back(int(c));
  return {{"token", text}, {"logprob", logprob}, {"bytes", bytes}};
}

// Length of the longest suffix of `text` that is a proper prefix of some stop string.
size_t held_suffix(const std::string& text, const std::vector<std::string>& stops) {
  size_t best = 0;
  for (const auto& s : stops) {
    for (size_t n = std::min(text.size(), s.size() - 1); n > best; --n) {
      if (text.compare(text.size() - n, n, s, 0, n) == 0) {
        best = n;
        break;
      }
    }
  }
  return best;
}

}  // namespace

nlohmann::json logprob_entry(const tok::Tokenizer& tok, const TokenOut& t) {
  nlohmann::json e = token_json(tok, t.token, t.logprob);
  nlohmann::json top = nlohmann::json::array();
  for (const auto& [id, lp] : t.top) top.push_back(token_json(tok, id, lp));
  e["top_logprobs"] = top;
  return e;
}

ChoiceStream::ChoiceStream(const ServedModel& model, std::shared_ptr<Request> request, const GenerationParams& params,
                           bool chat, bool starts_in_reasoning)
    : model_(model), request_(std::move(request)), params_(params), chat_(chat), decoder_(*model.tokenizer) {
  for (const auto& s : params_.stop) max_stop_ = std::max(max_stop_, s.size());
  if (chat_) parser_.emplace(chat::OutputParserOptions{.format = model.output_format, .starts_in_reasoning = starts_in_reasoning});
}

std::string ChoiceStream::finish_reason() const {
  if (stopped_by_string_) return "stop";
  switch (reason_) {
    case FinishReason::kStop: return saw_tool_calls_ ? "tool_calls" : "stop";
    case FinishReason::kLength: return saw_tool_calls_ ? "tool_calls" : "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
    case FinishReason::kNone: return "";
  }
  return "";
}

void ChoiceStream::emit(const std::string& text, ChoiceDelta& out, bool final) {
  if (!parser_) {
    out.content += text;
    return;
  }
  chat::ParsedDelta d = parser_->feed(text);
  if (final) {
    chat::ParsedDelta f = parser_->finish();
    d.content += f.content;
    d.reasoning += f.reasoning;
    for (auto& c : f.tool_calls) d.tool_calls.push_back(std::move(c));
  }
  out.content += d.content;
  out.reasoning += d.reasoning;
  if (!d.tool_calls.empty()) saw_tool_calls_ = true;
  for (auto& c : d.tool_calls) out.tool_calls.push_back(std::move(c));
}

void ChoiceStream::take_text(std::string text, ChoiceDelta& out, bool final) {
  text_ += text;
  if (!params_.stop.empty()) {
    size_t cut = std::string::npos;
    for (const auto& s : params_.stop) cut = std::min(cut, text_.find(s));
    if (cut != std::string::npos) {
      text_.resize(cut);
      stopped_by_string_ = true;
      request_->cancel();  // the scheduler drops it within one step
      emit(text_, out, true);
      text_.clear();
      finished_ = true;
      return;
    }
  }
  size_t hold = final ? 0 : held_suffix(text_, params_.stop);
  std::string ready = text_.substr(0, text_.size() - hold);
  text_.erase(0, text_.size() - hold);
  emit(ready, out, final);
}

bool ChoiceStream::poll(std::chrono::milliseconds timeout, ChoiceDelta& out) {
  if (finished_) return true;
  std::vector<TokenOut> tokens;
  FinishReason why = request_->wait(tokens, timeout);
  const auto& stop_ids = request_->options().stop_token_ids;
  std::string text;
  for (const auto& t : tokens) {
    ++completion_tokens_;
    if (params_.logprobs) out.logprobs.push_back(logprob_entry(*model_.tokenizer, t));
    const bool is_stop = std::find(stop_ids.begin(), stop_ids.end(), t.token) != stop_ids.end();
    // A stop token ends the text and is not part of it; ids past the tokenizer's vocabulary (a
    // padded model vocabulary) have no text, as in Hugging Face's decode.
    if (!is_stop && t.token < model_.tokenizer->vocab_size()) text += decoder_.push(t.token);
  }
  if (why != FinishReason::kNone) {
    reason_ = why;
    text += decoder_.finish();
    take_text(std::move(text), out, true);
    finished_ = true;
    return true;
  }
  take_text(std::move(text), out, false);
  return finished_;
}

}  // namespace kestrel::server
