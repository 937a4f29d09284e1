// Hugging Face checkpoint -> GGUF with llama.cpp's architecture names, tensor names, metadata
// and tensor transforms, streaming one row at a time (peak memory: one row, whatever the model
// size).
//
// Families (llama.cpp arch): qwen3 (qwen3), qwen3_moe (qwen3moe), qwen3_next (qwen3next),
// qwen3_5 (qwen35), qwen3_5_moe (qwen35moe), gemma4 / gemma4_text (gemma4); the layouts and
// transforms are in convert/gguf_names.h and docs/gguf.md. As llama.cpp does, 1-D tensors,
// norms, biases, scales, the MoE routers and the conv1d kernels stay F32; matrices take the
// requested type, or BF16 when their rows are not a whole number of blocks (llama.cpp falls back
// to F16 there). A byte-level BPE tokenizer (tokenizer.json, the Qwen line) becomes
// tokenizer.ggml.* metadata (convert/tokenizer_meta.h); Gemma's is refused by name.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "convert/quant_recipe.h"
#include "quant/ggml_type.h"

namespace kestrel {

struct ConvertOptions {
  std::string model_dir;
  std::string output;
  GgmlType type = GgmlType::kBF16;  // F32, F16, BF16 or Q8_0
  // A llama.cpp mixed K-quant recipe instead of one type: each tensor gets the type llama-quantize
  // would give it starting from the bf16 conversion (convert/quant_recipe.h).
  std::optional<QuantRecipe> recipe;
  bool progress = true;
  bool tokenizer = true;  // write tokenizer.json as tokenizer.ggml.* when present
};

struct ConvertReport {
  std::string arch;         // llama.cpp architecture name
  uint64_t n_tensors = 0;
  uint64_t bytes_in = 0;    // checkpoint bytes read
  uint64_t bytes_out = 0;   // tensor bytes written
  uint64_t n_fallback = 0;  // matrices stored as BF16 because their rows are not whole blocks (plain types)
  bool has_tokenizer = false;  // tokenizer.json found and written as tokenizer.ggml.*
  std::map<GgmlType, uint64_t> tensors_by_type;
};

// Throws Error naming the directory, tensor or family when the checkpoint cannot be converted.
ConvertReport convert_hf_to_gguf(const ConvertOptions& opts);

// llama.cpp's LlamaFileType code for a whole-file type (general.file_type).
uint32_t llama_file_type(GgmlType type);

}  // namespace kestrel
