#include "convert/tokenizer_meta.h"

#include <cctype>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
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

// The tokenizer.ggml.tokens / token_type arrays being built for a model vocabulary of `size` ids
// from a tokenizer.json (`path`, for errors): ids must be in range; ids no token names become
// "[PAD<id>]" (as llama.cpp's converter writes them) with the table's default type.
struct VocabTable {
  VocabTable(std::string path, int64_t size, int32_t default_type)
      : path(std::move(path)), size(size), tokens(size_t(size)), types(size_t(size), default_type), seen(size_t(size)) {}

  void place(const std::string& text, const json& id_json, int32_t kind, const char* where) {
    if (!id_json.is_number_integer()) bad_input(path, ": ", where, " '", text, "' has a non-integer id");
    const int64_t id = id_json.get<int64_t>();
    if (id < 0 || id >= size)
      bad_input(path, ": ", where, " '", text, "' has id ", id, " outside the model's vocabulary of ", size);
    tokens[size_t(id)] = text;
    types[size_t(id)] = kind;
    seen[size_t(id)] = true;
  }
  // Places tokenizer.json's added_tokens, each with the type kind(content, special) gives.
  template <typename Kind>
  void place_added(const json& tok, Kind kind) {
    if (!tok.contains("added_tokens") || !tok["added_tokens"].is_array()) return;
    for (const json& a : tok["added_tokens"]) {
      if (!a.is_object() || !a.contains("content") || !a["content"].is_string() || !a.contains("id"))
        bad_input(path, ": added_tokens entries need 'id' and 'content'");
      const std::string text = a["content"].get<std::string>();
      place(text, a["id"], kind(text, a.value("special", false)), "added token");
    }
  }
  void pad_unseen() {
    for (int64_t i = 0; i < size; ++i)
      if (!seen[size_t(i)]) tokens[size_t(i)] = "[PAD" + std::to_string(i) + "]";
  }

  std::string path;
  int64_t size;
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<bool> seen;
};

// tokenizer_config.json (and chat_template.jinja): the chat template, the padding token,
// add_bos_token. Shared by the byte-level and the Gemma paths.
void add_config_metadata(GgufWriter& w, const std::string& dir, const json& tok) {
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

  VocabTable table(path, vocab_size, kUserDefined);
  for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it)
    table.place(it.key(), it.value(), kNormal, "token");
  table.place_added(tok, [](const std::string&, bool special) { return special ? kControl : kUserDefined; });
  table.pad_unseen();

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
  w.set("tokenizer.ggml.tokens", GgufValue::strings(std::move(table.tokens)));
  w.set("tokenizer.ggml.token_type", GgufValue::i32s(table.types));
  w.set("tokenizer.ggml.merges", GgufValue::strings(std::move(merges)));

  add_config_metadata(w, dir, tok);
  return true;
}

namespace {

constexpr int32_t kUnused = 5, kByte = 6;

// Gemma 4's chat markers that llama.cpp's converter types user-defined rather than control, so
// that llama.cpp renders them and its chat parser can read them (they are special in tokenizer.json).
bool gemma_visible_marker(const std::string& t) {
  for (const char* v : {"<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>", "<|tool_response>", "<tool_response|>", "<|\"|>"})
    if (t == v) return true;
  return false;
}

bool is_byte_token(const std::string& t) {
  return t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && std::isxdigit(static_cast<unsigned char>(t[3])) &&
         std::isxdigit(static_cast<unsigned char>(t[4]));
}

// {"type": "Replace", "pattern": {"String": from}, "content": to}
bool is_replace(const json& j, const std::string& from, const std::string& to) {
  return j.is_object() && j.value("type", "") == "Replace" && j.contains("pattern") && j["pattern"].is_object() &&
         j["pattern"].value("String", std::string("\x01")) == from && j.value("content", std::string("\x01")) == to;
}

// The one shape of tokenizer.json that tokenizer.ggml.model "gemma4" stands for (SentencePiece-style
// BPE: spaces become U+2581, no word splitting, byte fallback); anything else is refused by name.
void check_gemma_shape(const json& tok, const std::string& path) {
  const std::string space = "\xE2\x96\x81";
  const json& model = tok["model"];
  if (model.value("type", "") != "BPE" || !model.value("byte_fallback", false))
    unsupported(path, ": Gemma's tokenizer must be BPE with byte_fallback (model.type '", model.value("type", ""), "')");
  if (model.value("ignore_merges", false)) unsupported(path, ": model.ignore_merges = true cannot be written as tokenizer.ggml.model 'gemma4'");
  if (model.contains("dropout") && !model["dropout"].is_null()) unsupported(path, ": model.dropout cannot be converted");
  const json norm = tok.value("normalizer", json());
  const json* n = &norm;
  if (n->is_object() && n->value("type", "") == "Sequence" && n->contains("normalizers") && (*n)["normalizers"].size() == 1)
    n = &(*n)["normalizers"][0];
  if (!is_replace(*n, " ", space))
    unsupported(path, ": Gemma's normalizer must replace ' ' with U+2581 (tokenizer.ggml.model 'gemma4' escapes spaces; got ",
                norm.dump().substr(0, 120), ")");
  // A Split on " " after that normalizer never matches: no pre-tokenizer at all is the same.
  const json pre = tok.value("pre_tokenizer", json());
  if (!pre.is_null() && !(pre.is_object() && pre.value("type", "") == "Split" && pre.contains("pattern") &&
                          pre["pattern"].is_object() && pre["pattern"].value("String", std::string()) == " " &&
                          !pre.value("invert", false)))
    unsupported(path, ": Gemma's pre_tokenizer must be null or a Split on ' ' (got ", pre.dump().substr(0, 120), ")");
  const json dec = tok.value("decoder", json());
  const bool dec_ok = dec.is_object() && dec.value("type", "") == "Sequence" && dec.contains("decoders") &&
                      dec["decoders"].is_array() && dec["decoders"].size() == 3 && is_replace(dec["decoders"][0], space, " ") &&
                      dec["decoders"][1].value("type", "") == "ByteFallback" && dec["decoders"][2].value("type", "") == "Fuse";
  if (!dec_ok) unsupported(path, ": Gemma's decoder must be Replace(U+2581 -> ' '), ByteFallback, Fuse (got ", dec.dump().substr(0, 160), ")");
  if (tok.contains("added_tokens") && tok["added_tokens"].is_array())
    for (const json& a : tok["added_tokens"])
      for (const char* flag : {"lstrip", "rstrip", "normalized", "single_word"})
        if (a.is_object() && a.value(flag, false))
          unsupported(path, ": added token '", a.value("content", ""), "' has ", flag,
                      " = true, which tokenizer.ggml.* metadata cannot record");
}

// The id the post-processor puts before the text when it is [<special>, A] (what add_bos_token
// records), none when it is [A] or absent; anything else cannot be written.
std::optional<int64_t> gemma_leading_token(const json& tok, const std::string& path) {
  const json pp = tok.value("post_processor", json());
  if (pp.is_null()) return std::nullopt;
  if (pp.value("type", "") == "TemplateProcessing" && pp.contains("single") && pp["single"].is_array()) {
    const json& single = pp["single"];
    if (single.size() == 1 && single[0].contains("Sequence")) return std::nullopt;
    if (single.size() == 2 && single[0].contains("SpecialToken") && single[1].contains("Sequence")) {
      const std::string name = single[0]["SpecialToken"].value("id", "");
      const json specials = pp.value("special_tokens", json::object());
      if (specials.contains(name) && specials[name].contains("ids") && specials[name]["ids"].is_array() &&
          specials[name]["ids"].size() == 1 && specials[name]["ids"][0].is_number_integer())
        return specials[name]["ids"][0].get<int64_t>();
    }
  }
  unsupported(path, ": post_processor ", pp.dump().substr(0, 160),
              " cannot be written as tokenizer.ggml.add_bos_token (only [bos, A] or [A])");
}

// tokenizer_config.json's <typ>_token named as an added token, else config.json's <typ>_token_id
// (or its text_config's), as llama.cpp's converter looks them up.
std::optional<int64_t> special_id(const json& tok, const json& cfg, const json& model_cfg, const std::string& typ) {
  if (cfg.is_object() && cfg.contains(typ + "_token")) {
    const json& e = cfg[typ + "_token"];
    std::string name = e.is_string() ? e.get<std::string>() : e.is_object() ? e.value("content", "") : "";
    if (!name.empty() && tok.contains("added_tokens"))
      for (const json& a : tok["added_tokens"])
        if (a.value("content", "") == name && a["id"].is_number_integer()) return a["id"].get<int64_t>();
  }
  for (const json* c : {&model_cfg, model_cfg.is_object() && model_cfg.contains("text_config") ? &model_cfg["text_config"] : nullptr}) {
    if (!c || !c->is_object() || !c->contains(typ + "_token_id")) continue;
    const json& v = (*c)[typ + "_token_id"];
    if (v.is_number_integer()) return v.get<int64_t>();
  }
  return std::nullopt;
}

}  // namespace

bool add_gemma4_tokenizer_metadata(GgufWriter& w, const std::string& dir, int64_t vocab_size) {
  const std::string path = path_join(dir, "tokenizer.json");
  if (!file_exists(path)) return false;
  const json tok = parse_json(path);
  if (!tok.is_object() || !tok.contains("model") || !tok["model"].is_object())
    bad_input(path, ": expected an object with a 'model' object");
  check_gemma_shape(tok, path);
  const json& model = tok["model"];
  if (!model.contains("vocab") || !model["vocab"].is_object()) bad_input(path, ": model.vocab must be an object");

  VocabTable table(path, vocab_size, kUnused);
  for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it)
    table.place(it.key(), it.value(), is_byte_token(it.key()) ? kByte : kNormal, "token");
  table.place_added(tok, [](const std::string& text, bool special) {
    return special && !gemma_visible_marker(text) ? kControl : kUserDefined;
  });
  // Ids past the tokenizer (the model's vocabulary may be larger) are unused padding.
  table.pad_unseen();

  std::vector<std::string> merges;
  if (model.contains("merges") && model["merges"].is_array()) {
    for (const json& m : model["merges"]) {
      std::string a, b;
      if (m.is_string()) {
        const std::string s = m.get<std::string>();
        const size_t space = s.find(' ');
        if (space == std::string::npos) bad_input(path, ": model.merges entry '", s, "' is not \"a b\"");
        a = s.substr(0, space), b = s.substr(space + 1);
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        a = m[0].get<std::string>(), b = m[1].get<std::string>();
      } else {
        bad_input(path, ": model.merges entries must be \"a b\" strings or [a, b] pairs");
      }
      if (a.empty() || b.empty() || a.find(' ') != std::string::npos || b.find(' ') != std::string::npos)
        unsupported(path, ": merge [\"", a, "\", \"", b, "\"] has a space or an empty side, which \"a b\" merges cannot hold");
      merges.push_back(a + " " + b);
    }
  }
  if (merges.empty()) bad_input(path, ": model.merges is missing or empty (tokenizer.ggml.model 'gemma4' needs them)");

  const std::string cfg_path = path_join(dir, "tokenizer_config.json");
  const json cfg = file_exists(cfg_path) ? parse_json(cfg_path) : json();
  const std::string model_cfg_path = path_join(dir, "config.json");
  const json model_cfg = file_exists(model_cfg_path) ? parse_json(model_cfg_path) : json();
  const std::pair<const char*, const char*> keys[] = {{"bos", "bos_token_id"},     {"eos", "eos_token_id"},
                                                      {"unk", "unknown_token_id"}, {"sep", "seperator_token_id"},
                                                      {"pad", "padding_token_id"}, {"cls", "cls_token_id"},
                                                      {"mask", "mask_token_id"}};
  std::vector<std::pair<std::string, uint32_t>> ids;
  const std::optional<int64_t> leading = gemma_leading_token(tok, path);
  for (const auto& [typ, key] : keys) {
    std::optional<int64_t> id = special_id(tok, cfg, model_cfg, typ);
    if (std::string(typ) == "bos") {
      if (!id) id = leading;  // as gguf-py does without a tokenizer_config.json naming it
      if (leading && *id != *leading)
        unsupported(path, ": the post-processor prepends token ", *leading, ", not the bos token ", *id,
                    " (tokenizer.ggml.add_bos_token can only add the bos token)");
    }
    if (!id) continue;
    if (*id < 0 || *id >= vocab_size || !table.seen[size_t(*id)])
      bad_input(path, ": the ", typ, " token id ", *id, " names no token of the tokenizer");
    ids.emplace_back(std::string("tokenizer.ggml.") + key, uint32_t(*id));
  }

  w.set("tokenizer.ggml.model", GgufValue::string("gemma4"));
  w.set("tokenizer.ggml.tokens", GgufValue::strings(std::move(table.tokens)));
  w.set("tokenizer.ggml.scores", GgufValue::f32s(std::vector<float>(static_cast<size_t>(vocab_size), -1000.0f)));
  w.set("tokenizer.ggml.token_type", GgufValue::i32s(table.types));
  w.set("tokenizer.ggml.merges", GgufValue::strings(std::move(merges)));
  for (const auto& [key, id] : ids) w.set(key, GgufValue::u32(id));
  add_config_metadata(w, dir, tok);  // the chat template and the padding token
  w.set("tokenizer.ggml.add_bos_token", GgufValue::boolean(leading.has_value()));
  if (cfg.is_object() && cfg.contains("add_eos_token") && cfg["add_eos_token"].is_boolean()) {
    if (cfg["add_eos_token"].get<bool>())
      unsupported(cfg_path, ": add_eos_token = true is not supported for Gemma's tokenizer");
    w.set("tokenizer.ggml.add_eos_token", GgufValue::boolean(false));
  }
  w.set("tokenizer.ggml.add_space_prefix", GgufValue::boolean(false));
  return true;
}

}  // namespace kestrel
