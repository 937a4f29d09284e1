#include "cache/model_cache.h"

#include <algorithm>

namespace kestrel {

int32_t ring_rows(int window, int32_t block_size) {
  return int32_t((int64_t(window) + block_size - 1) / block_size + 1) * block_size;
}

CacheCosts cache_costs(const ModelConfig& cfg, int32_t block_size, size_t kv_elem_bytes) {
  CacheCosts c;
  for (int l = 0; l < cfg.n_layers; ++l) {
    if (!cfg.is_attention(l) || cfg.kv_source(l) != l) continue;  // KV-shared layers own no cache
    const auto& a = cfg.attn_for(l);
    const uint64_t row = 2 * uint64_t(a.n_kv_heads) * uint64_t(a.head_dim) * kv_elem_bytes;
    if (cfg.window_for(l) > 0) {  // a ring per sequence
      c.bytes_per_slot += row * uint64_t(ring_rows(cfg.window_for(l), block_size));
      continue;
    }
    c.bytes_per_block += row * uint64_t(block_size);
    if (!cfg.layer_attn.empty())
      c.bytes_per_block += uint64_t(cfg.layer_attn[size_t(l)].index_key_dim) * 4 * uint64_t(block_size);
  }
  for (int64_t n : cfg.layer_aux_state) c.bytes_per_slot += uint64_t(n) * 4;
  c.bytes_per_slot += uint64_t(std::max(cfg.token_context, 0)) * 4;  // the slot's token context (I32)
  const int n_lin = cfg.count_layers(LayerKind::kLinearAttention);
  const auto& g = cfg.gdn;
  c.bytes_per_slot += uint64_t(n_lin) * 4 *
                     (uint64_t(g.conv_dim()) * uint64_t(std::max(0, g.conv_kernel - 1)) +
                      uint64_t(g.n_v_heads) * g.k_head_dim * g.v_head_dim);
  return c;
}

ModelCache::ModelCache(const ModelConfig& cfg, Ops& ops, CacheSizing sizing)
    : ops_(ops), sizing_(sizing), has_state_(cfg.has_sequence_state()) {
  const int L = cfg.n_layers;
  k_.resize(size_t(L));
  index_k_.resize(size_t(L));
  ring_rows_.assign(size_t(L), 0);
  v_.resize(size_t(L));
  conv_.resize(size_t(L));
  ssm_.resize(size_t(L));
  const int64_t rows = int64_t(sizing.n_blocks) * sizing.block_size;
  for (int l = 0; l < L; ++l) {
    switch (cfg.layer_kinds[size_t(l)]) {
      case LayerKind::kFullAttention:
      case LayerKind::kSlidingAttention: {
        if (cfg.kv_source(l) != l) break;  // reads another layer's cache
        const int64_t kv_width = int64_t(cfg.attn_for(l).n_kv_heads) * cfg.attn_for(l).head_dim;
        int64_t layer_rows = rows;
        if (cfg.window_for(l) > 0) {  // sliding: a ring of the window's blocks per sequence slot
          ring_rows_[size_t(l)] = ring_rows(cfg.window_for(l), sizing.block_size);
          layer_rows = int64_t(sizing.n_slots) * ring_rows_[size_t(l)];
        }
        k_[size_t(l)] = ops.alloc(ops.kv_cache_dtype(), layer_rows, kv_width);
        v_[size_t(l)] = ops.alloc(ops.kv_cache_dtype(), layer_rows, kv_width);
        if (!cfg.layer_attn.empty() && cfg.layer_attn[size_t(l)].index_key_dim > 0)
          index_k_[size_t(l)] = ops.alloc(ops.activation_dtype(), rows, cfg.layer_attn[size_t(l)].index_key_dim);
        break;
      }
      case LayerKind::kLinearAttention: {
        const auto& g = cfg.gdn;
        conv_[size_t(l)] = ops.alloc(ops.activation_dtype(), sizing.n_slots, int64_t(g.conv_dim()) * (g.conv_kernel - 1));
        ssm_[size_t(l)] = ops.alloc(ops.activation_dtype(), sizing.n_slots, int64_t(g.n_v_heads) * g.k_head_dim * g.v_head_dim);
        break;
      }
    }
  }
  // Hand out low ids first: pop_back from a descending list.
  aux_.resize(size_t(L));
  for (size_t l = 0; l < cfg.layer_aux_state.size(); ++l) {
    if (cfg.layer_aux_state[l] > 0) aux_[l] = ops.alloc(ops.activation_dtype(), sizing.n_slots, cfg.layer_aux_state[l]);
  }
  if (cfg.token_context > 0) token_ctx_ = ops.alloc(DType::kI32, sizing.n_slots, cfg.token_context);
  kv_source_.resize(size_t(L));
  for (int l = 0; l < L; ++l) kv_source_[size_t(l)] = cfg.kv_source(l);
  for (int32_t b = sizing.n_blocks - 1; b >= 0; --b) free_blocks_.push_back(b);
  refs_.assign(size_t(sizing.n_blocks), 0);
  if (has_state_) {
    for (int32_t s = sizing.n_slots - 1; s >= 0; --s) free_slots_.push_back(s);
  }
}

KvLayerView ModelCache::kv(int layer) const {
  const size_t src = size_t(kv_source_[size_t(layer)]);
  return {k_[src].view(), v_[src].view(), index_k_[src].view(), ring_rows_[src]};
}

StateLayerView ModelCache::state(int layer) const {
  return {conv_[size_t(layer)].view(), ssm_[size_t(layer)].view(), aux_[size_t(layer)].view()};
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
    if (!aux_[l].empty()) ops_.copy_rows(aux_[l], dst, aux_[l], src, 1);
    if (const int64_t r = ring_rows_[l]; r > 0 && !k_[l].empty()) {  // a sliding layer's ring
      ops_.copy_rows(k_[l], dst * r, k_[l], src * r, r);
      ops_.copy_rows(v_[l], dst * r, v_[l], src * r, r);
    }
  }
  if (!token_ctx_.empty()) ops_.copy_rows(token_ctx_, dst, token_ctx_, src, 1);
}

void ModelCache::reset_slot(int32_t slot) {
  for (size_t l = 0; l < conv_.size(); ++l) {
    if (!conv_[l].empty()) ops_.zero_rows(conv_[l], slot);
    if (!ssm_[l].empty()) ops_.zero_rows(ssm_[l], slot);
    if (!aux_[l].empty()) ops_.zero_rows(aux_[l], slot);
  }
}

}  // namespace kestrel
