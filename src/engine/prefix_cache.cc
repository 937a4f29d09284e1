#include "engine/prefix_cache.h"

#include "core/error.h"

namespace kestrel {

PrefixCache::PrefixCache(ModelCache& cache, bool has_state, int32_t checkpoint_interval, int32_t max_checkpoints)
    : cache_(cache), has_state_(has_state), interval_(checkpoint_interval), max_checkpoints_(max_checkpoints),
      block_size_(cache.sizing().block_size) {
  KCHECK(interval_ > 0 && interval_ % block_size_ == 0 && interval_ % 64 == 0);
  cache_.set_block_hooks({.keep = [this](int32_t b) { return keep(b); },
                          .evict = [this] { return evict(); },
                          .evictable = [this] { return int32_t(lru_.size()); }});
}

uint64_t PrefixCache::chain_hash(uint64_t prev, std::span<const int32_t> block) const {
  // FNV-1a over the previous hash and the block's tokens, then a final mix.
  uint64_t h = 1469598103934665603ull ^ prev;
  auto mix = [&](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  mix(prev);
  for (int32_t t : block) mix(uint64_t(uint32_t(t)));
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h;
}

bool PrefixCache::keep(int32_t block) {
  if (!hash_of_.count(block)) return false;
  lru_.push_back(block);
  lru_pos_[block] = std::prev(lru_.end());
  return true;
}

int32_t PrefixCache::evict() {
  if (lru_.empty()) return -1;
  int32_t b = lru_.front();
  lru_.pop_front();
  lru_pos_.erase(b);
  auto h = hash_of_.find(b);
  if (h != hash_of_.end()) {
    block_of_.erase(h->second);
    hash_of_.erase(h);
  }
  return b;
}

PrefixMatch PrefixCache::match(std::span<const int32_t> prompt) {
  PrefixMatch m;
  const int64_t usable = int64_t(prompt.size()) - 1;  // at least one token must be computed
  std::vector<int32_t> blocks;
  std::vector<uint64_t> hashes;
  uint64_t h = 0;
  for (int64_t end = block_size_; end <= usable; end += block_size_) {
    h = chain_hash(h, prompt.subspan(size_t(end - block_size_), size_t(block_size_)));
    auto it = block_of_.find(h);
    if (it == block_of_.end()) break;
    blocks.push_back(it->second);
    hashes.push_back(h);
  }
  int32_t n_blocks = int32_t(blocks.size());
  if (has_state_) {
    // the longest checkpoint position covered by the cached blocks
    int32_t best = 0;
    for (int32_t nb = n_blocks; nb > 0; --nb) {
      const int32_t pos = nb * block_size_;
      if (pos % interval_ != 0) continue;
      auto c = ckpt_.find(hashes[size_t(nb - 1)]);
      if (c != ckpt_.end()) {
        best = nb;
        m.checkpoint_slot = c->second.slot;
        ckpt_lru_.splice(ckpt_lru_.end(), ckpt_lru_, c->second.pos);
        break;
      }
    }
    if (best < n_blocks) {
      m.note = cat("prompt shares ", n_blocks * block_size_, " tokens of cached KV blocks, but the recurrent state is ",
                   best ? cat("checkpointed only at ", best * block_size_, " tokens") : std::string("not checkpointed"),
                   " (checkpoints every ", interval_, " tokens)");
    }
    n_blocks = best;
  }
  for (int32_t i = 0; i < n_blocks; ++i) {
    const int32_t b = blocks[size_t(i)];
    if (cache_.refs(b) == 0) {  // waiting in the LRU: take it back
      auto pos = lru_pos_.find(b);
      KCHECK(pos != lru_pos_.end());
      lru_.erase(pos->second);
      lru_pos_.erase(pos);
      cache_.revive(b);
    } else {
      cache_.retain(b);
    }
    m.blocks.push_back(b);
  }
  m.tokens = n_blocks * block_size_;
  return m;
}

void PrefixCache::register_blocks(std::span<const int32_t> tokens, const std::vector<int32_t>& blocks, int32_t n_cached) {
  uint64_t h = 0;
  const int32_t full = std::min<int32_t>(n_cached / block_size_, int32_t(blocks.size()));
  for (int32_t i = 0; i < full; ++i) {
    h = chain_hash(h, tokens.subspan(size_t(i) * size_t(block_size_), size_t(block_size_)));
    const int32_t b = blocks[size_t(i)];
    if (hash_of_.count(b)) continue;       // already registered (shared or registered earlier)
    if (block_of_.count(h)) continue;      // same content cached in another block
    block_of_[h] = b;
    hash_of_[b] = h;
  }
}

void PrefixCache::maybe_checkpoint(std::span<const int32_t> tokens, int32_t n, int32_t slot, int32_t spare_slots) {
  if (!has_state_ || n <= 0 || n % interval_ != 0 || max_checkpoints_ <= 0) return;
  uint64_t h = 0;
  for (int32_t end = block_size_; end <= n; end += block_size_)
    h = chain_hash(h, tokens.subspan(size_t(end - block_size_), size_t(block_size_)));
  if (ckpt_.count(h)) return;
  if (int32_t(ckpt_.size()) >= max_checkpoints_ || spare_slots <= 0) {
    if (!drop_oldest_checkpoint()) return;
  }
  const int32_t dst = cache_.acquire_slot();
  if (dst < 0) return;
  cache_.copy_slot(dst, slot);
  ckpt_lru_.push_back(h);
  ckpt_[h] = {dst, std::prev(ckpt_lru_.end())};
}

bool PrefixCache::drop_oldest_checkpoint() {
  if (ckpt_lru_.empty()) return false;
  const uint64_t h = ckpt_lru_.front();
  ckpt_lru_.pop_front();
  cache_.release_slot(ckpt_.at(h).slot);
  ckpt_.erase(h);
  return true;
}

}  // namespace kestrel
