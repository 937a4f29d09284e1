// The sampler: what each parameter keeps, the distribution it draws from, penalties, NaN and
// infinities, seeds, threads, and the lazily ranked walk against the full-sort ReferenceSampler.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "engine/sampler.h"
#include "ops/sampling_math.h"

namespace kestrel {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

SamplingParams params(float temperature, int top_k = 0, float top_p = 1.0f, float min_p = 0.0f, uint64_t seed = 1) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  p.seed = seed;
  return p;
}

// Draw frequencies of n samples of one row.
std::vector<double> frequencies(const std::vector<float>& logits, SamplingParams p, int n) {
  Sampler s(p);
  std::vector<double> f(logits.size(), 0.0);
  for (int i = 0; i < n; ++i) f[size_t(s.sample(logits.data(), int64_t(logits.size())))] += 1.0 / n;
  return f;
}

// Logits of log(probabilities): the target distribution at temperature 1.
std::vector<float> log_probs(std::initializer_list<double> p) {
  std::vector<float> l;
  for (double v : p) l.push_back(float(std::log(v)));
  return l;
}

// |f - p| within 5 standard deviations of a binomial frequency over n draws.
void expect_frequencies(const std::vector<double>& f, const std::vector<double>& p, int n) {
  ASSERT_EQ(f.size(), p.size());
  for (size_t i = 0; i < p.size(); ++i) {
    const double sd = std::sqrt(std::max(p[i] * (1 - p[i]), 1e-12) / n);
    EXPECT_NEAR(f[i], p[i], 5 * sd + 1e-12) << "token " << i;
  }
}

TEST(Sampler, DrawsFromTheSoftmaxAtTemperatureOne) {
  const int n = 40000;
  expect_frequencies(frequencies(log_probs({0.5, 0.3, 0.15, 0.05}), params(1.0f), n), {0.5, 0.3, 0.15, 0.05}, n);
}

TEST(Sampler, TemperatureSharpensAndFlattens) {
  const int n = 40000;
  const auto l = log_probs({0.5, 0.3, 0.15, 0.05});
  for (float t : {0.5f, 2.0f}) {
    std::vector<double> want;
    double z = 0;
    for (double p : {0.5, 0.3, 0.15, 0.05}) z += std::pow(p, 1.0 / t);
    for (double p : {0.5, 0.3, 0.15, 0.05}) want.push_back(std::pow(p, 1.0 / t) / z);
    SCOPED_TRACE(t);
    expect_frequencies(frequencies(l, params(t), n), want, n);
  }
}

TEST(Sampler, TopKTopPAndMinPKeepWhatTheyShould) {
  const int n = 40000;
  const auto l = log_probs({0.5, 0.3, 0.15, 0.05});
  // top_k 2: the two most likely, renormalized.
  expect_frequencies(frequencies(l, params(1.0f, 2), n), {0.625, 0.375, 0, 0}, n);
  // top_p 0.75: 0.5 + 0.3 reaches it; 0.85 needs the third.
  expect_frequencies(frequencies(l, params(1.0f, 0, 0.75f), n), {0.625, 0.375, 0, 0}, n);
  expect_frequencies(frequencies(l, params(1.0f, 0, 0.85f), n), {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0}, n);
  // min_p 0.5: at least half the top's probability (0.25).
  expect_frequencies(frequencies(l, params(1.0f, 0, 1.0f, 0.5f), n), {0.625, 0.375, 0, 0}, n);
  // top_k 1 and a tiny top_p are greedy; min_p above 1 keeps the top alone.
  for (const SamplingParams& p : {params(1.0f, 1), params(1.0f, 0, 1e-6f), params(1.0f, 0, 1.0f, 2.0f)}) {
    expect_frequencies(frequencies(l, p, 2000), {1, 0, 0, 0}, 2000);
  }
}

TEST(Sampler, TopPIsTakenOfWhatMinPAndTopKKept) {
  // top_k 3 keeps 0.5, 0.3, 0.15 (0.95); top_p 0.8 of that is 0.76: the first two reach 0.842.
  const int n = 40000;
  const auto l = log_probs({0.5, 0.3, 0.15, 0.05});
  expect_frequencies(frequencies(l, params(1.0f, 3, 0.8f), n), {0.625, 0.375, 0, 0}, n);
  // min_p 0.2 keeps p >= 0.1 (0.95 of the mass); top_p 0.9 of it is 0.855: all three needed.
  expect_frequencies(frequencies(l, params(1.0f, 0, 0.9f, 0.2f), n), {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0}, n);
}

TEST(Sampler, TiesGoToTheLowerIdFirst) {
  // Four equal logits, top_k 2: only ids 0 and 1; top_p 0.5: id 0 and 1 (0.25 + 0.25).
  const std::vector<float> l = {1, 1, 1, 1};
  const int n = 20000;
  expect_frequencies(frequencies(l, params(1.0f, 2), n), {0.5, 0.5, 0, 0}, n);
  expect_frequencies(frequencies(l, params(1.0f, 0, 0.5f), n), {0.5, 0.5, 0, 0}, n);
  expect_frequencies(frequencies({3, 1, 3, 3}, params(1.0f, 1), 200), {1, 0, 0, 0}, 200);
}

TEST(Sampler, NanIsNeverDrawnAndInfinitiesAreHandled) {
  const int n = 4000;
  expect_frequencies(frequencies({kNan, 0.0f, kNan, 0.0f}, params(1.0f), n), {0, 0.5, 0, 0.5}, n);
  // +inf takes all the mass: the first of them.
  expect_frequencies(frequencies({0.0f, kInf, 5.0f, kInf}, params(1.0f), 200), {0, 1, 0, 0}, 200);
  // -inf has no probability.
  expect_frequencies(frequencies({-kInf, 0.0f, -kInf, 0.0f}, params(1.0f, 0, 0.9f), n), {0, 0.5, 0, 0.5}, n);
  // Nothing finite: the greedy pick (first_argmax: a number over NaN).
  Sampler s(params(1.0f));
  const std::vector<float> none = {kNan, -kInf, kNan};
  EXPECT_EQ(s.sample(none.data(), 3), 1);
  const std::vector<float> nan_only = {kNan, kNan};
  EXPECT_EQ(s.sample(nan_only.data(), 2), 0);
}

TEST(Sampler, PenaltiesFollowHuggingFaceAndOpenAi) {
  // Greedy with penalties: the argmax of the penalized logits. A seen positive logit is divided.
  const std::vector<float> l = {4.0f, 3.0f, -1.0f};
  const std::vector<int32_t> prompt = {0};
  SamplingParams p = params(0.0f);
  p.repetition_penalty = 2.0f;  // 4 -> 2, below 3
  EXPECT_FALSE(Sampler(p).plain_greedy());
  EXPECT_EQ(Sampler(p).sample(l.data(), 3, prompt, {}), 1);
  EXPECT_EQ(Sampler(p).sample(l.data(), 3, {}, prompt), 1);  // generated tokens count too
  p.repetition_penalty = 1.2f;  // 4 -> 3.33, still above 3
  EXPECT_EQ(Sampler(p).sample(l.data(), 3, prompt, {}), 0);
  // Negative logits are multiplied: -1 seen becomes -2, below -1.5.
  const std::vector<float> neg = {-1.0f, -1.5f};
  const std::vector<int32_t> seen0 = {0};
  SamplingParams r = params(0.0f);
  r.repetition_penalty = 2.0f;
  EXPECT_EQ(Sampler(r).sample(neg.data(), 2, seen0, {}), 1);
  // presence 0.5 + frequency 0.4 x count, over generated tokens only: 3 - 0.5 - 0.8 = 1.7 < 2.
  const std::vector<float> m = {2.0f, 3.0f};
  SamplingParams o = params(0.0f);
  o.presence_penalty = 0.5f;
  o.frequency_penalty = 0.4f;
  const std::vector<int32_t> generated = {1, 1};
  EXPECT_EQ(Sampler(o).sample(m.data(), 2, {}, generated), 0);
  EXPECT_EQ(Sampler(o).sample(m.data(), 2, generated, {}), 1);  // the prompt does not count
  // Out-of-vocabulary ids in the history are ignored.
  const std::vector<int32_t> bad = {-3, 7};
  EXPECT_EQ(Sampler(o).sample(m.data(), 2, {}, bad), 1);
}

TEST(Sampler, LogitBiasIsAddedAfterThePenalties) {
  const std::vector<float> l = {2.0f, 1.0f, 0.5f};
  SamplingParams p = params(0.0f);
  p.logit_bias = {{2, 1.75f}};  // 0.5 + 1.75 = 2.25 > 2
  EXPECT_FALSE(Sampler(p).plain_greedy());
  EXPECT_EQ(Sampler(p).sample(l.data(), 3), 2);
  // After the repetition penalty: token 0 seen, 2 / 2 = 1 < 1 + 0.5.
  SamplingParams q = params(0.0f);
  q.repetition_penalty = 2.0f;
  q.logit_bias = {{1, 0.5f}, {7, 100.0f}, {-1, 100.0f}};  // out-of-vocabulary ids are ignored
  const std::vector<int32_t> seen = {0};
  EXPECT_EQ(Sampler(q).sample(l.data(), 3, seen, {}), 1);
  // -100 bans a token in sampling; +100 forces one.
  const int n = 4000;
  SamplingParams ban = params(1.0f);
  ban.logit_bias = {{0, -100.0f}};
  const auto f = frequencies(log_probs({0.5, 0.25, 0.25}), ban, n);
  expect_frequencies(f, {0, 0.5, 0.5}, n);
  SamplingParams force = params(1.0f, 0, 0.9f);
  force.logit_bias = {{2, 100.0f}};
  expect_frequencies(frequencies(log_probs({0.5, 0.25, 0.25}), force, 500), {0, 0, 1}, 500);
}

// Logit rows shaped like a language model's (a bulk around 0 and a few tokens far above it),
// flat ones, and ones with many exact ties.
std::vector<float> row(int kind, int64_t vocab, std::mt19937& g) {
  std::vector<float> l(static_cast<size_t>(vocab));
  std::normal_distribution<float> bulk(0.0f, 2.0f);
  std::uniform_int_distribution<int> level(0, 7);
  for (auto& v : l) v = kind == 2 ? float(level(g)) * 0.5f : bulk(g) * (kind == 1 ? 0.05f : 1.0f);
  if (kind == 0) {
    std::uniform_int_distribution<int64_t> pick(0, vocab - 1);
    std::uniform_real_distribution<float> lift(6.0f, 14.0f);
    for (int i = 0; i < 12; ++i) l[size_t(pick(g))] += lift(g);
  }
  return l;
}

TEST(Sampler, LazyRankingDrawsWhatAFullSortDraws) {
  std::mt19937 g(7);
  int cases = 0;
  for (int64_t vocab : {1, 2, 9, 300, 5000, 151669}) {
    for (int kind = 0; kind < 3; ++kind) {
      const auto l = row(kind, vocab, g);
      for (float t : {0.3f, 0.7f, 1.0f, 1.6f}) {
        for (int top_k : {0, 1, 40, 1000}) {
          for (float top_p : {1.0f, 0.95f, 0.5f}) {
            for (float min_p : {0.0f, 0.05f}) {
              if (vocab == 151669 && (top_k == 1 || t == 1.6f || min_p > 0)) continue;  // the full sort is slow
              const SamplingParams p = params(t, top_k, top_p, min_p, uint64_t(cases));
              Sampler fast(p);
              ReferenceSampler ref(p);
              const int draws = vocab > 10000 ? 3 : 12;
              for (int d = 0; d < draws; ++d) {
                ASSERT_EQ(fast.sample(l.data(), vocab), ref.sample(l.data(), vocab))
                    << "vocab " << vocab << " kind " << kind << " T " << t << " top_k " << top_k << " top_p " << top_p
                    << " min_p " << min_p << " draw " << d;
              }
              ++cases;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(cases, 400);
}

// A row reduced by the sample_candidates op (the CPU's, the definition every backend matches)
// draws what the whole row draws, from the same stream; where the walk needs more of the order
// than M tokens, sample_candidates() declines and leaves the stream alone for sample().
TEST(Sampler, CandidatesDrawWhatTheWholeRowDraws) {
  std::mt19937 g(11);
  CpuOps ops;
  int taken = 0, declined = 0, any_declined = 0;  // taken / declined: with 1024 candidates
  for (int64_t vocab : {1, 2, 9, 300, 5000, 60000}) {
    for (int kind = 0; kind < 4; ++kind) {
      auto l = row(kind < 3 ? kind : 0, vocab, g);
      if (kind == 3) {  // NaN, infinities and signed zeros
        for (int64_t i = 0; i < vocab; i += 7) l[size_t(i)] = kNan;
        for (int64_t i = 3; i < vocab; i += 11) l[size_t(i)] = -kInf;
        for (int64_t i = 1; i < vocab; i += 13) l[size_t(i)] = (i / 13) % 2 ? 0.0f : -0.0f;
      }
      for (int64_t M : {int64_t(1), int64_t(16), int64_t(1024)}) {
        const int64_t m = std::min(M, vocab);
        for (float t : {0.3f, 1.0f, 1.6f}) {
          Buffer x = ops.alloc(DType::kF32, 1, vocab), ids = ops.alloc(DType::kI32, 1, m),
                 sc = ops.alloc(DType::kF32, 1, m), mass = ops.alloc(DType::kF64, 1, 1);
          std::copy(l.begin(), l.end(), x.view().f32());
          const float temps[] = {t};
          ops.sample_candidates(ids, sc, mass, x, temps);
          const SampleCandidates c{{ids.view().as<int32_t>(), size_t(m)}, {sc.view().f32(), size_t(m)},
                                   mass.view().as<double>()[0]};
          for (int top_k : {0, 1, 40}) {
            for (float top_p : {1.0f, 0.9f}) {
              for (float min_p : {0.0f, 0.05f}) {
                const SamplingParams p = params(t, top_k, top_p, min_p, uint64_t(g()));
                Sampler whole(p), reduced(p);
                for (int d = 0; d < 4; ++d) {
                  const int32_t want = whole.sample(l.data(), vocab);
                  std::optional<int32_t> got = reduced.sample_candidates(c, vocab);
                  if (M == 1024) (got ? taken : declined) += 1;
                  if (!got) ++any_declined;
                  if (!got) got = reduced.sample(l.data(), vocab);
                  ASSERT_EQ(*got, want) << "vocab " << vocab << " kind " << kind << " M " << M << " T " << t
                                        << " top_k " << top_k << " top_p " << top_p << " min_p " << min_p << " draw " << d;
                }
              }
            }
          }
        }
      }
    }
  }
  std::printf("MEASURED sample_candidates with 1024 candidates: %d draws taken, %d declined\n", taken, declined);
  EXPECT_GT(taken, 3 * declined);  // with 1024 candidates the common case is theirs
  EXPECT_GT(any_declined, 0);      // and the fallback was exercised
}

// The mass is kMassLanes interleaved lanes folded as a tree: a device block sums it one thread a
// lane and gets these bits.
TEST(Sampler, MassIsTheLaneTreeSum) {
  std::vector<double> w(1000);
  std::mt19937 g(5);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (auto& v : w) v = u(g);
  double lane[sampling::kMassLanes] = {};
  for (size_t i = 0; i < w.size(); ++i) lane[i % sampling::kMassLanes] += w[i];
  for (int width = sampling::kMassLanes / 2; width >= 1; width /= 2)
    for (int j = 0; j < width; ++j) lane[j] += lane[j + width];
  EXPECT_EQ(sampling::lane_sum(w.size(), [&](size_t i) { return w[i]; }), lane[0]);
}

TEST(Sampler, SeedsRepeatAndThreadsDoNotMix) {
  std::mt19937 g(3);
  const auto l = row(0, 20000, g);
  const SamplingParams p = params(1.0f, 0, 0.95f, 0.0f, 42);
  std::vector<int32_t> alone;
  Sampler a(p);
  for (int i = 0; i < 50; ++i) alone.push_back(a.sample(l.data(), int64_t(l.size())));
  Sampler b(p);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(b.sample(l.data(), int64_t(l.size())), alone[size_t(i)]);
  // Another seed draws another sequence (the distribution is not peaked enough to repeat 50 draws).
  Sampler c(params(1.0f, 0, 0.95f, 0.0f, 43));
  std::vector<int32_t> other;
  for (int i = 0; i < 50; ++i) other.push_back(c.sample(l.data(), int64_t(l.size())));
  EXPECT_NE(other, alone);
  // Four threads sampling at once, each its own request: each draws what it draws alone.
  std::vector<std::vector<int32_t>> got(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      Sampler s(p);
      for (int i = 0; i < 50; ++i) got[size_t(t)].push_back(s.sample(l.data(), int64_t(l.size())));
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(got[size_t(t)], alone) << "thread " << t;
}

TEST(Sampler, WeightIsExpWithinTwoTenthsOfAMillionth) {
  EXPECT_EQ(sampling_weight(0.0f), 1.0);  // the top token weighs exactly 1
  EXPECT_EQ(sampling_weight(-87.5f), 0.0);
  EXPECT_EQ(sampling_weight(-kInf), 0.0);
  EXPECT_EQ(sampling_weight(kNan), 0.0);
  // (Over every float in [-87, 0] the worst is 1.02e-7; the grid keeps the test fast.)
  double worst = 0;
  for (int i = 0; i <= 870000; ++i) {
    const float x = -float(i) * 1e-4f;
    worst = std::max(worst, std::abs(sampling_weight(x) / std::exp(double(x)) - 1.0));
  }
  EXPECT_LT(worst, 2e-7);
}

TEST(Sampler, LogprobsShareOneLogSumExp) {
  const std::vector<float> l = {1.0f, 3.0f, 2.0f, 3.0f};
  const double lse = log_sum_exp(l.data(), 4);
  EXPECT_NEAR(lse, std::log(std::exp(1.0) + 2 * std::exp(3.0) + std::exp(2.0)), 1e-12);
  EXPECT_EQ(token_logprob(l.data(), 4, 2), token_logprob(l.data(), 4, 2, lse));
  const auto top = top_logprobs(l.data(), 4, 3, lse);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].first, 1);  // ties: the lower id first
  EXPECT_EQ(top[1].first, 3);
  EXPECT_EQ(top[2].first, 2);
  EXPECT_EQ(top, top_logprobs(l.data(), 4, 3));
}

}  // namespace
}  // namespace kestrel
