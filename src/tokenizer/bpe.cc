#include "tokenizer/bpe.h"

#include <algorithm>
#include <atomic>
#include <functional>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace kestrel::tok {
namespace {

constexpr uint64_t kEmpty = UINT64_MAX;
constexpr uint64_t kNoMerge = UINT64_MAX;
constexpr int kPosBits = 40;  // heap entries: rank << 40 | symbol position
constexpr uint64_t kPosMask = (uint64_t{1} << kPosBits) - 1;
constexpr size_t kCacheSlots = 32768;
constexpr size_t kCacheMaxWord = 256;  // bytes; longer words are not cached
constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581, SentencePiece's space

std::atomic<uint64_t> next_owner{1};

inline uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

inline uint64_t mix(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  return k;
}

struct CacheSlot {
  uint64_t owner = 0;
  uint64_t hash = 0;
  std::string word;
  std::vector<int32_t> ids;
};

std::vector<CacheSlot>& word_cache() {
  thread_local std::vector<CacheSlot> cache(kCacheSlots);
  return cache;
}

}  // namespace

void Bpe::MergeTable::build(size_t n) {
  size_t capacity = 16;
  while (capacity < n * 2) capacity *= 2;
  keys.assign(capacity, kEmpty);
  values.assign(capacity, 0);
  mask = capacity - 1;
}

void Bpe::MergeTable::insert(uint64_t key, uint64_t value) {
  for (uint64_t i = mix(key) & mask;; i = (i + 1) & mask) {
    if (keys[i] == kEmpty || keys[i] == key) {
      keys[i] = key;
      values[i] = value;  // a repeated merge keeps the last rank, as Hugging Face does
      return;
    }
  }
}

uint64_t Bpe::MergeTable::find(uint64_t key) const {
  for (uint64_t i = mix(key) & mask;; i = (i + 1) & mask) {
    if (keys[i] == key) return values[i];
    if (keys[i] == kEmpty) return kNoMerge;
  }
}

Bpe::Bpe(BpeParams p)
    : vocab_(std::move(p.vocab)),
      byte_level_(p.byte_level),
      byte_fallback_(p.byte_fallback),
      ignore_merges_(p.ignore_merges),
      fuse_unk_(p.fuse_unk),
      cache_owner_(next_owner++) {
  const std::string& what = p.what;
  auto lookup = [&](const std::string& token, size_t index) {
    auto it = vocab_.find(token);
    if (it == vocab_.end()) {
      bad_input(what, ": model.merges[", index, "] names token '", token, "', which is not in model.vocab");
    }
    return it->second;
  };
  if (p.merges.size() >= (size_t{1} << 23)) {
    unsupported(what, ": ", p.merges.size(), " merges is more than kestrel supports (8388608)");
  }
  merges_.build(p.merges.size());
  for (size_t i = 0; i < p.merges.size(); ++i) {
    const auto& [a, b] = p.merges[i];
    int32_t left = lookup(a, i), right = lookup(b, i), merged = lookup(a + b, i);
    merges_.insert(pair_key(left, right), (static_cast<uint64_t>(i) << 32) | static_cast<uint32_t>(merged));
  }
  if (!p.unk_token.empty()) {
    auto it = vocab_.find(p.unk_token);
    if (it == vocab_.end()) bad_input(what, ": model.unk_token '", p.unk_token, "' is not in model.vocab");
    unk_id_ = it->second;
  }
  std::fill(std::begin(byte_ids_), std::end(byte_ids_), -1);
  char name[8];
  for (int b = 0; b < 256; ++b) {
    std::string token;
    if (byte_level_) {
      append_utf8(token, byte_level_char(static_cast<uint8_t>(b)));
    } else if (byte_fallback_) {
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      token = name;
    } else {
      break;
    }
    auto it = vocab_.find(token);
    if (it == vocab_.end()) {
      bad_input(what, ": model.vocab has no token '", token, "' for byte ", b, byte_level_
                ? " (a ByteLevel tokenizer needs all 256 byte tokens)"
                : " (byte_fallback needs all 256 <0xNN> tokens)");
    }
    byte_ids_[b] = it->second;
  }
  if (!byte_level_) {
    bmp_ids_.assign(0x10000, -1);
    for (const auto& [token, id] : vocab_) {
      size_t i = 0;
      if (token.empty()) continue;
      char32_t cp = next_code_point(token, i);
      if (i == token.size() && cp < 0x10000) bmp_ids_[cp] = id;
      // Characters that some token joins to a following U+2581.
      for (size_t at = token.find(kSpaceMark, 1); at != std::string::npos; at = token.find(kSpaceMark, at + 1)) {
        size_t prev = at - 1;
        while (prev > 0 && (static_cast<unsigned char>(token[prev]) & 0xC0) == 0x80) --prev;
        size_t k = prev;
        char32_t before = next_code_point(token, k);
        if (before != 0x2581) joins_space_.push_back(before);
      }
    }
    std::sort(joins_space_.begin(), joins_space_.end());
    joins_space_.erase(std::unique(joins_space_.begin(), joins_space_.end()), joins_space_.end());
    split_at_spaces_ = p.allow_space_cut && bmp_ids_[0x2581] >= 0;
  }
}

void Bpe::initial_symbols(std::string_view word, std::vector<int32_t>& ids) const {
  if (byte_level_) {
    for (unsigned char b : word) ids.push_back(byte_ids_[b]);
    return;
  }
  bool last_unk = false;
  for (size_t i = 0; i < word.size();) {
    size_t start = i;
    char32_t cp = next_code_point(word, i);
    int32_t id = -1;
    if (cp < 0x10000) {
      id = bmp_ids_[cp];
    } else {
      auto it = vocab_.find(std::string(word.substr(start, i - start)));
      if (it != vocab_.end()) id = it->second;
    }
    if (id >= 0) {
      ids.push_back(id);
      last_unk = false;
    } else if (byte_fallback_) {
      for (size_t k = start; k < i; ++k) ids.push_back(byte_ids_[static_cast<unsigned char>(word[k])]);
      last_unk = false;
    } else if (unk_id_ >= 0) {
      if (!(fuse_unk_ && last_unk)) ids.push_back(unk_id_);
      last_unk = true;
    }
    // No unk token and no fallback: the character is dropped, as Hugging Face does.
  }
}

void Bpe::merge(std::vector<int32_t>& ids) const {
  const size_t n = ids.size();
  if (n < 2) return;
  thread_local std::vector<uint32_t> prev, next;  // [n] linked list of live symbols
  thread_local std::vector<uint64_t> heap;        // min-heap of rank << 40 | position
  prev.resize(n);
  next.resize(n);
  heap.clear();
  for (size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<uint32_t>(i - 1);  // wraps to UINT32_MAX for the first
    next[i] = static_cast<uint32_t>(i + 1);
  }
  auto push = [&](size_t pos, uint32_t right) {
    uint64_t m = merges_.find(pair_key(ids[pos], ids[right]));
    if (m != kNoMerge) {
      heap.push_back(((m >> 32) << kPosBits) | pos);
      std::push_heap(heap.begin(), heap.end(), std::greater<>());
    }
  };
  for (size_t i = 0; i + 1 < n; ++i) {
    uint64_t m = merges_.find(pair_key(ids[i], ids[i + 1]));
    if (m != kNoMerge) heap.push_back(((m >> 32) << kPosBits) | i);
  }
  std::make_heap(heap.begin(), heap.end(), std::greater<>());
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    uint64_t top = heap.back();
    heap.pop_back();
    size_t pos = top & kPosMask;
    uint64_t rank = top >> kPosBits;
    if (ids[pos] < 0) continue;  // merged into its left neighbour already
    uint32_t right = next[pos];
    if (right >= n) continue;
    uint64_t m = merges_.find(pair_key(ids[pos], ids[right]));
    if (m == kNoMerge || (m >> 32) != rank) continue;  // stale: a neighbour changed
    ids[pos] = static_cast<int32_t>(m & 0xFFFFFFFFu);
    ids[right] = -1;
    next[pos] = next[right];
    if (next[pos] < n) prev[next[pos]] = static_cast<uint32_t>(pos);
    if (prev[pos] < n) push(prev[pos], static_cast<uint32_t>(pos));
    if (next[pos] < n) push(pos, next[pos]);
  }
  ids.erase(std::remove(ids.begin(), ids.end(), -1), ids.end());
}

void Bpe::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    auto it = vocab_.find(byte_level_ ? byte_level_encode(word) : std::string(word));
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (!split_at_spaces_ || word.size() <= 16) {
    encode_piece(word, out);
    return;
  }
  size_t piece_begin = 0;
  size_t pos = 0;
  while ((pos = word.find(kSpaceMark, pos + 1)) != std::string_view::npos) {
    // The code point before the mark: walk back over continuation bytes.
    size_t prev = pos - 1;
    while (prev > 0 && (static_cast<unsigned char>(word[prev]) & 0xC0) == 0x80) --prev;
    size_t k = prev;
    char32_t cp = next_code_point(word, k);
    if (cp == 0x2581 || cp >= 0x10000 || bmp_ids_[cp] < 0 ||
        std::binary_search(joins_space_.begin(), joins_space_.end(), cp)) {
      continue;
    }
    encode_piece(word.substr(piece_begin, pos - piece_begin), out);
    piece_begin = pos;
  }
  encode_piece(word.substr(piece_begin), out);
}

void Bpe::encode_piece(std::string_view word, std::vector<int32_t>& out) const {
  if (word.size() == 1 && byte_level_) {
    out.push_back(byte_ids_[static_cast<unsigned char>(word[0])]);
    return;
  }
  CacheSlot* slot = nullptr;
  uint64_t hash = 0;
  if (word.size() <= kCacheMaxWord) {
    hash = std::hash<std::string_view>()(word);
    slot = &word_cache()[hash & (kCacheSlots - 1)];
    if (slot->owner == cache_owner_ && slot->hash == hash && slot->word == word) {
      out.insert(out.end(), slot->ids.begin(), slot->ids.end());
      return;
    }
  }
  thread_local std::vector<int32_t> ids;
  ids.clear();
  initial_symbols(word, ids);
  merge(ids);
  out.insert(out.end(), ids.begin(), ids.end());
  if (slot) {
    slot->owner = cache_owner_;
    slot->hash = hash;
    slot->word.assign(word);
    slot->ids.assign(ids.begin(), ids.end());
  }
}

}  // namespace kestrel::tok
