#include "model/loader.h"

#include <nlohmann/json.hpp>

#include "convert/gguf_model.h"
#include "core/error.h"
#include "core/files.h"
#include "model/registry.h"
#include "model/weight_loader.h"

namespace kestrel {

ModelConfig load_config(const std::string& dir) {
  if (!is_directory(dir)) bad_input(dir, ": not a model directory");
  const std::string path = path_join(dir, "config.json");
  if (!file_exists(path)) bad_input(dir, ": no config.json in the model directory");
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    bad_input(path, ": not valid JSON: ", e.what());
  }
  if (!root.is_object()) bad_input(path, ": expected a JSON object");
  if (!root.contains("model_type") || !root["model_type"].is_string())
    bad_input(path, ": missing string field 'model_type'");
  std::string model_type = root["model_type"].get<std::string>();
  const Architecture* arch = find_architecture(model_type);
  if (!arch) {
    std::string known;
    for (const auto& t : supported_model_types()) known += (known.empty() ? "" : ", ") + t;
    unsupported(path, ": model_type '", model_type, "' is not supported (supported: ", known, ")");
  }
  ModelConfig cfg = arch->parse_config(root, path);
  // generation_config.json's eos_token_id takes precedence, as in transformers' generate().
  const std::string gen_path = path_join(dir, "generation_config.json");
  if (file_exists(gen_path)) {
    try {
      auto gen = nlohmann::json::parse(read_file(gen_path));
      if (gen.is_object() && gen.contains("eos_token_id")) {
        std::vector<int> ids;
        const auto& e = gen["eos_token_id"];
        auto add = [&](const nlohmann::json& v) {
          if (v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() < cfg.vocab_size)
            ids.push_back(int(v.get<int64_t>()));
          else
            bad_input(gen_path, ": eos_token_id ", v.dump(), " is not a token id in the vocabulary");
        };
        if (e.is_array()) for (const auto& v : e) add(v);
        else if (!e.is_null()) add(e);
        if (!ids.empty()) cfg.eos_token_ids = ids;
      }
    } catch (const nlohmann::json::exception& e) {
      bad_input(gen_path, ": not valid JSON: ", e.what());
    }
  }
  return cfg;
}

LoadedModel load_model(const std::string& dir, Ops& ops) {
  if (is_gguf_file(dir)) {  // a GGUF file instead of a directory
    auto file = std::make_shared<const GgufFile>(GgufFile::open(dir));
    ModelConfig cfg = gguf_model_config(*file);
    LoadedModel lm;
    lm.dir = dir;
    lm.checkpoint = std::make_unique<Checkpoint>(gguf_checkpoint(file, cfg));
    WeightLoader wl(*lm.checkpoint, ops, cfg.weight_prefix);
    lm.model = find_architecture(cfg.model_type)->build(cfg, wl);
    return lm;
  }
  ModelConfig cfg = load_config(dir);
  LoadedModel lm;
  lm.dir = dir;
  lm.checkpoint = std::make_unique<Checkpoint>(Checkpoint::open_dir(dir));
  // Some checkpoints keep text weights at the top level even under a multimodal config.
  std::string prefix = cfg.weight_prefix;
  if (!lm.checkpoint->find(prefix + "embed_tokens.weight") && lm.checkpoint->find("model.embed_tokens.weight"))
    prefix = "model.";
  cfg.weight_prefix = prefix;
  WeightLoader wl(*lm.checkpoint, ops, prefix);
  lm.model = find_architecture(cfg.model_type)->build(cfg, wl);
  return lm;
}

}  // namespace kestrel
