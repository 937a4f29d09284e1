#include "engine/generate.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace kestrel {

GenerateResult generate(Runner& runner, const std::vector<int32_t>& prompt, const GenerateOptions& opts,
                        const std::function<void(int32_t)>& on_token) {
  if (prompt.empty()) bad_input("the prompt is empty: give at least one token");
  const int64_t V = runner.model().config().vocab_size;
  for (int32_t id : prompt) {
    if (id < 0 || id >= V) bad_input("prompt token id ", id, " is outside the vocabulary [0, ", V, ")");
  }
  using clock = std::chrono::steady_clock;
  GenerateResult res;
  SequenceState seq;
  runner.start(seq);
  struct Finish {
    Runner& r;
    SequenceState& s;
    ~Finish() { r.finish(s); }
  } finish{runner, seq};
  Sampler sampler(opts.sampling);

  auto t0 = clock::now();
  std::vector<float> last;
  const size_t chunk = size_t(std::max(1, opts.prefill_chunk));
  for (size_t begin = 0; begin < prompt.size(); begin += chunk) {
    const size_t n = std::min(chunk, prompt.size() - begin);
    const bool final_chunk = begin + n == prompt.size();
    const auto& logits = runner.step(
        {{.seq = &seq, .tokens = std::span<const int32_t>(prompt.data() + begin, n), .no_logits = !final_chunk}});
    if (final_chunk) last = logits;
  }
  auto t1 = clock::now();
  res.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();
  for (int i = 0; i < opts.max_new_tokens; ++i) {
    int32_t tok = sampler.sample(last.data(), V);
    res.tokens.push_back(tok);
    if (on_token) on_token(tok);
    if (std::find(opts.stop_token_ids.begin(), opts.stop_token_ids.end(), tok) != opts.stop_token_ids.end()) {
      res.stopped = true;
      break;
    }
    if (i + 1 == opts.max_new_tokens) break;
    last = runner.step({{.seq = &seq, .tokens = std::span<const int32_t>(&tok, 1)}});
  }
  res.decode_seconds = std::chrono::duration<double>(clock::now() - t1).count();
  return res;
}

}  // namespace kestrel
