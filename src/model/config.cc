#include "model/config.h"

namespace kestrel {

const char* layer_kind_name(LayerKind kind) {
  switch (kind) {
    case LayerKind::kFullAttention: return "full_attention";
    case LayerKind::kSlidingAttention: return "sliding_attention";
    case LayerKind::kLinearAttention: return "linear_attention";
  }
  return "?";
}

int ModelConfig::count_layers(LayerKind kind) const {
  int n = 0;
  for (LayerKind k : layer_kinds) n += k == kind;
  return n;
}

const AttentionConfig& ModelConfig::attn_for(int l) const {
  return layer_attn.empty() ? attn : layer_attn[size_t(l)].attn;
}

int ModelConfig::kv_source(int l) const {
  if (layer_attn.empty() || layer_attn[size_t(l)].kv_source < 0) return l;
  return layer_attn[size_t(l)].kv_source;
}

int ModelConfig::window_for(int l) const { return layer_attn.empty() ? 0 : layer_attn[size_t(l)].window; }

bool ModelConfig::has_sequence_state() const {
  for (int l = 0; l < n_layers; ++l) {
    if (layer_kinds[size_t(l)] == LayerKind::kLinearAttention) return true;
    if (window_for(l) > 0 && kv_source(l) == l) return true;
  }
  for (int64_t n : layer_aux_state) {
    if (n > 0) return true;
  }
  return token_context > 0;
}

bool ModelConfig::has_moe() const {
  for (bool m : layer_moe) {
    if (m) return true;
  }
  return false;
}

}  // namespace kestrel
