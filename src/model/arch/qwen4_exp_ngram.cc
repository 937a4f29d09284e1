// Qwen4-Exp's hashed n-gram ids: per PLE module, ngram_heads tables of prime sizes (the primes
// after ngram_vocab_size_base - 1, numbered across modules), splitmix64-derived odd multipliers,
// and n-grams that never reach back across an eos token.
#include <cmath>

#include "core/error.h"
#include "model/arch/qwen4_exp.h"

namespace kestrel {
namespace {

constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;
constexpr uint64_t kPrimeSeedStep = 10007;

uint64_t splitmix64(uint64_t v) {
  v += kGamma;
  v = (v ^ (v >> 30)) * 0xBF58476D1CE4E5B9ull;
  v = (v ^ (v >> 27)) * 0x94D049BB133111EBull;
  return v ^ (v >> 31);
}

bool is_prime(int64_t v) {
  if (v < 2) return false;
  if (v % 2 == 0) return v == 2;
  for (int64_t d = 3; d * d <= v; d += 2) {
    if (v % d == 0) return false;
  }
  return true;
}

}  // namespace

NgramHash ngram_hash(const ModelConfig& cfg, int ple_index) {
  const auto& q = cfg.q4;
  NgramHash h;
  const uint64_t max_long = (uint64_t(1) << 63) - 1;
  const uint64_t half_bound = std::max<uint64_t>(1, (max_long / uint64_t(std::max<int64_t>(cfg.vocab_size, 1))) / 2);
  const uint64_t base_seed = q.seed + kPrimeSeedStep * uint64_t(ple_index);
  for (int i = 0; i < q.ngram_size; ++i)
    h.multipliers.push_back(int64_t(2 * (splitmix64(base_seed + kGamma * uint64_t(i + 1)) % half_bound) + 1));
  // head j of module m takes the (m * heads + j + 1)-th prime after base - 1
  const int heads = q.ngram_heads();
  int64_t prime = q.ngram_vocab_base - 1;
  for (int k = 0; k < ple_index * heads; ++k) {
    ++prime;
    while (!is_prime(prime)) ++prime;
  }
  int64_t total = 0;
  for (int j = 0; j < heads; ++j) {
    ++prime;
    while (!is_prime(prime)) ++prime;
    h.head_sizes.push_back(prime);
    h.head_offsets.push_back(total);
    total += prime;
  }
  h.padded_rows = (total + q.ngram_vocab_divisor - 1) / q.ngram_vocab_divisor * q.ngram_vocab_divisor;
  return h;
}

void ngram_ids(const ModelConfig& cfg, const NgramHash& hash, const int32_t* context, const int32_t* tokens,
               int32_t n_tokens, int32_t* out) {
  const auto& q = cfg.q4;
  const int ctx = q.ngram_size - 1, heads = q.heads_per_ngram, n_heads = q.ngram_heads();
  // history = context + new tokens; segment_start[i] = 1 + the last eos before i
  std::vector<int64_t> hist(size_t(ctx + n_tokens));
  for (int i = 0; i < ctx; ++i) hist[size_t(i)] = context[i];
  for (int32_t t = 0; t < n_tokens; ++t) hist[size_t(ctx + t)] = tokens[t];
  int64_t last_eos = -1;
  std::vector<int64_t> seg_start(hist.size());
  for (size_t i = 0; i < hist.size(); ++i) {
    seg_start[i] = last_eos + 1;
    if (hist[i] == q.eos) last_eos = int64_t(i);
  }
  auto shifted = [&](int64_t i, int shift) -> int64_t {
    if (shift == 0) return hist[size_t(i)];
    const bool valid = i - seg_start[size_t(i)] >= shift && i - shift >= 0;
    return valid ? hist[size_t(i - shift)] : int64_t(q.eos);
  };
  for (int32_t t = 0; t < n_tokens; ++t) {
    const int64_t i = ctx + t;
    for (int order = 2; order <= q.ngram_size; ++order) {
      // int64 products wrap as torch's do; xor on the bits
      uint64_t mixed = uint64_t(shifted(i, 0)) * uint64_t(hash.multipliers[0]);
      for (int k = 1; k < order; ++k) mixed ^= uint64_t(shifted(i, k)) * uint64_t(hash.multipliers[size_t(k)]);
      const int64_t sm = int64_t(mixed);
      for (int j = 0; j < heads; ++j) {
        const int head = (order - 2) * heads + j;
        const int64_t size = hash.head_sizes[size_t(head)];
        int64_t r = sm % size;
        if (r < 0) r += size;  // torch.remainder: the sign of the divisor
        out[int64_t(t) * n_heads + head] = int32_t(r + hash.head_offsets[size_t(head)]);
      }
    }
  }
}

}  // namespace kestrel
