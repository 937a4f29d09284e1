// Token n-grams for hashed n-gram embeddings (Qwen4-Exp's PLE), shared by the host reference
// (model/arch/qwen4_exp_ngram.cc) and every backend's token_windows / ngram_embed ops, which must
// give the same ids bit for bit.
//
// A window is a row's token and the n - 1 tokens before it in its sequence, newest first
// (window[0] is the token itself). An n-gram never reaches back across an eos token: a place
// whose token, or any token between it and the row, is eos — and a place before the sequence's
// first token — holds eos. So window[k] = eos as soon as one of the k tokens before the row is eos.
//
// The ids of one row for one PLE module: for each order o = 2 .. n, the hash
//   mixed = window[0] * m[0] ^ window[1] * m[1] ^ ... ^ window[o - 1] * m[o - 1]
// (int64 products that wrap, xor on the bits), then for each of its heads_per_order heads h
// (global head (o - 2) * heads_per_order + j) the row remainder(mixed, size[h]) (the sign of the
// divisor, as torch.remainder) plus offset[h], the head's first row in the concatenated table.
#pragma once

#include <cstdint>
#include <vector>

#include "core/host_device.h"
#include "ops/step_plan.h"
#include "ops/tensor.h"

namespace kestrel::ngram {

// Longest n-gram the ops take (ngram_size is at most 16 in the config).
constexpr int kMaxN = 16;

// window[0 .. n) of place i of a sequence's history, where at(j) is the history's token j for
// j in [i - n + 1, i] (the caller's history holds at least n - 1 places before i: the sequence's
// context, eos-filled before its first token).
template <typename At>
KESTREL_HD inline void token_window(const At& at, int64_t i, int n, int32_t eos, int32_t* window) {
  window[0] = at(i);
  bool cut = false;
  for (int k = 1; k < n; ++k) {
    const int32_t t = at(i - k);
    cut = cut || t == eos;
    window[k] = cut ? eos : t;
  }
}

// The table layout of one module's hash, packed in one I64 row (what ngram_embed takes):
// [multipliers (n) | head sizes (heads) | head offsets (heads)].
struct PackedHash {
  const int64_t* p;
  int n;      // ngram_size
  int heads;  // ngram heads in all: (n - 1) * heads_per_order
  KESTREL_HD int heads_per_order() const { return heads / (n - 1); }
  KESTREL_HD int64_t multiplier(int k) const { return p[k]; }
  KESTREL_HD int64_t size(int h) const { return p[n + h]; }
  KESTREL_HD int64_t offset(int h) const { return p[n + heads + h]; }
};

// The mixed hash of the window's first `order` places.
KESTREL_HD inline int64_t mix(const int32_t* window, const PackedHash& hash, int order) {
  uint64_t mixed = uint64_t(int64_t(window[0])) * uint64_t(hash.multiplier(0));
  for (int k = 1; k < order; ++k) mixed ^= uint64_t(int64_t(window[k])) * uint64_t(hash.multiplier(k));
  return int64_t(mixed);
}

// The table row of global head h for the window.
KESTREL_HD inline int64_t head_row(const int32_t* window, const PackedHash& hash, int h) {
  const int order = 2 + h / hash.heads_per_order();
  const int64_t size = hash.size(h);
  int64_t r = mix(window, hash, order) % size;
  if (r < 0) r += size;
  return r + hash.offset(h);
}

// The argument checks every backend's token_windows / ngram_embed run (ngram.cc): shapes,
// dtypes, n, the plan's slots; ngram_embed returns the number of rows of its table.
void check_token_windows(const Tensor& windows, const Tensor& context, const StepPlan& plan);
int64_t check_ngram_embed(const Tensor& out, const std::vector<Tensor>& shards, const Tensor& windows,
                          const Tensor& hash);

}  // namespace kestrel::ngram
