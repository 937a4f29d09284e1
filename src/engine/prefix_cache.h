// PrefixCache: reuse of earlier prompts' work, for hybrid models too.
//
// Attention KV blocks are shared by content: block i of a sequence is identified by a hash
// chained over every token up to its end, so equal hashes mean equal contents. A full block is
// registered when its sequence has written it; when its last user lets go it stays cached,
// unreferenced, until the pool needs it back (least recently used first).
//
// Linear-attention layers have no per-position cache: their recurrent state after P tokens is
// checkpointed into a spare state slot when a sequence reaches a checkpoint position (a multiple
// of `checkpoint_interval`, itself a multiple of the DeltaNet chunk and of the block size). A new
// request resumes from the longest prefix that has both its KV blocks and, where the model has
// linear-attention layers, a checkpoint at exactly that length.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "cache/model_cache.h"

namespace kestrel {

struct PrefixMatch {
  int32_t tokens = 0;                 // prompt tokens whose work is reused
  std::vector<int32_t> blocks;        // KV blocks covering them (already retained for the caller)
  int32_t checkpoint_slot = -1;       // state slot to copy from (hybrid models), -1 if none
  std::string note;                   // why a longer prefix could not be reused, if it could not
};

class PrefixCache {
 public:
  PrefixCache(ModelCache& cache, bool has_state, int32_t checkpoint_interval, int32_t max_checkpoints);
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  int32_t checkpoint_interval() const { return interval_; }

  // The longest reusable prefix of `prompt`, leaving at least one token to compute.
  PrefixMatch match(std::span<const int32_t> prompt);
  // Registers the full blocks of a sequence that now caches `n_cached` of `tokens`.
  void register_blocks(std::span<const int32_t> tokens, const std::vector<int32_t>& blocks, int32_t n_cached);
  // Checkpoints the state of `slot` after tokens[0, n) when n is a checkpoint position.
  // `spare_slots` is how many free slots may be used for checkpoints now.
  void maybe_checkpoint(std::span<const int32_t> tokens, int32_t n, int32_t slot, int32_t spare_slots);

  int32_t cached_blocks() const { return int32_t(block_of_.size()); }
  int32_t checkpoints() const { return int32_t(ckpt_.size()); }
  // Releases every checkpoint slot (e.g. when running sequences need them).
  bool drop_oldest_checkpoint();

 private:
  uint64_t chain_hash(uint64_t prev, std::span<const int32_t> block) const;
  bool keep(int32_t block);
  int32_t evict();

  ModelCache& cache_;
  bool has_state_;
  int32_t interval_, max_checkpoints_;
  const int32_t block_size_;
  std::unordered_map<uint64_t, int32_t> block_of_;  // hash -> block
  std::unordered_map<int32_t, uint64_t> hash_of_;   // block -> hash
  std::list<int32_t> lru_;                          // unreferenced cached blocks, oldest first
  std::unordered_map<int32_t, std::list<int32_t>::iterator> lru_pos_;
  struct Checkpoint {
    int32_t slot;
    std::list<uint64_t>::iterator pos;
  };
  std::unordered_map<uint64_t, Checkpoint> ckpt_;   // prefix hash -> checkpoint
  std::list<uint64_t> ckpt_lru_;
};

}  // namespace kestrel
