// The BPE model: turns one pre-tokenized word into token ids.
//
// Merge ranks live in an open-addressing table keyed by the pair of ids; a word is merged with a
// binary heap over a linked list of symbols (lowest rank first, leftmost on ties, exactly like
// Hugging Face), O(n log n) in the word's length. Results for short words are kept in a per-thread
// direct-mapped cache, so repeated words cost one hash and one compare.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kestrel::tok {

struct BpeParams {
  std::unordered_map<std::string, int32_t> vocab;          // token text as in tokenizer.json → id
  std::vector<std::pair<std::string, std::string>> merges; // in rank order
  bool byte_level = false;      // words are raw bytes; initial symbols are the byte-alphabet tokens
  bool byte_fallback = false;   // unknown characters become <0xNN> tokens
  bool ignore_merges = false;   // a word that is itself in the vocab is taken whole
  bool fuse_unk = false;
  std::string unk_token;        // empty: none
  bool allow_space_cut = true;  // the U+2581 cut below (tests turn it off to check it changes nothing)
  std::string what = "tokenizer.json";  // names the file in errors
};

class Bpe {
 public:
  // Validates and indexes the model; errors name the merge or token at fault.
  explicit Bpe(BpeParams params);
  Bpe(Bpe&&) noexcept = default;
  Bpe& operator=(Bpe&&) noexcept = default;
  Bpe(const Bpe&) = delete;

  // Appends the ids of `word` (raw bytes in byte-level mode, else UTF-8 text) to out.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  const std::unordered_map<std::string, int32_t>& vocab() const { return vocab_; }
  int32_t byte_fallback_id(uint8_t b) const { return byte_ids_[b]; }

 private:
  struct MergeTable {
    std::vector<uint64_t> keys;    // [capacity] (left << 32 | right), kEmpty when unused
    std::vector<uint64_t> values;  // [capacity] (rank << 32 | merged id)
    uint64_t mask = 0;
    void build(size_t n);
    void insert(uint64_t key, uint64_t value);
    // (rank << 32 | merged id), or UINT64_MAX when the pair does not merge.
    uint64_t find(uint64_t key) const;
  };

  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
  void initial_symbols(std::string_view word, std::vector<int32_t>& ids) const;
  void merge(std::vector<int32_t>& ids) const;

  std::unordered_map<std::string, int32_t> vocab_;
  MergeTable merges_;
  bool byte_level_, byte_fallback_, ignore_merges_, fuse_unk_;
  int32_t unk_id_ = -1;
  int32_t byte_ids_[256];            // byte-level: each byte's token; fallback: <0xNN>; else -1
  std::vector<int32_t> bmp_ids_;     // [0x10000] id of each one-code-point token, -1 if none
  uint64_t cache_owner_;
  // SentencePiece-style vocabularies: a long word (Gemma's words are whole lines) is cut before a
  // U+2581 whose left neighbour is a vocabulary character that no token ever joins to a following
  // U+2581. No symbol can span such a cut, so the pieces merge independently (and hit the cache).
  bool split_at_spaces_ = false;
  std::vector<char32_t> joins_space_;  // sorted: characters some token has right before U+2581
};

}  // namespace kestrel::tok
