// ModelCache: the hybrid cache of one model on one backend.
//
// Attention layers share one pool of fixed-size KV blocks: a sequence holds a block table (the
// same for every attention layer) covering its positions. Linear-attention layers keep a conv
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

// Bytes the cache needs per KV block and per state slot (F32 activations), for memory plans.
struct CacheCosts {
  uint64_t bytes_per_block = 0;
  uint64_t bytes_per_slot = 0;
};
CacheCosts cache_costs(const ModelConfig& cfg, int32_t block_size);

class ModelCache {
 public:
  ModelCache(const ModelConfig& cfg, Ops& ops, CacheSizing sizing);
  ModelCache(const ModelCache&) = delete;
  ModelCache& operator=(const ModelCache&) = delete;

  const CacheSizing& sizing() const { return sizing_; }
  KvLayerView kv(int layer) const;
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

  // A zeroed recurrent-state slot, or -1 when none is free (or the model has no such layers).
  int32_t acquire_slot();
  void release_slot(int32_t slot);
  void reset_slot(int32_t slot);
  // Copies a slot's whole recurrent state (conv + ssm of every linear-attention layer).
  void copy_slot(int32_t dst, int32_t src);
  int32_t free_slots() const { return int32_t(free_slots_.size()); }
  bool needs_slots() const { return has_state_; }

 private:
  Ops& ops_;
  CacheSizing sizing_;
  bool has_state_ = false;
  std::vector<Buffer> k_, v_, conv_, ssm_;  // [n_layers]; empty where the layer has no such cache
  std::vector<int32_t> free_blocks_, free_slots_;
  std::vector<int32_t> refs_;  // [n_blocks]
  BlockHooks hooks_;
};

}  // namespace kestrel
