// The Qwen line: qwen3, qwen3_moe, qwen3_next, qwen3_5, qwen3_5_moe (and the _text variants).
// One architecture: the variants differ only in config values (layer pattern, gated attention,
// zero-centred norms, MoE and shared experts), so they share one weight layout and one forward.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "model/config.h"

namespace kestrel {

ModelConfig parse_qwen_config(const nlohmann::json& root, const std::string& path);

}  // namespace kestrel
