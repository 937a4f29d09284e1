// llama.cpp's mixed K-quant recipes (llama-quantize Q4_K_M, Q4_K_S, Q5_K_M, Q6_K without an
// importance matrix): which ggml type each tensor of a file gets. Kestrel's own code; the rules
// are those of llama.cpp's llama_tensor_get_type (src/llama-quant.cpp), restricted to these four
// file types, and documented in docs/gguf.md:
//
// - only tensors of 2+ dimensions (trailing ones ignored, as ggml_n_dims) whose names end in
//   "weight" are quantized, and never norms, MoE routers (ffn_gate_inp), ssm_conv1d or Gemma's
//   per_layer_model_proj; the rest keep the type a plain conversion gives them;
// - output.weight, and token_embd / per_layer_token_embd when there is no output.weight (tied),
//   take Q6_K (Q8_0 when their rows are not whole 256-blocks);
// - attn_v / attn_qkv (counted in file order over the layers that have one): Q4_K_M and Q5_K_M
//   use Q6_K on "more bits" layers (the first and last eighth and every third in between), Q4_K_S
//   uses Q5_K on the first four; with exactly 8 experts attn_v, attn_qkv and attn_k are Q8_0;
// - ffn_down (every ffn_down* tensor, by its layer): Q4_K_M and Q5_K_M use Q6_K on more-bits
//   layers, Q4_K_S uses Q5_K on the first eighth of the layers;
// - with exactly 8 experts, attn_output is Q5_K under Q4_K_M / Q4_K_S;
// - a type whose blocks do not divide the rows falls back: Q4_K -> Q5_0, Q5_K -> Q5_1,
//   Q6_K -> Q8_0, then F16 if that still does not divide (kestrel writes all of them).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "quant/ggml_type.h"

namespace kestrel {

enum class QuantRecipe : uint8_t { kQ4_K_M, kQ4_K_S, kQ5_K_M, kQ6_K };

// Whether llama-quantize quantizes this tensor at all (the first rule above).
bool llama_quantizes(const std::string& gguf_name, const std::vector<int64_t>& shape);

// "q4_k_m" / "Q4_K_M" etc.; nullopt for anything else.
std::optional<QuantRecipe> quant_recipe_from_name(const std::string& name);
const char* quant_recipe_name(QuantRecipe r);     // "Q4_K_M"
uint32_t quant_recipe_file_type(QuantRecipe r);   // llama.cpp's LlamaFileType (general.file_type)

struct RecipeTensor {
  std::string name;             // GGUF name
  std::vector<int64_t> shape;   // row-major
  GgmlType plain;               // the type a plain (bf16) conversion stores it in
};

// The type of every tensor (same order as `tensors`). `n_expert`: the model's expert count (0
// for dense); `n_blocks`: its block count.
std::vector<GgmlType> quant_recipe_types(QuantRecipe r, const std::vector<RecipeTensor>& tensors, int n_expert,
                                         int n_blocks);

}  // namespace kestrel
