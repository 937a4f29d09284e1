// The architecture registry: model_type -> the code that parses its config and builds it.
// Each arch/<family>.cc registers itself with a static ArchRegistrar.
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/config.h"

namespace kestrel {

class Model;
class Ops;
class WeightLoader;

struct Architecture {
  std::string name;                      // "qwen"
  std::vector<std::string> model_types;  // config.json model_type values it accepts
  // Parses and validates config.json (the whole file); `path` names it in errors.
  std::function<ModelConfig(const nlohmann::json& root, const std::string& path)> parse_config;
  // Builds the model from the checkpoint's tensors.
  std::function<std::unique_ptr<Model>(const ModelConfig& cfg, WeightLoader& weights)> build;
};

struct ArchRegistrar {
  explicit ArchRegistrar(Architecture arch);
};

const Architecture* find_architecture(const std::string& model_type);
std::vector<std::string> supported_model_types();

}  // namespace kestrel
