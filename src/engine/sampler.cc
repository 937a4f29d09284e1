#include "engine/sampler.h"

#include <algorithm>
#include <cmath>

namespace kestrel {

int32_t argmax(const float* logits, int64_t vocab) {
  int32_t best = 0;
  for (int64_t i = 1; i < vocab; ++i) {
    if (logits[i] > logits[best]) best = int32_t(i);
  }
  return best;
}

Sampler::Sampler(SamplingParams params) : p_(params), rng_(params.seed) {}

int32_t Sampler::sample(const float* logits, int64_t vocab) {
  if (p_.temperature <= 0.0f) return argmax(logits, vocab);
  cand_.clear();
  for (int64_t i = 0; i < vocab; ++i) cand_.emplace_back(logits[i] / p_.temperature, int32_t(i));
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
  if (p_.top_p < 1.0f) {
    double cum = 0.0;
    size_t n = 0;
    while (n < keep) {
      cum += probs[n] / sum;
      ++n;
      if (cum >= double(p_.top_p)) break;
    }
    keep = std::max<size_t>(1, n);
    sum = 0.0;
    for (size_t i = 0; i < keep; ++i) sum += probs[i];
  }
  std::uniform_real_distribution<double> u(0.0, sum);
  double r = u(rng_), acc = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    acc += probs[i];
    if (r < acc) return cand_[i].second;
  }
  return cand_[keep - 1].second;
}

}  // namespace kestrel
