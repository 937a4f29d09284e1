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

bool ModelConfig::has_moe() const {
  for (bool m : layer_moe) {
    if (m) return true;
  }
  return false;
}

}  // namespace kestrel
