// Qwen4-Exp's hashed n-gram ids: per PLE module, ngram_heads tables of prime sizes (the primes
// after ngram_vocab_size_base - 1, numbered across modules), splitmix64-derived odd multipliers,
// and n-grams that never reach back across an eos token.
#include <cmath>

#include "core/error.h"
#include "model/arch/qwen4_exp.h"
#include "ops/ngram.h"

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

std::vector<int64_t> NgramHash::packed() const {
  std::vector<int64_t> p(multipliers);
  p.insert(p.end(), head_sizes.begin(), head_sizes.end());
  p.insert(p.end(), head_offsets.begin(), head_offsets.end());
  return p;
}

void ngram_ids(const ModelConfig& cfg, const NgramHash& hash, const int32_t* context, const int32_t* tokens,
               int32_t n_tokens, int32_t* out) {
  const int n = cfg.q4.ngram_size, ctx = n - 1, n_heads = cfg.q4.ngram_heads();
  KCHECK(n >= 2 && n <= ngram::kMaxN && int(hash.multipliers.size()) == n && int(hash.head_sizes.size()) == n_heads);
  const std::vector<int64_t> packed = hash.packed();
  const ngram::PackedHash ph{packed.data(), n, n_heads};
  // history = context (ctx places) + the new tokens
  auto at = [&](int64_t j) { return j < ctx ? context[j] : tokens[j - ctx]; };
  int32_t window[ngram::kMaxN];
  for (int32_t t = 0; t < n_tokens; ++t) {
    ngram::token_window(at, ctx + t, n, cfg.q4.eos, window);
    for (int h = 0; h < n_heads; ++h) out[int64_t(t) * n_heads + h] = int32_t(ngram::head_row(window, ph, h));
  }
}

}  // namespace kestrel
