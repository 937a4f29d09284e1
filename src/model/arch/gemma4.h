// Gemma 4 (gemma4_text, and the multimodal gemma4 wrapper whose text weights live under
// model.language_model.*): sliding/full attention with per-layer geometry, per-layer embeddings,
// KV sharing, GeGLU MLP with an optional MoE block beside it, final logit softcap.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "model/config.h"

namespace kestrel {

ModelConfig parse_gemma4_config(const nlohmann::json& root, const std::string& path);

}  // namespace kestrel
