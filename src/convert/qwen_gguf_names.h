// The correspondence between Hugging Face tensor names and llama.cpp's GGUF names for the Qwen
// families kestrel converts, shared by `kestrel convert` (HF -> GGUF) and the GGUF loader
// (GGUF -> the HF names the architectures ask for).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace kestrel {

struct GgufNameMap {
  std::string gguf;                   // "blk.3.attn_q.weight"
  std::vector<std::string> hf;        // full HF names; several = experts stacked along a new first dim
  std::vector<int64_t> hf_shape;      // shape of each HF tensor
  bool keep_f32 = false;              // 1-D tensors, norms and the router stay F32 (as llama.cpp)
};

// llama.cpp's architecture name for a config ("qwen3", "qwen3moe"); unsupported() otherwise.
std::string gguf_arch_name(const ModelConfig& cfg);
// The inverse: the HF model_type a GGUF architecture converts back to, or "" if unknown.
std::string model_type_for_gguf_arch(const std::string& arch);

// Every tensor of the model, in llama.cpp's order. HF names include cfg.weight_prefix.
std::vector<GgufNameMap> qwen_gguf_names(const ModelConfig& cfg);

}  // namespace kestrel
