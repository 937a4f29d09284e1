// What `kestrel info` reports about a checkpoint directory or GGUF file, computed without loading weights:
// the parsed config, the parameter count from the tensor shapes, and the memory plan.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "model/config.h"

namespace kestrel {

struct MemoryPlanParams {
  int64_t ctx = 4096;     // tokens per sequence
  int32_t seqs = 1;       // sequences live at once
  int32_t block_size = 16;
  bool kv_bf16 = false;   // K/V rows at BF16 (--kv-cache bf16), else F32
};

struct ModelInfo {
  std::string dir;
  std::string architecture;     // config.json "architectures"[0] ("" when absent), or "GGUF <arch>"
  std::string text_model_type;  // text_config.model_type of a multimodal wrapper, or ""
  ModelConfig config;
  std::string layer_pattern;    // "3×linear_attention + full_attention, ×6"
  uint64_t n_params = 0;        // text weights (embeddings, layers, final norm, output head)
  uint64_t weight_bytes = 0;    // their bytes as stored
  uint64_t n_other_tensors = 0; // tensors kestrel does not use (vision tower, MTP layer, ...)
  uint64_t other_params = 0;
  std::string weight_dtypes;    // "BF16", or "BF16+F32" when mixed
  // Cache costs (F32 activations, as the CPU backend stores them).
  uint64_t kv_bytes_per_token = 0;
  uint64_t state_bytes_per_seq = 0;
  // The plan for MemoryPlanParams.
  MemoryPlanParams plan;
  uint64_t kv_bytes = 0, state_bytes = 0, total_bytes = 0;
};

ModelInfo model_info(const std::string& dir, const MemoryPlanParams& plan);
nlohmann::json model_info_json(const ModelInfo& info);

// "3×linear_attention + full_attention, ×6": the shortest repeating unit, run-length encoded.
std::string layer_pattern(const std::vector<LayerKind>& kinds);

}  // namespace kestrel
