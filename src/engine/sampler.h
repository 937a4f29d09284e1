// Sampler: greedy, or seeded sampling with penalties, temperature, top-k, top-p and min-p.
//
// Each request owns its Sampler (and so its random stream): a request with a seed draws the
// same tokens whatever else shares its batches, because its logits are the same too.
#pragma once

#include <cstdint>
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
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(SamplingParams params);
  // Picks a token from one row of logits [vocab]. `prompt` and `generated` feed the penalties.
  int32_t sample(const float* logits, int64_t vocab, std::span<const int32_t> prompt = {},
                 std::span<const int32_t> generated = {});
  const SamplingParams& params() const { return p_; }
  // Whether sample() is argmax of the raw logits (greedy, no penalties): a device argmax will do.
  bool plain_greedy() const;

 private:
  SamplingParams p_;
  std::mt19937_64 rng_;
  std::vector<float> work_;
  std::vector<std::pair<float, int32_t>> cand_;
};

// Index of the largest logit: first_argmax (ops/ops.h), ties to the lowest index as torch.argmax;
// Ops::argmax computes the same on a backend.
int32_t argmax(const float* logits, int64_t vocab);

// log-softmax value of `token`, and the k most likely (token, logprob) pairs, of raw logits.
float token_logprob(const float* logits, int64_t vocab, int32_t token);
std::vector<std::pair<int32_t, float>> top_logprobs(const float* logits, int64_t vocab, int k);

}  // namespace kestrel
