#include "chat/output_parser.h"

#include <algorithm>

namespace kestrel::chat {

namespace {

bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

// Length of the longest suffix of `text` that is a proper prefix of `marker`.
size_t partial_marker_suffix(std::string_view text, std::string_view marker) {
  if (marker.empty()) return 0;
  for (size_t k = std::min(marker.size() - 1, text.size()); k > 0; --k) {
    if (text.substr(text.size() - k) == marker.substr(0, k)) return k;
  }
  return 0;
}

}  // namespace

OutputFormat qwen_output_format() {
  return {.reasoning_open = "<think>",
          .reasoning_close = "</think>",
          .tool_syntax = ToolCallSyntax::kJson,
          .tool_open = "<tool_call>",
          .tool_close = "</tool_call>"};
}

OutputFormat gemma4_output_format() {
  return {.reasoning_open = "<|channel>thought",
          .reasoning_close = "<channel|>",
          .tool_syntax = ToolCallSyntax::kGemma4,
          .tool_open = "<|tool_call>",
          .tool_close = "<tool_call|>"};
}

OutputFormat plain_output_format() { return {}; }

OutputFormat detect_output_format(const std::string& source) {
  if (source.find("<|tool_call>") != std::string::npos || source.find("<|channel>") != std::string::npos ||
      source.find("<|turn>") != std::string::npos) {
    return gemma4_output_format();
  }
  OutputFormat f;
  if (source.find("<think>") != std::string::npos) {
    f.reasoning_open = "<think>";
    f.reasoning_close = "</think>";
  }
  if (source.find("<tool_call>") != std::string::npos) {
    f.tool_syntax = ToolCallSyntax::kJson;
    f.tool_open = "<tool_call>";
    f.tool_close = "</tool_call>";
  }
  return f;
}

bool prompt_opens_reasoning(const OutputFormat& format, const std::string& prompt) {
  if (format.reasoning_open.empty()) return false;
  size_t open = prompt.rfind(format.reasoning_open);
  if (open == std::string::npos) return false;
  size_t close = prompt.rfind(format.reasoning_close);
  return close == std::string::npos || close < open;
}

OutputParser::OutputParser(OutputParserOptions options)
    : opt_(std::move(options)), state_(opt_.starts_in_reasoning ? State::kReasoning : State::kContent) {
  skip_ws_ = opt_.starts_in_reasoning;
}

ParsedDelta OutputParser::feed(std::string_view text) {
  ParsedDelta out;
  buf_.append(text);
  process(out, false);
  return out;
}

ParsedDelta OutputParser::finish() {
  ParsedDelta out;
  process(out, true);
  if (state_ == State::kContent && !saw_tool_call_) out.content += pending_ws_;
  pending_ws_.clear();
  return out;
}

ParsedDelta OutputParser::parse(const OutputParserOptions& options, std::string_view text) {
  OutputParser parser(options);
  ParsedDelta all = parser.feed(text);
  ParsedDelta rest = parser.finish();
  all.content += rest.content;
  all.reasoning += rest.reasoning;
  all.tool_calls.insert(all.tool_calls.end(), rest.tool_calls.begin(), rest.tool_calls.end());
  return all;
}

// Appends `text` to `dst`, dropping leading whitespace after a marker and holding trailing
// whitespace back until more text follows.
void OutputParser::emit(std::string& dst, std::string_view text) {
  if (text.empty()) return;
  if (skip_ws_) {
    size_t i = 0;
    while (i < text.size() && is_ws(text[i])) ++i;
    if (i == text.size()) return;
    text.remove_prefix(i);
    skip_ws_ = false;
  }
  size_t end = text.size();
  while (end > 0 && is_ws(text[end - 1])) --end;
  if (end == 0) {
    pending_ws_.append(text);
    return;
  }
  dst += pending_ws_;
  pending_ws_.clear();
  dst.append(text.substr(0, end));
  pending_ws_.assign(text.substr(end));
}

void OutputParser::end_tool_call(ParsedDelta& out, const std::string& body, bool closed) {
  ToolCall call;
  if (parse_tool_call(opt_.format.tool_syntax, body, call)) {
    out.tool_calls.push_back(std::move(call));
    saw_tool_call_ = true;
    skip_ws_ = true;
    return;
  }
  // Not a well-formed call: keep the model's text as content rather than lose it.
  std::string raw = ws_before_tool_ + opt_.format.tool_open + body + (closed ? opt_.format.tool_close : "");
  out.content += raw;
}

void OutputParser::process(ParsedDelta& out, bool final) {
  const OutputFormat& f = opt_.format;
  while (true) {
    if (state_ == State::kToolCall) {
      size_t close = buf_.find(f.tool_close);
      if (close != std::string::npos) {
        std::string body = buf_.substr(0, close);
        buf_.erase(0, close + f.tool_close.size());
        state_ = State::kContent;
        end_tool_call(out, body, true);
        continue;
      }
      if (final) {
        std::string body = std::move(buf_);
        buf_.clear();
        state_ = State::kContent;
        end_tool_call(out, body, false);
      }
      return;
    }
    if (state_ == State::kReasoning) {
      size_t close = f.reasoning_close.empty() ? std::string::npos : buf_.find(f.reasoning_close);
      if (close != std::string::npos) {
        emit(out.reasoning, std::string_view(buf_).substr(0, close));
        buf_.erase(0, close + f.reasoning_close.size());
        pending_ws_.clear();
        state_ = State::kContent;
        skip_ws_ = true;
        continue;
      }
      size_t keep = final ? 0 : partial_marker_suffix(buf_, f.reasoning_close);
      emit(out.reasoning, std::string_view(buf_).substr(0, buf_.size() - keep));
      buf_.erase(0, buf_.size() - keep);
      if (final) pending_ws_.clear();
      return;
    }
    // Content: look for the first reasoning or tool-call opening.
    size_t think = f.reasoning_open.empty() ? std::string::npos : buf_.find(f.reasoning_open);
    size_t tool = f.tool_open.empty() ? std::string::npos : buf_.find(f.tool_open);
    size_t first = std::min(think, tool);
    if (first != std::string::npos) {
      emit(out.content, std::string_view(buf_).substr(0, first));
      ws_before_tool_ = std::move(pending_ws_);
      pending_ws_.clear();
      if (first == think) {
        buf_.erase(0, first + f.reasoning_open.size());
        state_ = State::kReasoning;
        skip_ws_ = true;
      } else {
        buf_.erase(0, first + f.tool_open.size());
        state_ = State::kToolCall;
      }
      continue;
    }
    size_t keep = final ? 0
                        : std::max(partial_marker_suffix(buf_, f.reasoning_open), partial_marker_suffix(buf_, f.tool_open));
    emit(out.content, std::string_view(buf_).substr(0, buf_.size() - keep));
    buf_.erase(0, buf_.size() - keep);
    return;
  }
}

}  // namespace kestrel::chat
