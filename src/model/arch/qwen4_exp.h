// Qwen4-Exp (qwen4_exp, qwen4_exp_text): the hybrid Qwen line with hyper-connections (several
// residual streams), hashed n-gram per-layer embeddings (PLE) and QSA sparse attention.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/config.h"

namespace kestrel {

ModelConfig parse_qwen4_exp_config(const nlohmann::json& root, const std::string& path);

// The hashing of one PLE module (derived from the config, as transformers derives it).
struct NgramHash {
  std::vector<int64_t> multipliers;  // [ngram_size]
  std::vector<int64_t> head_sizes;   // [ngram_heads] prime table sizes
  std::vector<int64_t> head_offsets; // [ngram_heads] row offset of each head's table
  int64_t padded_rows = 0;           // rows of the (concatenated) embedding table
  // [multipliers | head_sizes | head_offsets]: the row the ngram_embed op takes (ops/ngram.h).
  std::vector<int64_t> packed() const;
};
NgramHash ngram_hash(const ModelConfig& cfg, int ple_index);

// Row ids [n_tokens, ngram_heads] of one sequence's new tokens, from its context (the previous
// ngram_size - 1 ids, oldest first; all eos for a fresh sequence): the host reference of what
// the token_windows and ngram_embed ops compute (ops/ngram.h).
void ngram_ids(const ModelConfig& cfg, const NgramHash& hash, const int32_t* context, const int32_t* tokens,
               int32_t n_tokens, int32_t* out);

}  // namespace kestrel
