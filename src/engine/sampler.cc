#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <bit>
#include <iterator>
#include <limits>
#include <unordered_map>

#include "ops/ops.h"
#include "ops/sampling_math.h"

namespace kestrel {

int32_t argmax(const float* logits, int64_t vocab) { return first_argmax(logits, vocab); }

double log_sum_exp(const float* logits, int64_t vocab) {
  float mx = logits[argmax(logits, vocab)];
  double s = 0;
  for (int64_t i = 0; i < vocab; ++i) s += std::exp(double(logits[i]) - mx);
  return double(mx) + std::log(s);
}

float token_logprob(const float* logits, int64_t vocab, int32_t token) {
  return token_logprob(logits, vocab, token, log_sum_exp(logits, vocab));
}

float token_logprob(const float* logits, int64_t vocab, int32_t token, double lse) {
  return float(double(logits[token]) - lse);
}

std::vector<std::pair<int32_t, float>> top_logprobs(const float* logits, int64_t vocab, int k) {
  return top_logprobs(logits, vocab, k, log_sum_exp(logits, vocab));
}

std::vector<std::pair<int32_t, float>> top_logprobs(const float* logits, int64_t vocab, int k, double lse) {
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

double sampling_weight(float x) { return double(sampling::exp_nonpositive(x)); }

void sampling_weights(const float* x, float top, double* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = double(sampling::exp_nonpositive(x[i] - top));
}

namespace {

// Per-thread scratch of sample(): a sampler per request would otherwise hold three
// vocabulary-sized arrays for its whole life.
struct Scratch {
  std::vector<float> penalized;  // logits after the penalties and the bias
  std::vector<float> scaled;     // penalized / temperature, NaN as -inf: the sampling order's key
  std::vector<double> prob;      // exp(scaled - max), unnormalized, indexed by token
  std::vector<int32_t> order;    // the candidates; [0, ranked) in sampling order
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// The candidates in sampling order (highest scaled logit first, the lower id first on ties),
// ranked only as far as a walk reaches. Each extension moves the unranked candidates whose scaled
// logit is within the next of a few widening margins of the top's to the front and sorts just
// those: everything left behind comes after them in the order. A peaked distribution is ranked in
// a few passes over the vocabulary instead of a sort of it; the order is exactly the full sort's.
class Ranking {
 public:
  Ranking(std::vector<int32_t>& ids, const float* key, float top, size_t ranked)
      : ids_(ids), key_(key), top_(top), ranked_(ranked) {}
  int32_t at(size_t i) {
    while (i >= ranked_ && ranked_ < ids_.size()) extend();
    return ids_[i];
  }
  // Keeps the first n of the order (n <= what is ranked).
  void truncate(size_t n) {
    ids_.resize(n);
    ranked_ = std::min(ranked_, n);
  }

 private:
  void extend() {
    static constexpr float kMargins[] = {6.9f, 13.8f, 27.6f};  // weights ~1e-3, 1e-6, 1e-12 of the top's
    const auto first = ids_.begin() + long(ranked_);
    auto mid = ids_.end();
    if (tier_ < std::size(kMargins)) {
      const float cut = top_ - kMargins[tier_];
      mid = std::partition(first, ids_.end(), [k = key_, cut](int32_t t) { return k[t] >= cut; });
    }
    ++tier_;
    const float* k = key_;
    std::sort(first, mid, [k](int32_t a, int32_t b) { return k[a] != k[b] ? k[a] > k[b] : a < b; });
    ranked_ = size_t(mid - ids_.begin());
  }

  std::vector<int32_t>& ids_;
  const float* key_;
  float top_;
  size_t ranked_;
  size_t tier_ = 0;
};

using sampling::lane_sum;
using sampling::ordered_bits;

}  // namespace

Sampler::Sampler(SamplingParams params) : p_(params), rng_(params.seed) {}

bool Sampler::plain_greedy() const { return p_.temperature <= 0.0f && plain_greedy_but_temperature(); }

bool Sampler::plain_greedy_but_temperature() const {
  return p_.repetition_penalty == 1.0f && p_.presence_penalty == 0.0f && p_.frequency_penalty == 0.0f &&
         p_.logit_bias.empty();
}

int32_t Sampler::sample(const float* logits, int64_t vocab, std::span<const int32_t> prompt,
                        std::span<const int32_t> generated) {
  Scratch& w = scratch();
  const bool penalize = p_.repetition_penalty != 1.0f || p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f;
  const float* l = logits;
  if (penalize || !p_.logit_bias.empty()) {
    w.penalized.assign(logits, logits + vocab);
    if (p_.repetition_penalty != 1.0f) {
      auto apply = [&](int32_t t) {
        float& v = w.penalized[size_t(t)];
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
        if (t >= 0 && t < vocab) w.penalized[size_t(t)] -= p_.presence_penalty + p_.frequency_penalty * float(c);
      }
    }
    for (const auto& [t, bias] : p_.logit_bias) {
      if (t >= 0 && t < vocab) w.penalized[size_t(t)] += bias;
    }
    l = w.penalized.data();
  }
  if (p_.temperature <= 0.0f) return argmax(l, vocab);

  // Scale (NaN as -inf), and find the top: the first token of the sampling order. Both passes work
  // on the bits so that they vectorize (the top through ordered_bits).
  constexpr float kInf = std::numeric_limits<float>::infinity();
  w.scaled.resize(size_t(vocab));
  float* s = w.scaled.data();
  const float temperature = p_.temperature;
  for (int64_t i = 0; i < vocab; ++i) s[i] = sampling::scaled(l[i], temperature);
  int32_t best = std::numeric_limits<int32_t>::min();
  for (int64_t i = 0; i < vocab; ++i) best = std::max(best, ordered_bits(std::bit_cast<int32_t>(s[i])));
  const float mx = std::bit_cast<float>(ordered_bits(best));
  int32_t top = 0;
  while (s[top] != mx) ++top;  // as floats: -0 and +0 tie, and the lower id comes first
  // An infinite top takes all the mass (the first such token); with nothing finite above -inf
  // there is no distribution to draw from, and the greedy pick stands.
  if (mx == kInf) return top;
  if (mx == -kInf) return argmax(l, vocab);
  w.prob.resize(size_t(vocab));
  double* prob = w.prob.data();
  sampling_weights(s, mx, prob, vocab);

  // The candidates: the top_k first of the order (ranked now), else every token (ranked lazily);
  // min_p then keeps the prefix of the order whose weights are at least min_p (the top's is 1).
  std::vector<int32_t>& order = w.order;
  order.resize(size_t(vocab));
  for (int64_t i = 0; i < vocab; ++i) order[size_t(i)] = int32_t(i);
  size_t ranked = 0;
  if (p_.top_k > 0 && p_.top_k < vocab) {
    auto before = [s](int32_t a, int32_t b) { return s[a] != s[b] ? s[a] > s[b] : a < b; };
    std::partial_sort(order.begin(), order.begin() + p_.top_k, order.end(), before);
    order.resize(size_t(p_.top_k));
    ranked = order.size();
  }
  Ranking rank(order, s, mx, ranked);
  // Summed in id order while nothing has been ranked, in the sampling order after.
  bool id_order = ranked == 0;
  if (p_.min_p > 0.0f) {  // the prefix of the order down to the first token weighing less
    size_t n = 0;
    while (n < order.size() && prob[rank.at(n)] >= double(p_.min_p)) ++n;
    rank.truncate(std::max<size_t>(1, n));
    id_order = false;
  }

  // top_p: the shortest prefix of the order whose share of the candidates' mass reaches top_p.
  size_t keep = order.size();
  auto mass = [&] {  // the candidates' weight
    return id_order ? lane_sum(size_t(vocab), [prob](size_t i) { return prob[i]; })
                    : lane_sum(order.size(), [prob, &order](size_t i) { return prob[order[i]]; });
  };
  double sum = 0.0;
  if (p_.top_p < 1.0f) {
    const double total = mass();
    double cum = 0.0;
    size_t n = 0;
    while (n < keep) {
      cum += prob[rank.at(n)] / total;
      ++n;
      if (cum >= double(p_.top_p)) break;
    }
    keep = n;
    for (size_t i = 0; i < keep; ++i) sum += prob[rank.at(i)];
  } else {
    sum = mass();
  }
  std::uniform_real_distribution<double> u(0.0, sum);
  double r = u(rng_), acc = 0.0;
  int32_t last = top;  // where rounding leaves r at or past the walk's total: the last token with mass
  for (size_t i = 0; i < keep; ++i) {
    const int32_t t = rank.at(i);
    acc += prob[t];
    if (r < acc) return t;
    if (prob[t] > 0.0) last = t;
  }
  return last;
}

bool Sampler::candidates_apply() const { return p_.temperature > 0.0f && plain_greedy_but_temperature(); }

std::optional<int32_t> Sampler::sample_candidates(const SampleCandidates& c, int64_t vocab) {
  KCHECK_MSG(candidates_apply(), "Sampler::sample_candidates: a row with penalties, bias or no temperature");
  const size_t n = c.ids.size();
  KCHECK_MSG(n >= 1 && c.scaled.size() == n && int64_t(n) <= vocab, "Sampler::sample_candidates: ", n,
             " candidates (", c.scaled.size(), " keys) for a vocabulary of ", vocab);
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const float mx = c.scaled[0];
  if (mx == kInf) return c.ids[0];  // as sample(): the first infinite token, no draw
  if (mx == -kInf) return std::nullopt;  // sample() takes the raw logits' argmax
  std::vector<double> w(n);
  for (size_t i = 0; i < n; ++i) w[i] = double(sampling::exp_nonpositive(c.scaled[i] - mx));
  // The candidates of sample(): `cand` tokens of the order (the vocabulary when `id_order`).
  size_t cand = size_t(vocab);
  bool id_order = true;
  if (p_.top_k > 0 && p_.top_k < vocab) {
    if (size_t(p_.top_k) > n) return std::nullopt;
    cand = size_t(p_.top_k);
    id_order = false;
  }
  if (p_.min_p > 0.0f) {
    size_t m = 0;
    while (m < cand && m < n && w[m] >= double(p_.min_p)) ++m;
    if (m == n && cand > n) return std::nullopt;  // where the prefix ends lies past the candidates
    cand = std::max<size_t>(1, m);
    id_order = false;
  }
  const double mass = id_order ? c.mass : lane_sum(cand, [&w](size_t i) { return w[i]; });
  size_t keep = cand;
  double sum = 0.0;
  if (p_.top_p < 1.0f) {
    double cum = 0.0;
    size_t m = 0;
    while (m < keep) {
      if (m == n) return std::nullopt;
      cum += w[m] / mass;
      ++m;
      if (cum >= double(p_.top_p)) break;
    }
    keep = m;
    for (size_t i = 0; i < keep; ++i) sum += w[i];
  } else {
    sum = mass;
  }
  std::mt19937_64 rng = rng_;  // committed only if the walk ends among the candidates
  std::uniform_real_distribution<double> u(0.0, sum);
  const double r = u(rng);
  double acc = 0.0;
  int32_t last = c.ids[0];
  for (size_t i = 0; i < keep; ++i) {
    if (i == n) return std::nullopt;
    acc += w[i];
    if (r < acc) {
      rng_ = rng;
      return c.ids[i];
    }
    if (w[i] > 0.0) last = c.ids[i];
  }
  rng_ = rng;  // keep <= n here: the walk returned nothing past the candidates
  return last;
}

int32_t ReferenceSampler::sample(const float* logits, int64_t vocab) {
  std::vector<std::pair<float, int32_t>> cand;
  for (int64_t i = 0; i < vocab; ++i) cand.emplace_back(logits[i] / p_.temperature, int32_t(i));
  std::sort(cand.begin(), cand.end(),
            [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; });
  size_t keep = cand.size();
  if (p_.top_k > 0 && size_t(p_.top_k) < keep) keep = size_t(p_.top_k);
  std::vector<double> probs(keep);
  for (size_t i = 0; i < keep; ++i) probs[i] = sampling_weight(cand[i].first - cand[0].first);
  if (p_.min_p > 0.0f) {
    size_t n = 0;
    while (n < keep && probs[n] >= double(p_.min_p)) ++n;
    keep = std::max<size_t>(1, n);
  }
  if (p_.top_p < 1.0f) {
    double total = 0.0, cum = 0.0;
    for (size_t i = 0; i < keep; ++i) total += probs[i];
    size_t n = 0;
    while (n < keep) {
      cum += probs[n++] / total;
      if (cum >= double(p_.top_p)) break;
    }
    keep = n;
  }
  double sum = 0.0;
  for (size_t i = 0; i < keep; ++i) sum += probs[i];
  std::uniform_real_distribution<double> u(0.0, sum);
  double r = u(rng_), acc = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    acc += probs[i];
    if (r < acc) return cand[i].second;
  }
  return cand[keep - 1].second;
}

}  // namespace kestrel
