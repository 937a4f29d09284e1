// ModelCache: the hybrid cache of one model on one backend.
//
// Full-attention layers share one pool of fixed-size KV blocks: a sequence holds a block table
// (the same for every such layer) covering its positions. Sliding-window layers keep no blocks
// of that pool: each sequence slot has a ring of ceil(window / block_size) + 1 blocks' rows per
// sliding layer, overwritten as the sequence advances, so their memory does not grow with the
// context. Each attention layer's K/V rows have
// that layer's own width (n_kv_heads x head_dim, which may differ between sliding and full
// layers); a KV-shared layer owns no cache and kv() returns its source layer's. K/V rows take
// the backend's kv_cache_dtype() (the activation dtype, or BF16). Linear-attention layers keep a conv
// state and a recurrent state per sequence slot. Both are sized once, up front.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "model/config.h"
#include "ops/ops.h"

namespace kestrel {

struct CacheSizing {
  int32_t n_blocks = 0;     // KV blocks in the pool (each block_size positions, every attention layer)
  int32_t block_size = 16;
  int32_t n_slots = 0;      // recurrent-state slots (sequences that can be live at once)
};

// Bytes the cache needs per KV block and per state slot (F32 activations; K/V rows of
// kv_elem_bytes per element: 4 for F32, 2 for a BF16 cache), for memory plans.
struct CacheCosts {
  uint64_t bytes_per_block = 0;
  uint64_t bytes_per_slot = 0;
};
CacheCosts cache_costs(const ModelConfig& cfg, int32_t block_size, size_t kv_elem_bytes = 4);
// Rows of one sequence's ring in a sliding layer: ceil(window / block_size) + 1 blocks.
int32_t ring_rows(int window, int32_t block_size);

class ModelCache {
 public:
  ModelCache(const ModelConfig& cfg, Ops& ops, CacheSizing sizing);
  ModelCache(const ModelCache&) = delete;
  ModelCache& operator=(const ModelCache&) = delete;

  const CacheSizing& sizing() const { return sizing_; }
  KvLayerView kv(int layer) const;  // the source layer's cache for a KV-shared layer
  StateLayerView state(int layer) const;

  // Grows `table` so it covers n_positions; false (table unchanged) when the pool is exhausted.
  // New blocks have one reference (the table's).
  bool reserve(std::vector<int32_t>& table, int64_t n_positions);
  // Drops the table's reference to each of its blocks and clears it.
  void release(std::vector<int32_t>& table);
  // Another reference to a block (a sequence sharing a cached prefix block).
  void retain(int32_t block) { ++refs_[size_t(block)]; }
  int32_t refs(int32_t block) const { return refs_[size_t(block)]; }
  // Blocks that can be handed out now: free, plus those the prefix cache would give back.
  int32_t free_blocks() const;

  // Prefix-cache hooks. keep(block) is asked when a block's last reference goes: true keeps its
  // contents (the block waits, unreferenced, to be reused or evicted). evict() is asked when the
  // free list is empty: it returns a kept block to reuse, or -1. evictable() counts them.
  struct BlockHooks {
    std::function<bool(int32_t)> keep;
    std::function<int32_t()> evict;
    std::function<int32_t()> evictable;
  };
  void set_block_hooks(BlockHooks hooks) { hooks_ = std::move(hooks); }
  // Takes a kept (unreferenced) block back into use with one reference.
  void revive(int32_t block) { refs_[size_t(block)] = 1; }

  // A zeroed per-sequence state slot (recurrent state, sliding-window rings), or -1 when none is
  // free (or the model has no such layers).
  int32_t acquire_slot();
  void release_slot(int32_t slot);
  void reset_slot(int32_t slot);
  // Copies a slot's whole recurrent state (conv + ssm of every linear-attention layer).
  void copy_slot(int32_t dst, int32_t src);
  int32_t free_slots() const { return int32_t(free_slots_.size()); }
  bool needs_slots() const { return has_state_; }
  // Per-slot token context, I32 [n_slots, cfg.token_context] on the backend: the last ids of each
  // slot's sequence, oldest first, meaningful once it has cached tokens (the token_windows op
  // reads and moves it on). Empty when the model keeps none.
  Tensor token_context() const { return token_ctx_.view(); }

 private:
  Ops& ops_;
  CacheSizing sizing_;
  bool has_state_ = false;
  std::vector<Buffer> k_, v_, conv_, ssm_;  // [n_layers]; empty where the layer has no such cache
  std::vector<Buffer> index_k_, aux_;       // [n_layers]; QSA indexer keys, extra conv state
  Buffer token_ctx_;                        // I32 [n_slots, token_context]
  std::vector<int32_t> free_blocks_, free_slots_;
  std::vector<int32_t> refs_;  // [n_blocks]
  BlockHooks hooks_;
  std::vector<int> kv_source_;  // [n_layers]
  std::vector<int32_t> ring_rows_;  // [n_layers]; > 0 for sliding layers' rings
};

}  // namespace kestrel
