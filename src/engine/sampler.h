// Sampler: greedy, or seeded sampling with penalties, temperature, top-k, top-p and min-p.
//
// Each request owns its Sampler (and so its random stream): a request with a seed draws the
// same tokens whatever else shares its batches, because its logits are the same too.
//
// What sample() draws from: the logits after the penalties and the logit bias, divided by the temperature (NaN taken
// as -inf), put in the sampling order (highest first, the lower id first on ties), each weighted
// sampling_weight(its value - the top's) (the top weighs 1); the first top_k of that order; of
// those, the prefix down to the first token weighing less than min_p; of those, the shortest prefix
// holding top_p of their weight. One uniform draw in [0, the kept weight) walks the kept tokens in
// the sampling order. The order is computed only as far as the walk reaches (a peaked distribution
// costs a few passes over the vocabulary, not a sort of it: `kestrel bench-sampler`), and sample()
// keeps its scratch per thread, so the rows of a step can be sampled in parallel.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <utility>
#include <vector>

namespace kestrel {

struct SamplingParams {
  float temperature = 0.0f;         // 0: greedy (argmax after penalties)
  int top_k = 0;                    // 0: no limit
  float top_p = 1.0f;               // nucleus mass
  float min_p = 0.0f;               // drop tokens below min_p x the top probability
  float repetition_penalty = 1.0f;  // > 1 discourages tokens seen in prompt or output (HF style)
  float presence_penalty = 0.0f;    // OpenAI style, over generated tokens
  float frequency_penalty = 0.0f;   // OpenAI style, over generated tokens
  std::vector<std::pair<int32_t, float>> logit_bias;  // (token, added to its logit after the penalties)
  uint64_t seed = 0;
};

// One row of logits reduced by a backend (Ops::sample_candidates) to what sample() walks in the
// common case: the first n tokens of the sampling order at the row's temperature, with their
// scaled logits (ids[0] is the top), and the id-order mass of all the row's weights. 8 bytes a
// candidate instead of 4 a vocabulary entry.
struct SampleCandidates {
  std::span<const int32_t> ids;    // [n], in the sampling order
  std::span<const float> scaled;   // [n], logit / temperature (NaN as -inf)
  double mass = 0.0;               // sampling::lane_sum of every token's weight, in id order
};

class Sampler {
 public:
  explicit Sampler(SamplingParams params);
  // Picks a token from one row of logits [vocab]. `prompt` and `generated` feed the penalties.
  int32_t sample(const float* logits, int64_t vocab, std::span<const int32_t> prompt = {},
                 std::span<const int32_t> generated = {});
  // sample() from a row's candidates: the same token and the same draw from the random stream,
  // or nothing (the stream untouched) when the walk would need more of the order than they hold,
  // or the row has no finite top — then sample() on the whole row. Only for rows sample() would
  // draw from without penalties or bias (candidates_apply()).
  std::optional<int32_t> sample_candidates(const SampleCandidates& c, int64_t vocab);
  // Whether sample_candidates() can stand for sample(): temperature > 0, no penalties, no bias.
  bool candidates_apply() const;
  const SamplingParams& params() const { return p_; }
  // Whether sample() is argmax of the raw logits (greedy, no penalties or bias): a device argmax will do.
  bool plain_greedy() const;

 private:
  bool plain_greedy_but_temperature() const;  // no penalties, no bias
  SamplingParams p_;
  std::mt19937_64 rng_;
};

// exp(x) for x <= 0, as the sampler weighs tokens: the engine's own single-precision exp (relative
// error < 2e-7, 0 below -87), the same bits on every machine, and vectorizable over a row.
double sampling_weight(float x);
// out[i] = sampling_weight(x[i] - top) for a row (the pass sample() makes; vectorized).
void sampling_weights(const float* x, float top, double* out, int64_t n);

// The definition above computed the plain way: the whole vocabulary sorted, every sum taken in
// the sampling order. No penalties; logits without NaN. The oracle of the sampler's tests and the
// baseline of `kestrel bench-sampler`.
class ReferenceSampler {
 public:
  explicit ReferenceSampler(SamplingParams params) : p_(params), rng_(params.seed) {}
  int32_t sample(const float* logits, int64_t vocab);

 private:
  SamplingParams p_;
  std::mt19937_64 rng_;
};

// Index of the largest logit: first_argmax (ops/ops.h), ties to the lowest index as torch.argmax;
// Ops::argmax computes the same on a backend.
int32_t argmax(const float* logits, int64_t vocab);

// log-softmax value of `token`, and the k most likely (token, logprob) pairs, of raw logits;
// `lse` (log_sum_exp of the row) may be computed once for both.
double log_sum_exp(const float* logits, int64_t vocab);
float token_logprob(const float* logits, int64_t vocab, int32_t token);
float token_logprob(const float* logits, int64_t vocab, int32_t token, double lse);
std::vector<std::pair<int32_t, float>> top_logprobs(const float* logits, int64_t vocab, int k);
std::vector<std::pair<int32_t, float>> top_logprobs(const float* logits, int64_t vocab, int k, double lse);

}  // namespace kestrel
