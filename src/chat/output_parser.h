// Parsing what a chat model generates into reasoning, content and tool calls, incrementally as
// text streams out of the detokenizer (decode with special tokens kept: the markers are special
// tokens in Qwen's and Gemma's vocabularies).
//
// Formats (see docs/chat.md for sources):
//   Qwen (the markers Qwen3's template writes; Hermes-style tool calls):
//     <think>\n REASONING \n</think>\n\n CONTENT
//     <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
//   Gemma 4:
//     <|channel>thought\n REASONING <channel|> CONTENT
//     <|tool_call>call:f{key:<|"|>text<|"|>,n:3,flag:true,list:[...],obj:{...}}<tool_call|>
//
// The streaming parser never emits part of a marker as content: text that may be the start of a
// marker ("<tool_", "<th") is held back until the next delta decides it. Whitespace touching a
// marker (the newlines around reasoning, between tool calls) is dropped.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kestrel::chat {

enum class ToolCallSyntax {
  kNone,
  kJson,    // <tool_call>{"name": ..., "arguments": {...}}</tool_call>
  kGemma4,  // <|tool_call>call:NAME{key:value,...}<tool_call|>
};

struct OutputFormat {
  std::string reasoning_open;   // empty: the model does not reason in tags
  std::string reasoning_close;
  ToolCallSyntax tool_syntax = ToolCallSyntax::kNone;
  std::string tool_open;
  std::string tool_close;
};

OutputFormat qwen_output_format();
OutputFormat gemma4_output_format();
OutputFormat plain_output_format();
// Picks the format a chat template's model speaks, from the markers the template writes.
OutputFormat detect_output_format(const std::string& template_source);
// Whether a rendered prompt leaves the model inside an open reasoning block (e.g. it ends with
// "<think>\n"), so the output starts with reasoning.
bool prompt_opens_reasoning(const OutputFormat& format, const std::string& prompt);

struct ToolCall {
  std::string name;
  std::string arguments;  // a JSON object, as OpenAI's tool_calls[].function.arguments
};

struct ParsedDelta {
  std::string content;
  std::string reasoning;
  std::vector<ToolCall> tool_calls;  // complete calls only
  bool empty() const { return content.empty() && reasoning.empty() && tool_calls.empty(); }
};

struct OutputParserOptions {
  OutputFormat format;
  bool starts_in_reasoning = false;  // see prompt_opens_reasoning()
};

class OutputParser {
 public:
  explicit OutputParser(OutputParserOptions options);
  // Feeds the next piece of generated text; returns what can be said for sure so far.
  ParsedDelta feed(std::string_view text);
  // End of generation: flushes held-back text. An unterminated tool call that still parses is a
  // call; otherwise its text becomes content.
  ParsedDelta finish();

  // Parses a whole output at once.
  static ParsedDelta parse(const OutputParserOptions& options, std::string_view text);

 private:
  enum class State { kContent, kReasoning, kToolCall };
  void process(ParsedDelta& out, bool final);
  void emit(std::string& dst, std::string_view text);
  void end_tool_call(ParsedDelta& out, const std::string& body, bool closed);

  OutputParserOptions opt_;
  State state_;
  std::string buf_;         // text not yet classified
  std::string pending_ws_;  // trailing whitespace held back (dropped if a marker follows)
  std::string ws_before_tool_;  // restored if the tool call turns out malformed
  bool skip_ws_ = false;    // drop leading whitespace of the next text (after a marker)
  bool saw_tool_call_ = false;
};

// Parses one tool call body (the text between the markers). Returns false when it is malformed.
bool parse_tool_call(ToolCallSyntax syntax, std::string_view body, ToolCall& call);

}  // namespace kestrel::chat
