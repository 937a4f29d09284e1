#include "convert/quant_recipe.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <numeric>

#include "core/error.h"

namespace kestrel {
namespace {

enum class Category { kTokenEmbd, kAttnQ, kAttnV, kAttnK, kAttnQkv, kAttnKvB, kAttnOutput, kFfnUp, kFfnGate, kFfnDown, kOutput, kOther };

bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// llama.cpp's broad categories, tested in its order.
Category category(const std::string& name) {
  if (name == "output.weight") return Category::kOutput;
  if (name == "token_embd.weight" || name == "per_layer_token_embd.weight") return Category::kTokenEmbd;
  if (has(name, "attn_qkv.weight")) return Category::kAttnQkv;
  if (has(name, "attn_kv_b.weight")) return Category::kAttnKvB;
  if (has(name, "attn_v.weight")) return Category::kAttnV;
  if (has(name, "attn_k.weight")) return Category::kAttnK;
  if (has(name, "attn_q.weight")) return Category::kAttnQ;
  if (has(name, "attn_output.weight")) return Category::kAttnOutput;
  if (has(name, "ffn_up")) return Category::kFfnUp;
  if (has(name, "ffn_gate")) return Category::kFfnGate;
  if (has(name, "ffn_down")) return Category::kFfnDown;
  return Category::kOther;
}

bool is_attn_v(Category c) { return c == Category::kAttnV || c == Category::kAttnQkv || c == Category::kAttnKvB; }

// ggml_n_dims: the dimensions up to the last one that is not 1 (here: leading ones of the
// row-major shape do not count).
size_t n_dims(const std::vector<int64_t>& shape) {
  size_t skip = 0;
  while (skip + 1 < shape.size() && shape[skip] == 1) ++skip;
  return shape.size() - skip;
}

}  // namespace

// Which tensors llama-quantize quantizes at all (the rules that concern these architectures).
bool llama_quantizes(const std::string& name, const std::vector<int64_t>& shape) {
  if (n_dims(shape) < 2) return false;
  if (name.size() < 6 || name.compare(name.size() - 6, 6, "weight") != 0) return false;
  for (const char* no : {"_norm.weight", "ffn_gate_inp.weight", "altup", "laurel", "per_layer_model_proj", "ssm_conv1d"})
    if (has(name, no)) return false;
  return true;
}

namespace {

int layer_of(const std::string& name) {
  int l = -1;
  if (std::sscanf(name.c_str(), "blk.%d.", &l) != 1) return -1;
  return l;
}

// Layers that get more bits: the first and last eighth, and every third layer in between.
bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

GgmlType fallback(const std::string& name, int64_t cols, GgmlType t) {
  if (cols % ggml_block_size(t) == 0) return t;
  GgmlType f;
  switch (t) {
    case GgmlType::kQ4_K: f = GgmlType::kQ5_0; break;
    case GgmlType::kQ5_K: f = GgmlType::kQ5_1; break;
    case GgmlType::kQ6_K: f = GgmlType::kQ8_0; break;
    default: unsupported(name, ": rows of ", cols, " values are not whole ", ggml_type_name(t), " blocks, and llama.cpp has no fallback for it");
  }
  return cols % ggml_block_size(f) == 0 ? f : GgmlType::kF16;
}

}  // namespace

std::optional<QuantRecipe> quant_recipe_from_name(const std::string& name) {
  std::string n = name;
  for (char& c : n) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (n == "q4_k_m") return QuantRecipe::kQ4_K_M;
  if (n == "q4_k_s") return QuantRecipe::kQ4_K_S;
  if (n == "q5_k_m") return QuantRecipe::kQ5_K_M;
  if (n == "q6_k") return QuantRecipe::kQ6_K;
  return std::nullopt;
}

const char* quant_recipe_name(QuantRecipe r) {
  switch (r) {
    case QuantRecipe::kQ4_K_M: return "Q4_K_M";
    case QuantRecipe::kQ4_K_S: return "Q4_K_S";
    case QuantRecipe::kQ5_K_M: return "Q5_K_M";
    case QuantRecipe::kQ6_K: return "Q6_K";
  }
  return "?";
}

uint32_t quant_recipe_file_type(QuantRecipe r) {
  switch (r) {
    case QuantRecipe::kQ4_K_S: return 14;
    case QuantRecipe::kQ4_K_M: return 15;
    case QuantRecipe::kQ5_K_M: return 17;
    case QuantRecipe::kQ6_K: return 18;
  }
  return 0;
}

std::vector<GgmlType> quant_recipe_types(QuantRecipe r, const std::vector<RecipeTensor>& tensors, int n_expert,
                                         int n_blocks) {
  const GgmlType base = r == QuantRecipe::kQ6_K ? GgmlType::kQ6_K
                        : r == QuantRecipe::kQ5_K_M ? GgmlType::kQ5_K
                                                    : GgmlType::kQ4_K;
  int n_attn_v = 0;
  bool tied = true;
  for (const RecipeTensor& t : tensors) {
    const Category c = category(t.name);
    n_attn_v += is_attn_v(c);
    tied = tied && c != Category::kOutput;
  }
  // llama-quantize visits the tensors by layer, then by name (its counters depend on that order).
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const int la = layer_of(tensors[a].name), lb = layer_of(tensors[b].name);
    return la != lb ? la < lb : tensors[a].name < tensors[b].name;
  });
  const bool m = r == QuantRecipe::kQ4_K_M || r == QuantRecipe::kQ5_K_M;
  int i_attn_v = 0, i_ffn_down = 0;
  std::vector<GgmlType> out(tensors.size());
  for (size_t i : order) {
    const RecipeTensor& t = tensors[i];
    if (!llama_quantizes(t.name, t.shape)) {
      out[i] = t.plain;
      continue;
    }
    const Category c = category(t.name);
    const int64_t cols = t.shape.back();
    GgmlType type = base;
    if (c == Category::kOutput || (tied && c == Category::kTokenEmbd)) {
      type = cols % ggml_block_size(type) != 0 ? GgmlType::kQ8_0 : GgmlType::kQ6_K;
    } else if (c == Category::kTokenEmbd) {
      // unchanged for the K-quant recipes
    } else if (is_attn_v(c)) {
      if (m && use_more_bits(i_attn_v, n_attn_v)) type = GgmlType::kQ6_K;
      else if (r == QuantRecipe::kQ4_K_S && i_attn_v < 4) type = GgmlType::kQ5_K;
      if (n_expert == 8) type = GgmlType::kQ8_0;
      ++i_attn_v;
    } else if (c == Category::kAttnK) {
      if (n_expert == 8) type = GgmlType::kQ8_0;
    } else if (c == Category::kFfnDown) {
      int layer = i_ffn_down;
      if (n_expert > 1) {
        layer = layer_of(t.name);
        if (layer < 0 || layer >= n_blocks)
          bad_input(t.name, ": the layer of an expert tensor must be in [0, ", n_blocks, ")");
      }
      if (m && use_more_bits(layer, n_blocks)) type = GgmlType::kQ6_K;
      else if (r == QuantRecipe::kQ4_K_S && layer < n_blocks / 8) type = GgmlType::kQ5_K;
      ++i_ffn_down;
    } else if (c == Category::kAttnOutput) {
      if (n_expert == 8 && (r == QuantRecipe::kQ4_K_M || r == QuantRecipe::kQ4_K_S)) type = GgmlType::kQ5_K;
    }
    out[i] = fallback(t.name, cols, type);
  }
  return out;
}

}  // namespace kestrel
