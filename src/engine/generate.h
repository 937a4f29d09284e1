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
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated tokens (including a final stop token)
  bool stopped = false;         // ended on a stop token (else: max_new_tokens)
  double prefill_seconds = 0, decode_seconds = 0;
};

// Runs prompt -> continuation. `on_token` (optional) sees each token as it is chosen.
GenerateResult generate(Runner& runner, const std::vector<int32_t>& prompt, const GenerateOptions& opts,
                        const std::function<void(int32_t)>& on_token = {});

}  // namespace kestrel
