// Hugging Face checkpoint -> GGUF with llama.cpp's architecture names, tensor names and metadata,
// streaming one row at a time (peak memory: one row, whatever the model size).
//
// Families: qwen3 (llama.cpp arch "qwen3") and qwen3_moe ("qwen3moe"). Tensor names follow
// llama.cpp's converter: token_embd, output_norm, output, blk.N.{attn_norm, attn_q, attn_k,
// attn_v, attn_output, attn_q_norm, attn_k_norm, ffn_norm, ffn_gate, ffn_up, ffn_down} and, for
// MoE, blk.N.ffn_gate_inp and the experts stacked as blk.N.ffn_{gate,up,down}_exps
// [n_expert, out, in]. As llama.cpp does, 1-D tensors, norms and the router stay F32; matrices
// take the requested type, or BF16 when their rows are not a whole number of blocks (llama.cpp
// falls back to F16 there). The tokenizer (tokenizer.json, when present) becomes
// tokenizer.ggml.* metadata (convert/tokenizer_meta.h).
#pragma once

#include <cstdint>
#include <string>

#include "quant/ggml_type.h"

namespace kestrel {

struct ConvertOptions {
  std::string model_dir;
  std::string output;
  GgmlType type = GgmlType::kBF16;  // F32, F16, BF16 or Q8_0
  bool progress = true;
};

struct ConvertReport {
  std::string arch;         // llama.cpp architecture name
  uint64_t n_tensors = 0;
  uint64_t bytes_in = 0;    // checkpoint bytes read
  uint64_t bytes_out = 0;   // tensor bytes written
  uint64_t n_fallback = 0;  // matrices stored as BF16 because their rows are not whole blocks
  bool has_tokenizer = false;  // tokenizer.json found and written as tokenizer.ggml.*
};

// Throws Error naming the directory, tensor or family when the checkpoint cannot be converted.
ConvertReport convert_hf_to_gguf(const ConvertOptions& opts);

// llama.cpp's LlamaFileType code for a whole-file type (general.file_type).
uint32_t llama_file_type(GgmlType type);

}  // namespace kestrel
