// Pieces of config.json parsing every architecture shares.
#pragma once

#include <string>

#include "core/error.h"
#include "io/json_fields.h"
#include "model/config.h"

namespace kestrel {

// Starts a config: model_type and arch from the top level, and the text part's fields — the
// top level itself, or `text_config` in a multimodal wrapper, whose text weights then live under
// model.language_model.* (weight_prefix).
inline JsonFields text_config_fields(const JsonFields& top, const std::string& path, const std::string& arch,
                                     ModelConfig& cfg) {
  cfg.model_type = top.get_string("model_type", "");
  cfg.arch = arch;
  const bool wrapped = top.has("text_config");
  cfg.weight_prefix = wrapped ? "model.language_model." : "model.";
  return wrapped ? JsonFields(top.get("text_config"), path + ": text_config") : top;
}

// eos_token_id (one id or a list) from the text fields, else the wrapper, each inside the
// vocabulary; bos_token_id's first id or -1.
inline void read_eos_bos(const JsonFields& f, const JsonFields& top, ModelConfig& cfg) {
  cfg.eos_token_ids = f.get_token_ids("eos_token_id");
  if (cfg.eos_token_ids.empty()) cfg.eos_token_ids = top.get_token_ids("eos_token_id");
  auto bos = f.get_token_ids("bos_token_id");
  cfg.bos_token_id = bos.empty() ? -1 : bos[0];
  for (int id : cfg.eos_token_ids) {
    if (id >= cfg.vocab_size) bad_input(f.field("eos_token_id"), " = ", id, " is outside the vocabulary (", cfg.vocab_size, ")");
  }
}

// The Gated DeltaNet's head counts, sizes and conv kernel (the Qwen line's linear_* keys).
inline void read_deltanet_config(const JsonFields& f, DeltaNetConfig& g) {
  g.n_k_heads = int(f.get_int("linear_num_key_heads", 1, 1024));
  g.n_v_heads = int(f.get_int("linear_num_value_heads", 1, 1024));
  g.k_head_dim = int(f.get_int("linear_key_head_dim", 1, 1024));
  g.v_head_dim = int(f.get_int("linear_value_head_dim", 1, 1024));
  g.conv_kernel = int(f.get_int("linear_conv_kernel_dim", 2, 64));
  if (g.n_v_heads % g.n_k_heads != 0)
    bad_input(f.field("linear_num_value_heads"), " = ", g.n_v_heads, " is not a multiple of linear_num_key_heads = ",
              g.n_k_heads);
}

}  // namespace kestrel
