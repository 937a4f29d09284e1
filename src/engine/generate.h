// The generation loop for one sequence: chunked prefill, then sampling one token at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "engine/runner.h"
#include "engine/sampler.h"

namespace kestrel {

struct GenerateOptions {
  int max_new_tokens = 16;
  int prefill_chunk = 512;           // prompt tokens per step
  std::vector<int> stop_token_ids;   // generation ends after emitting one of these
  SamplingParams sampling;
  // Sampling without penalties or bias: each step brings back only the first this many tokens of
  // the row's sampling order and its mass (Runner::step_candidates; 8 bytes a candidate instead of
  // the vocabulary's logits), and the whole row only when the draw walks past them. The tokens
  // are the same either way. -1: 1024 on a device backend, off on the CPU (whose logits are
  // already in host memory); 0: off; at most 4096.
  int sample_candidates = -1;
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated tokens (including a final stop token)
  bool stopped = false;         // ended on a stop token (else: max_new_tokens)
  double prefill_seconds = 0, decode_seconds = 0;
  // Tokens drawn from the backend's candidates, and of those steps the ones whose draw needed the
  // whole row after all (GenerateOptions::sample_candidates).
  int candidate_draws = 0, whole_row_draws = 0;
};

// Runs prompt -> continuation. `on_token` (optional) sees each token as it is chosen.
GenerateResult generate(Runner& runner, const std::vector<int32_t>& prompt, const GenerateOptions& opts,
                        const std::function<void(int32_t)>& on_token = {});

}  // namespace kestrel
