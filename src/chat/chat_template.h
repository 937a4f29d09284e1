// Chat templates as Hugging Face ships them, rendered as transformers' apply_chat_template does.
//
// Where the template comes from (ChatTemplate::load):
//   - a model directory: `chat_template.jinja` if present, else tokenizer_config.json's
//     `chat_template`; named templates from `additional_chat_templates/NAME.jinja` join in;
//   - a tokenizer_config.json path: its `chat_template` (a string, or a list of {name, template});
//   - a .jinja file: the template itself (no special tokens known);
//   - a GGUF file: tokenizer.chat_template, with bos/eos/pad tokens from tokenizer.ggml.*.
// Which template renders (as transformers picks it): the one named by ChatRequest::template_name,
// else "tool_use" when tools are given and it exists, else "default" (or the only one).
//
// What the template sees: the tokenizer's special tokens (bos_token, eos_token, unk_token,
// pad_token, …, additional_special_tokens), then ChatRequest::variables (e.g. enable_thinking),
// then messages, tools (none when not given), documents (none) and add_generation_prompt.
#pragma once

#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "chat/output_parser.h"
#include "chat/template.h"

namespace kestrel {
class GgufFile;
}

namespace kestrel::chat {

struct ChatRequest {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // [{role, content, ...}]
  nlohmann::ordered_json tools = nullptr;                             // null or [{type, function}]
  bool add_generation_prompt = false;
  // Leave the last message open so the model continues it (prefilling the assistant's answer):
  // the prompt is cut right after that message's text, as transformers does.
  bool continue_final_message = false;
  nlohmann::ordered_json variables = nlohmann::ordered_json::object();  // extra template variables
  std::string template_name;  // empty: pick as transformers does
  RenderBounds bounds;
};

class ChatTemplate {
 public:
  // PATH: model directory, tokenizer_config.json, or a .jinja file. Error names what is missing.
  static ChatTemplate load(const std::string& path);  // also a GGUF file: its tokenizer.chat_template
  static ChatTemplate from_gguf(const GgufFile& file);
  // From a parsed tokenizer_config.json (and, when given, a chat_template.jinja that overrides it).
  static ChatTemplate from_config(const nlohmann::ordered_json& config, const std::string& origin,
                                  const std::optional<std::string>& jinja_override = std::nullopt);
  // One template with no special tokens.
  static ChatTemplate from_source(const std::string& source, const std::string& origin = "template");

  std::string render(const ChatRequest& request) const;

  // How to parse what the model generates after `prompt` (rendered for `request`): the format the
  // selected template speaks, starting inside reasoning when the prompt left a block open.
  OutputParserOptions output_options(const ChatRequest& request, const std::string& prompt) const;

  // The template render() would use for this request.
  const Template& select(const ChatRequest& request) const;
  const std::map<std::string, Template>& templates() const { return templates_; }
  const Map& special_tokens() const { return special_tokens_; }

 private:
  std::string origin_;
  std::map<std::string, Template> templates_;  // by name; a single template is "default"
  Map special_tokens_;
};

}  // namespace kestrel::chat
