#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "ops/ops.h"

namespace kestrel {

int32_t argmax(const float* logits, int64_t vocab) { return first_argmax(logits, vocab); }

static double log_sum_exp(const float* logits, int64_t vocab) {
  float mx = logits[argmax(logits, vocab)];
  double s = 0;
  for (int64_t i = 0; i < vocab; ++i) s += std::exp(double(logits[i]) - mx);
  return double(mx) + std::log(s);
}

float token_logprob(const float* logits, int64_t vocab, int32_t token) {
  return float(double(logits[token]) - log_sum_exp(logits, vocab));
}

std::vector<std::pair<int32_t, float>> top_logprobs(const float* logits, int64_t vocab, int k) {
  const double lse = log_sum_exp(logits, vocab);
  std::vector<int32_t> idx(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) idx[size_t(i)] = int32_t(i);
  k = int(std::min<int64_t>(k, vocab));
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
  });
  std::vector<std::pair<int32_t, float>> out;
  for (int i = 0; i < k; ++i) out.emplace_back(idx[size_t(i)], float(double(logits[idx[size_t(i)]]) - lse));
  return out;
}

Sampler::Sampler(SamplingParams params) : p_(params), rng_(params.seed) {}

bool Sampler::plain_greedy() const {
  return p_.temperature <= 0.0f && p_.repetition_penalty == 1.0f && p_.presence_penalty == 0.0f &&
         p_.frequency_penalty == 0.0f;
}

int32_t Sampler::sample(const float* logits, int64_t vocab, std::span<const int32_t> prompt,
                        std::span<const int32_t> generated) {
  const bool penalize = p_.repetition_penalty != 1.0f || p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f;
  const float* l = logits;
  if (penalize) {
    work_.assign(logits, logits + vocab);
    if (p_.repetition_penalty != 1.0f) {
      auto apply = [&](int32_t t) {
        float& v = work_[size_t(t)];
        v = v > 0 ? v / p_.repetition_penalty : v * p_.repetition_penalty;
      };
      std::vector<bool> seen(static_cast<size_t>(vocab), false);
      for (auto span : {prompt, generated}) {
        for (int32_t t : span) {
          if (t >= 0 && t < vocab && !seen[size_t(t)]) {
            seen[size_t(t)] = true;
            apply(t);
          }
        }
      }
    }
    if (p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f) {
      std::unordered_map<int32_t, int> counts;
      for (int32_t t : generated) ++counts[t];
      for (const auto& [t, c] : counts) {
        if (t >= 0 && t < vocab) work_[size_t(t)] -= p_.presence_penalty + p_.frequency_penalty * float(c);
      }
    }
    l = work_.data();
  }
  if (p_.temperature <= 0.0f) return argmax(l, vocab);
  cand_.clear();
  for (int64_t i = 0; i < vocab; ++i) cand_.emplace_back(l[i] / p_.temperature, int32_t(i));
  // Highest first; ties by lower id so the order is fully determined.
  auto by_logit = [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; };
  size_t keep = cand_.size();
  if (p_.top_k > 0 && size_t(p_.top_k) < keep) {
    keep = size_t(p_.top_k);
    std::partial_sort(cand_.begin(), cand_.begin() + long(keep), cand_.end(), by_logit);
  } else {
    std::sort(cand_.begin(), cand_.end(), by_logit);
  }
  cand_.resize(keep);
  const float mx = cand_[0].first;
  std::vector<double> probs(keep);
  double sum = 0.0;
  for (size_t i = 0; i < keep; ++i) sum += probs[i] = std::exp(double(cand_[i].first - mx));
  if (p_.min_p > 0.0f) {  // probs[0] is the top probability (unnormalized: 1)
    size_t n = 0;
    while (n < keep && probs[n] >= double(p_.min_p)) ++n;
    keep = std::max<size_t>(1, n);
  }
  if (p_.top_p < 1.0f) {
    double total = 0.0;
    for (size_t i = 0; i < keep; ++i) total += probs[i];
    double cum = 0.0;
    size_t n = 0;
    while (n < keep) {
      cum += probs[n] / total;
      ++n;
      if (cum >= double(p_.top_p)) break;
    }
    keep = std::max<size_t>(1, n);
  }
  sum = 0.0;
  for (size_t i = 0; i < keep; ++i) sum += probs[i];
  std::uniform_real_distribution<double> u(0.0, sum);
  double r = u(rng_), acc = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    acc += probs[i];
    if (r < acc) return cand_[i].second;
  }
  return cand_[keep - 1].second;
}

}  // namespace kestrel
