#include "engine/generate.h"

#include <algorithm>
#include <chrono>
#include <optional>

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

  const int64_t candidates =
      Runner::candidate_count(opts.sample_candidates, runner.model().ops().device(), "generate");
  // Plain greedy decoding picks the token on the backend (no logits come back to the host);
  // sampling without penalties or bias draws from the row's first candidates (the same token).
  const bool on_backend = sampler.plain_greedy();
  const bool by_candidates = !on_backend && candidates > 0 && sampler.candidates_apply();
  const float temperature[1] = {sampler.params().temperature};
  std::vector<float> row;  // a whole row, when a draw walks past the candidates
  int32_t next = -1;
  auto step = [&](std::span<const int32_t> tokens, bool logits) {
    const StepItem item{.seq = &seq, .tokens = tokens, .no_logits = !logits};
    if (on_backend) {
      const auto& ids = runner.step_argmax({item});
      if (logits) next = ids[0];
    } else if (by_candidates && logits) {
      const Runner::Candidates& c = runner.step_candidates({item}, temperature, candidates);
      ++res.candidate_draws;
      if (const std::optional<int32_t> t = sampler.sample_candidates(c.row(0), V)) {
        next = *t;
      } else {
        ++res.whole_row_draws;
        row.resize(size_t(V));
        runner.row_logits(0, row.data());
        next = sampler.sample(row.data(), V, prompt, res.tokens);
      }
    } else {
      const auto& l = runner.step({item});
      if (logits) next = sampler.sample(l.data(), V, prompt, res.tokens);  // penalties see both
    }
  };
  auto t0 = clock::now();
  const size_t chunk = size_t(std::max(1, opts.prefill_chunk));
  for (size_t begin = 0; begin < prompt.size(); begin += chunk) {
    const size_t n = std::min(chunk, prompt.size() - begin);
    step(std::span<const int32_t>(prompt.data() + begin, n), begin + n == prompt.size());
  }
  auto t1 = clock::now();
  res.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();
  for (int i = 0; i < opts.max_new_tokens; ++i) {
    const int32_t tok = next;
    res.tokens.push_back(tok);
    if (on_token) on_token(tok);
    if (std::find(opts.stop_token_ids.begin(), opts.stop_token_ids.end(), tok) != opts.stop_token_ids.end()) {
      res.stopped = true;
      break;
    }
    if (i + 1 == opts.max_new_tokens) break;
    step(std::span<const int32_t>(&tok, 1), true);
  }
  res.decode_seconds = std::chrono::duration<double>(clock::now() - t1).count();
  return res;
}

}  // namespace kestrel
