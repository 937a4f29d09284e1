// Loading a model directory: config.json -> ModelConfig (through the registry), then the
// checkpoint's tensors -> a Model on the given backend.
#pragma once

#include <memory>
#include <string>

#include "io/safetensors.h"
#include "model/config.h"
#include "model/model.h"

namespace kestrel {

// Reads and validates DIR/config.json (and DIR/generation_config.json for EOS ids).
ModelConfig load_config(const std::string& dir);

struct LoadedModel {
  std::string dir;
  std::unique_ptr<Checkpoint> checkpoint;  // keeps the mmap alive (CPU weights point into it)
  std::unique_ptr<Model> model;
  const ModelConfig& config() const { return model->config(); }
};

LoadedModel load_model(const std::string& dir, Ops& ops);

}  // namespace kestrel
