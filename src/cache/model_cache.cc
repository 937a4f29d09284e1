#include "cache/model_cache.h"

#include <algorithm>

namespace kestrel {

CacheCosts cache_costs(const ModelConfig& cfg, int32_t block_size) {
  CacheCosts c;
  const uint64_t kv_row = uint64_t(cfg.attn.n_kv_heads) * cfg.attn.head_dim * 4;
  const int n_attn = cfg.count_layers(LayerKind::kFullAttention) + cfg.count_layers(LayerKind::kSlidingAttention);
  c.bytes_per_block = 2 * kv_row * uint64_t(block_size) * uint64_t(n_attn);
  const int n_lin = cfg.count_layers(LayerKind::kLinearAttention);
  const auto& g = cfg.gdn;
  c.bytes_per_slot = uint64_t(n_lin) * 4 *
                     (uint64_t(g.conv_dim()) * uint64_t(std::max(0, g.conv_kernel - 1)) +
                      uint64_t(g.n_v_heads) * g.k_head_dim * g.v_head_dim);
  return c;
}

ModelCache::ModelCache(const ModelConfig& cfg, Ops& ops, CacheSizing sizing) : ops_(ops), sizing_(sizing) {
  const int L = cfg.n_layers;
  k_.resize(size_t(L));
  v_.resize(size_t(L));
  conv_.resize(size_t(L));
  ssm_.resize(size_t(L));
  const int64_t kv_width = int64_t(cfg.attn.n_kv_heads) * cfg.attn.head_dim;
  const int64_t rows = int64_t(sizing.n_blocks) * sizing.block_size;
  for (int l = 0; l < L; ++l) {
    switch (cfg.layer_kinds[size_t(l)]) {
      case LayerKind::kFullAttention:
      case LayerKind::kSlidingAttention:
        k_[size_t(l)] = ops.alloc(DType::kF32, rows, kv_width);
        v_[size_t(l)] = ops.alloc(DType::kF32, rows, kv_width);
        break;
      case LayerKind::kLinearAttention: {
        const auto& g = cfg.gdn;
        has_state_ = true;
        conv_[size_t(l)] = ops.alloc(DType::kF32, sizing.n_slots, int64_t(g.conv_dim()) * (g.conv_kernel - 1));
        ssm_[size_t(l)] = ops.alloc(DType::kF32, sizing.n_slots, int64_t(g.n_v_heads) * g.k_head_dim * g.v_head_dim);
        break;
      }
    }
  }
  // Hand out low ids first: pop_back from a descending list.
  for (int32_t b = sizing.n_blocks - 1; b >= 0; --b) free_blocks_.push_back(b);
  refs_.assign(size_t(sizing.n_blocks), 0);
  if (has_state_) {
    for (int32_t s = sizing.n_slots - 1; s >= 0; --s) free_slots_.push_back(s);
  }
}

KvLayerView ModelCache::kv(int layer) const { return {k_[size_t(layer)].view(), v_[size_t(layer)].view()}; }

StateLayerView ModelCache::state(int layer) const {
  return {conv_[size_t(layer)].view(), ssm_[size_t(layer)].view()};
}

int32_t ModelCache::free_blocks() const {
  return int32_t(free_blocks_.size()) + (hooks_.evictable ? hooks_.evictable() : 0);
}

bool ModelCache::reserve(std::vector<int32_t>& table, int64_t n_positions) {
  const int64_t need = (n_positions + sizing_.block_size - 1) / sizing_.block_size;
  const int64_t extra = need - int64_t(table.size());
  if (extra <= 0) return true;
  if (extra > int64_t(free_blocks())) return false;
  for (int64_t i = 0; i < extra; ++i) {
    int32_t b;
    if (!free_blocks_.empty()) {
      b = free_blocks_.back();
      free_blocks_.pop_back();
    } else {
      b = hooks_.evict();
      KCHECK(b >= 0);
    }
    refs_[size_t(b)] = 1;
    table.push_back(b);
  }
  return true;
}

void ModelCache::release(std::vector<int32_t>& table) {
  for (auto it = table.rbegin(); it != table.rend(); ++it) {
    const int32_t b = *it;
    KCHECK(refs_[size_t(b)] > 0);
    if (--refs_[size_t(b)] == 0 && !(hooks_.keep && hooks_.keep(b))) free_blocks_.push_back(b);
  }
  table.clear();
}

int32_t ModelCache::acquire_slot() {
  if (!has_state_ || free_slots_.empty()) return -1;
  int32_t slot = free_slots_.back();
  free_slots_.pop_back();
  reset_slot(slot);
  return slot;
}

void ModelCache::release_slot(int32_t slot) {
  if (slot >= 0) free_slots_.push_back(slot);
}

void ModelCache::copy_slot(int32_t dst, int32_t src) {
  for (size_t l = 0; l < conv_.size(); ++l) {
    if (!conv_[l].empty()) ops_.copy_rows(conv_[l], dst, conv_[l], src, 1);
    if (!ssm_[l].empty()) ops_.copy_rows(ssm_[l], dst, ssm_[l], src, 1);
  }
}

void ModelCache::reset_slot(int32_t slot) {
  for (size_t l = 0; l < conv_.size(); ++l) {
    if (!conv_[l].empty()) ops_.zero_rows(conv_[l], slot);
    if (!ssm_[l].empty()) ops_.zero_rows(ssm_[l], slot);
  }
}

}  // namespace kestrel
