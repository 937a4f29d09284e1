// `kestrel template`: renders a chat template for a conversation and prints the prompt.
#include <cstdio>
#include <iostream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "cli/command.h"
#include "core/error.h"
#include "core/files.h"

namespace kestrel::cli {
namespace {

using ojson = nlohmann::ordered_json;

ojson read_json(const std::string& path, const std::string& flag) {
  std::string text;
  if (path == "-") {
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  } else {
    text = read_file(path);
  }
  try {
    return ojson::parse(text);
  } catch (const nlohmann::json::exception& e) {
    bad_input("--", flag, " ", path, " is not valid JSON: ", e.what());
  }
}

int run_template(const Args& args) {
  chat::ChatTemplate tmpl = chat::ChatTemplate::load(args.require("tokenizer"));
  chat::ChatRequest req;
  ojson messages = read_json(args.require("messages"), "messages");
  if (messages.is_object() && messages.contains("messages")) {
    // An OpenAI-style request body: {"messages": [...], "tools": [...]}.
    if (messages.contains("tools")) req.tools = messages["tools"];
    messages = ojson(messages["messages"]);
  }
  if (!messages.is_array()) bad_input("--messages: expected a JSON array of {role, content} objects");
  req.messages = messages;
  if (args.has("tools")) {
    req.tools = read_json(args.get("tools"), "tools");
    if (!req.tools.is_array()) bad_input("--tools: expected a JSON array of tool definitions");
  }
  req.add_generation_prompt = args.flag("add-generation-prompt");
  req.continue_final_message = args.flag("continue-final-message");
  req.template_name = args.get("template");
  for (const std::string& kv : args.get_all("var")) {
    size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) bad_input("--var expects NAME=VALUE, got '", kv, "'");
    std::string name = kv.substr(0, eq), value = kv.substr(eq + 1);
    ojson parsed = ojson::parse(value, nullptr, /*allow_exceptions=*/false);
    req.variables[name] = parsed.is_discarded() ? ojson(value) : parsed;
  }
  req.bounds.max_steps = args.get_int("max-steps", req.bounds.max_steps, 1, int64_t(1) << 40);
  std::string prompt = tmpl.render(req);
  std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  return 0;
}

const std::vector<OptionSpec> kOptions = {
    {"tokenizer", "t", "PATH", "model directory, tokenizer_config.json, or a .jinja template", ""},
    {"messages", "", "FILE", "JSON array of messages (or {\"messages\": [...], \"tools\": [...]}); - for stdin", ""},
    {"tools", "", "FILE", "JSON array of tool definitions", ""},
    {"add-generation-prompt", "", "", "end with the opening of the assistant's turn", ""},
    {"continue-final-message", "", "", "end inside the last message, for the model to continue it", ""},
    {"var", "", "NAME=VALUE", "extra template variable; VALUE is JSON when it parses, else a string (repeatable)", ""},
    {"template", "", "NAME", "named chat template (default: picked as transformers does)", ""},
    {"max-steps", "", "N", "evaluation step bound", "10000000"},
};

const Registrar kReg{{
    .name = "template",
    .summary = "render a chat template for a conversation",
    .usage = "kestrel template --tokenizer PATH --messages FILE.json [--tools FILE] [--add-generation-prompt | "
             "--continue-final-message] [--var k=v ...]",
    .details = "Prints the prompt exactly as transformers' apply_chat_template renders it (no trailing newline "
               "is added).",
    .options = kOptions,
    .run = run_template,
}};

}  // namespace
}  // namespace kestrel::cli
