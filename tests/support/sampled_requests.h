// The sampled-request schedule the device-candidate tests run on the CPU and CUDA backends alike:
// requests cycling through sampling settings, greedy among them, run to completion.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "engine/scheduler.h"

namespace kestrel::test {

// Nucleus with top-k and min-p, plain temperature, a hot narrow nucleus, and greedy.
inline std::vector<SamplingParams> mixed_sampling_kinds() {
  return {
      {.temperature = 0.9f, .top_k = 50, .top_p = 0.95f, .min_p = 0.01f, .seed = 42},
      {.temperature = 1.0f, .seed = 7},
      {.temperature = 1.7f, .top_p = 0.8f, .seed = 9},
      {},  // greedy
  };
}

// Submits prompt i with mixed_sampling_kinds()[i % 4] and max_tokens (ignoring EOS), steps the
// scheduler until it is idle, and returns each request's tokens in submission order.
inline std::vector<std::vector<int32_t>> sample_to_completion(Scheduler& sched,
                                                              const std::vector<std::vector<int32_t>>& prompts,
                                                              int max_tokens) {
  const std::vector<SamplingParams> kinds = mixed_sampling_kinds();
  std::vector<std::shared_ptr<Request>> reqs;
  for (size_t i = 0; i < prompts.size(); ++i)
    reqs.push_back(sched.submit(prompts[i], {.max_tokens = max_tokens, .sampling = kinds[i % kinds.size()],
                                             .ignore_eos = true}));
  for (int guard = 0; guard < 10000 && !sched.idle(); ++guard) sched.step();
  std::vector<std::vector<int32_t>> got;
  for (auto& r : reqs) {
    std::vector<TokenOut> out;
    r->wait(out, std::chrono::milliseconds(0));
    got.emplace_back();
    for (auto& t : out) got.back().push_back(t.token);
  }
  return got;
}

}  // namespace kestrel::test
