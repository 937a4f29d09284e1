#include "convert/tokenizer_meta.h"

#include <nlohmann/json.hpp>
#include <vector>

#include "core/error.h"
#include "core/files.h"
#include "io/gguf.h"

namespace kestrel {
namespace {

using nlohmann::json;

constexpr int32_t kNormal = 1, kControl = 3, kUserDefined = 4;

json parse_json(const std::string& path) {
  try {
    return json::parse(read_file(path));
  } catch (const json::exception& e) {
    bad_input(path, ": not valid JSON: ", e.what());
  }
}

}  // namespace

bool add_tokenizer_metadata(GgufWriter& w, const std::string& dir, int64_t vocab_size, const std::string& pre) {
  const std::string path = path_join(dir, "tokenizer.json");
  if (!file_exists(path)) return false;
  const json tok = parse_json(path);
  if (!tok.is_object() || !tok.contains("model") || !tok["model"].is_object())
    bad_input(path, ": expected an object with a 'model' object");
  const json& model = tok["model"];
  const std::string type = model.value("type", "");
  if (type != "BPE") unsupported(path, ": tokenizer model '", type, "' cannot be converted yet (byte-level BPE only)");
  if (!model.contains("vocab") || !model["vocab"].is_object()) bad_input(path, ": model.vocab must be an object");

  std::vector<std::string> tokens(static_cast<size_t>(vocab_size));
  std::vector<int32_t> types(static_cast<size_t>(vocab_size), kUserDefined);
  std::vector<bool> seen(static_cast<size_t>(vocab_size), false);
  auto place = [&](const std::string& text, const json& id_json, int32_t kind, const char* where) {
    if (!id_json.is_number_integer()) bad_input(path, ": ", where, " '", text, "' has a non-integer id");
    const int64_t id = id_json.get<int64_t>();
    if (id < 0 || id >= vocab_size)
      bad_input(path, ": ", where, " '", text, "' has id ", id, " outside the model's vocabulary of ", vocab_size);
    tokens[size_t(id)] = text;
    types[size_t(id)] = kind;
    seen[size_t(id)] = true;
  };
  for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it) place(it.key(), it.value(), kNormal, "token");
  if (tok.contains("added_tokens") && tok["added_tokens"].is_array()) {
    for (const json& a : tok["added_tokens"]) {
      if (!a.is_object() || !a.contains("content") || !a["content"].is_string() || !a.contains("id"))
        bad_input(path, ": added_tokens entries need 'id' and 'content'");
      place(a["content"].get<std::string>(), a["id"], a.value("special", false) ? kControl : kUserDefined,
            "added token");
    }
  }
  for (int64_t i = 0; i < vocab_size; ++i)
    if (!seen[size_t(i)]) tokens[size_t(i)] = "[PAD" + std::to_string(i) + "]";

  std::vector<std::string> merges;
  if (model.contains("merges") && model["merges"].is_array()) {
    for (const json& m : model["merges"]) {
      if (m.is_string()) {
        merges.push_back(m.get<std::string>());
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
      } else {
        bad_input(path, ": model.merges entries must be \"a b\" strings or [a, b] pairs");
      }
    }
  }
  w.set("tokenizer.ggml.model", GgufValue::string("gpt2"));
  w.set("tokenizer.ggml.pre", GgufValue::string(pre));
  w.set("tokenizer.ggml.tokens", GgufValue::strings(std::move(tokens)));
  w.set("tokenizer.ggml.token_type", GgufValue::i32s(types));
  w.set("tokenizer.ggml.merges", GgufValue::strings(std::move(merges)));

  // tokenizer_config.json: the chat template, the padding token, add_bos_token.
  const std::string cfg_path = path_join(dir, "tokenizer_config.json");
  std::string chat_template;
  if (file_exists(cfg_path)) {
    const json cfg = parse_json(cfg_path);
    if (cfg.is_object()) {
      if (cfg.contains("chat_template") && cfg["chat_template"].is_string())
        chat_template = cfg["chat_template"].get<std::string>();
      if (cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean())
        w.set("tokenizer.ggml.add_bos_token", GgufValue::boolean(cfg["add_bos_token"].get<bool>()));
      if (cfg.contains("pad_token") && cfg["pad_token"].is_string()) {
        const std::string pad = cfg["pad_token"].get<std::string>();
        if (tok.contains("added_tokens"))
          for (const json& a : tok["added_tokens"])
            if (a.value("content", "") == pad && a["id"].is_number_integer())
              w.set("tokenizer.ggml.padding_token_id", GgufValue::u32(uint32_t(a["id"].get<int64_t>())));
      }
    }
  }
  const std::string jinja = path_join(dir, "chat_template.jinja");
  if (file_exists(jinja)) chat_template = read_file(jinja);
  if (!chat_template.empty()) w.set("tokenizer.chat_template", GgufValue::string(chat_template));
  return true;
}

}  // namespace kestrel
