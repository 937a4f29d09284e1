#include "chat/chat_template.h"

#include <dirent.h>

#include "chat/jinja_error.h"
#include "chat/text_util.h"
#include "core/error.h"
#include "core/files.h"
#include "io/gguf.h"

namespace kestrel::chat {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

nlohmann::ordered_json parse_json_file(const std::string& path) {
  std::string text = read_file(path);
  try {
    return nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    bad_input(path, " is not valid JSON: ", e.what());
  }
}

// A special token in tokenizer_config.json: "<bos>" or {"content": "<bos>", ...}.
std::optional<std::string> token_text(const nlohmann::ordered_json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string()) return j["content"].get<std::string>();
  return std::nullopt;
}

Template compile(const std::string& source, const std::string& what) {
  try {
    return Template(source);
  } catch (const Error& e) {
    bad_input(what, ": ", e.what());
  }
}

// continue_final_message: the prompt ends right after the final message's text. Its surrounding
// whitespace counts only where the template kept it (transformers' rule).
std::string cut_after_final_message(const ChatRequest& request, const std::string& prompt) {
  if (request.add_generation_prompt) {
    bad_input("continue_final_message and add_generation_prompt cannot both be set: the first continues the "
              "last message, the second opens a new one");
  }
  if (request.messages.empty()) bad_input("continue_final_message needs at least one message");
  const auto& content = request.messages.back().contains("content") ? request.messages.back()["content"]
                                                                     : nlohmann::ordered_json();
  std::string text;
  bool found = false;
  if (content.is_string()) {
    text = content.get<std::string>(), found = true;
  } else if (content.is_array()) {
    for (auto it = content.rbegin(); it != content.rend() && !found; ++it) {
      if (it->is_object() && it->contains("text") && (*it)["text"].is_string()) text = (*it)["text"].get<std::string>(), found = true;
    }
  }
  if (!found) bad_input("continue_final_message: the final message has no text to continue");
  std::string stripped = py_strip(text, std::nullopt, true, true);
  std::string lstripped = py_strip(text, std::nullopt, true, false);
  size_t at = prompt.rfind(stripped);
  if (at == std::string::npos) {
    bad_input("continue_final_message: the final message does not appear in the rendered prompt (the template "
              "rewrites or drops it)");
  }
  if (prompt.compare(at, lstripped.size(), text) == 0) return prompt.substr(0, at + lstripped.size());
  return prompt.substr(0, at + stripped.size());
}

}  // namespace

ChatTemplate ChatTemplate::from_source(const std::string& source, const std::string& origin) {
  ChatTemplate t;
  t.origin_ = origin;
  t.templates_.emplace("default", compile(source, origin));
  return t;
}

ChatTemplate ChatTemplate::from_config(const nlohmann::ordered_json& config, const std::string& origin,
                                       const std::optional<std::string>& jinja_override) {
  ChatTemplate t;
  t.origin_ = origin;
  if (!config.is_object()) bad_input(origin, ": expected a JSON object");
  if (jinja_override) {
    t.templates_.emplace("default", compile(*jinja_override, origin + " (chat_template.jinja)"));
  } else if (config.contains("chat_template")) {
    const auto& ct = config["chat_template"];
    if (ct.is_string()) {
      t.templates_.emplace("default", compile(ct.get<std::string>(), origin + " chat_template"));
    } else if (ct.is_array()) {
      for (const auto& item : ct) {
        if (!item.is_object() || !item.contains("name") || !item.contains("template") || !item["name"].is_string() ||
            !item["template"].is_string()) {
          bad_input(origin, ": chat_template list entries must be {\"name\": ..., \"template\": ...}");
        }
        std::string name = item["name"].get<std::string>();
        t.templates_.emplace(name, compile(item["template"].get<std::string>(), cat(origin, " chat_template '", name, "'")));
      }
    } else if (!ct.is_null()) {
      bad_input(origin, ": chat_template must be a string or a list of {name, template}");
    }
  }
  static const char* kTokens[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                  "pad_token", "cls_token", "mask_token"};
  for (const char* name : kTokens) {
    if (config.contains(name)) {
      if (auto text = token_text(config[name])) t.special_tokens_.set(name, Value(*text));
    }
  }
  if (config.contains("additional_special_tokens") && config["additional_special_tokens"].is_array()) {
    List list;
    for (const auto& item : config["additional_special_tokens"]) {
      if (auto text = token_text(item)) list.push_back(Value(*text));
    }
    t.special_tokens_.set("additional_special_tokens", Value(std::move(list)));
  }
  if (config.contains("extra_special_tokens") && config["extra_special_tokens"].is_object()) {
    for (const auto& [name, item] : config["extra_special_tokens"].items()) {
      if (auto text = token_text(item); text && !t.special_tokens_.find(name)) t.special_tokens_.set(name, Value(*text));
    }
  }
  return t;
}

ChatTemplate ChatTemplate::load(const std::string& path) {
  if (is_directory(path)) {
    std::string config_path = path_join(path, "tokenizer_config.json");
    std::string jinja_path = path_join(path, "chat_template.jinja");
    nlohmann::ordered_json config = nlohmann::ordered_json::object();
    if (file_exists(config_path)) config = parse_json_file(config_path);
    std::optional<std::string> jinja;
    if (file_exists(jinja_path)) jinja = read_file(jinja_path);
    ChatTemplate t = from_config(config, file_exists(config_path) ? config_path : path, jinja);
    std::string extra_dir = path_join(path, "additional_chat_templates");
    if (DIR* dir = is_directory(extra_dir) ? opendir(extra_dir.c_str()) : nullptr) {
      while (dirent* entry = readdir(dir)) {
        std::string file = entry->d_name;
        if (!ends_with(file, ".jinja")) continue;
        std::string name = file.substr(0, file.size() - 6);
        std::string full = path_join(extra_dir, file);
        t.templates_.emplace(name, compile(read_file(full), full));
      }
      closedir(dir);
    }
    if (t.templates_.empty()) {
      bad_input("no chat template in ", path, ": expected chat_template.jinja or a chat_template in tokenizer_config.json");
    }
    return t;
  }
  if (!file_exists(path)) bad_input("chat template source ", path, " does not exist");
  if (is_gguf_file(path)) return from_gguf(GgufFile::open(path));
  if (ends_with(path, ".json")) {
    ChatTemplate t = from_config(parse_json_file(path), path);
    if (t.templates_.empty()) bad_input(path, " has no chat_template");
    return t;
  }
  return from_source(read_file(path), path);
}

// tokenizer.chat_template, with bos_token / eos_token (and pad_token) named by their ids in
// tokenizer.ggml.tokens, as tokenizer_config.json would name them.
ChatTemplate ChatTemplate::from_gguf(const GgufFile& f) {
  const GgufValue* tmpl = f.find("tokenizer.chat_template");
  if (!tmpl || !tmpl->str())
    bad_input(f.path(), ": no chat template (metadata key tokenizer.chat_template is missing or not a string)");
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  config["chat_template"] = *tmpl->str();
  const GgufValue* tokens = f.find("tokenizer.ggml.tokens");
  for (const auto& [key, name] : {std::pair{"tokenizer.ggml.bos_token_id", "bos_token"},
                                  std::pair{"tokenizer.ggml.eos_token_id", "eos_token"},
                                  std::pair{"tokenizer.ggml.padding_token_id", "pad_token"}}) {
    const GgufValue* id = f.find(key);
    if (!id || !id->to_int() || !tokens || tokens->elem_type() != GgufValueType::kString) continue;
    if (*id->to_int() < 0 || uint64_t(*id->to_int()) >= tokens->size())
      bad_input(f.path(), ": ", key, " = ", *id->to_int(), " is outside tokenizer.ggml.tokens (", tokens->size(), " entries)");
    config[name] = tokens->strings()[size_t(*id->to_int())];
  }
  return from_config(config, f.path());
}

const Template& ChatTemplate::select(const ChatRequest& request) const {
  if (!request.template_name.empty()) {
    auto it = templates_.find(request.template_name);
    if (it == templates_.end()) {
      std::string names;
      for (const auto& kv : templates_) names += (names.empty() ? "" : ", ") + kv.first;
      bad_input(origin_, " has no chat template named '", request.template_name, "' (it has: ", names, ")");
    }
    return it->second;
  }
  bool has_tools = !request.tools.is_null();
  if (has_tools) {
    if (auto it = templates_.find("tool_use"); it != templates_.end()) return it->second;
  }
  if (auto it = templates_.find("default"); it != templates_.end()) return it->second;
  if (templates_.size() == 1) return templates_.begin()->second;
  bad_input(origin_, " has several chat templates and none is named 'default'; pick one by name");
}

OutputParserOptions ChatTemplate::output_options(const ChatRequest& request, const std::string& prompt) const {
  OutputParserOptions options{.format = detect_output_format(select(request).source())};
  options.starts_in_reasoning = prompt_opens_reasoning(options.format, prompt);
  return options;
}

std::string ChatTemplate::render(const ChatRequest& request) const {
  if (!request.messages.is_array()) bad_input("chat messages must be a JSON array of {role, content} objects");
  if (!request.tools.is_null() && !request.tools.is_array()) bad_input("chat tools must be a JSON array or null");
  if (!request.variables.is_object()) bad_input("chat template variables must be a JSON object");
  const Template& t = select(request);
  Map vars = special_tokens_;
  auto convert = [](const nlohmann::ordered_json& j, const std::string& what) {
    try {
      return from_json(j);
    } catch (const JinjaFault& e) {
      bad_input("chat ", what, ": ", e.what());
    }
  };
  for (const auto& [k, v] : request.variables.items()) vars.set(k, convert(v, "variable " + k));
  vars.set("messages", convert(request.messages, "messages"));
  vars.set("tools", request.tools.is_null() ? Value::none() : convert(request.tools, "tools"));
  vars.set("documents", Value::none());
  vars.set("add_generation_prompt", Value(request.add_generation_prompt));
  std::string prompt = t.render(vars, request.bounds);
  if (request.continue_final_message) prompt = cut_after_final_message(request, prompt);
  return prompt;
}

}  // namespace kestrel::chat
