// Sampler: greedy, or seeded sampling with temperature, top-k and top-p.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace kestrel {

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy (argmax)
  int top_k = 0;             // 0: no limit
  float top_p = 1.0f;        // nucleus mass
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(SamplingParams params);
  // Picks a token from one row of logits [vocab].
  int32_t sample(const float* logits, int64_t vocab);

 private:
  SamplingParams p_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> cand_;
};

// Index of the largest logit; ties go to the lowest index (as torch.argmax).
int32_t argmax(const float* logits, int64_t vocab);

}  // namespace kestrel
