// Shared checks of the golden suites: parity against a fixture's reference, and the chunking and
// batching invariants driven through Runner.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "engine/parity.h"
#include "engine/runner.h"
#include "model/loader.h"
#include "support/compare.h"
#include "support/fixture_model.h"
#include "support/paths.h"

namespace kestrel::test {


// Every prompt: logits, greedy-step logits and hidden states within `tolerance` of the
// reference's RMS (1e-4 unless a caller passes a measured float32 floor, see gemma4_golden_test.cc),
// greedy continuation identical (a flip only where the reference's top-2 gap is within our error).
// Prompts shorter than `floor_from_len` are always held to 1e-4.
inline void expect_parity(const std::string& family, double tolerance = 1e-4, int floor_from_len = 1 << 30) {
  FixtureModel fm(family);
  ParityReport r = run_parity(fm.model(), fm.dir + "/reference.safetensors", ParityOptions{});
  ASSERT_FALSE(r.prompts.empty());
  for (const auto& p : r.prompts) {
    SCOPED_TRACE(family + " prompt of length " + std::to_string(p.len));
    const double tol = p.len >= floor_from_len ? tolerance : 1e-4;
    EXPECT_LE(p.rel_err, tol);
    EXPECT_LE(p.step_rel_err, tol);
    if (p.hidden_rel_err >= 0) {
      EXPECT_LE(p.hidden_rel_err, tol);
    }
    if (!p.greedy_match) {
      EXPECT_TRUE(p.near_tie) << "greedy continuation diverges at step " << p.first_divergence
                              << " where the reference's top-2 gap is " << p.divergence_gap;
    }
  }
}

// A prompt of n tokens (deterministic, every id inside the vocabulary).
inline std::vector<int32_t> test_prompt(int n, int64_t vocab, int salt = 0) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back(int32_t((i * 37 + salt * 101 + 11) % vocab));
  return ids;
}

// Logits of every position of `ids`, prefilled in chunks of the given sizes (cycled).
inline std::vector<float> chunked_logits(Model& model, const std::vector<int32_t>& ids, const std::vector<int>& chunks) {
  Runner runner(model, cpu_cache_sizing(model.config(), 1, int64_t(ids.size()) + 1));
  SequenceState seq;
  runner.start(seq);
  std::vector<float> out;
  size_t pos = 0;
  for (size_t c = 0; pos < ids.size(); ++c) {
    size_t n = std::min(ids.size() - pos, size_t(chunks[c % chunks.size()]));
    const auto& l = runner.step({{.seq = &seq, .tokens = std::span<const int32_t>(ids.data() + pos, n), .all_logits = true}});
    out.insert(out.end(), l.begin(), l.end());
    pos += n;
  }
  runner.finish(seq);
  return out;
}

// Prefill in chunks of 1, 3, 16, 64 and uneven splits equals one pass within fp32 tolerance.
inline void expect_chunking_invariant(const std::string& family, int n_tokens,
                                      DType activations = DType::kF32) {
  FixtureModel fm(family, activations);
  auto ids = test_prompt(n_tokens, fm.model().config().vocab_size);
  auto whole = chunked_logits(fm.model(), ids, {n_tokens});
  for (const auto& chunks : std::vector<std::vector<int>>{{1}, {3}, {16}, {64}, {5, 17, 2, 40, 9}, {n_tokens - 1, 1}}) {
    auto got = chunked_logits(fm.model(), ids, chunks);
    ASSERT_EQ(got.size(), whole.size());
    EXPECT_LE(max_rel_diff(got, whole), 1e-5) << family << ": chunks starting with " << chunks[0];
  }
}

// Four sequences at different positions decoded in one batch give bit-identical logits to each
// decoded alone.
inline void expect_batching_invariant(const std::string& family, DType activations = DType::kF32) {
  FixtureModel fm(family, activations);
  Model& model = fm.model();
  const int64_t V = model.config().vocab_size;
  const std::vector<int> lens = {1, 9, 23, 70};  // past the sliding window for the longer ones
  const int steps = 3;
  // alone
  std::vector<std::vector<float>> alone(lens.size());
  for (size_t s = 0; s < lens.size(); ++s) {
    Runner runner(model, cpu_cache_sizing(model.config(), 1, lens[s] + steps + 1));
    SequenceState seq;
    runner.start(seq);
    auto ids = test_prompt(lens[s], V, int(s));
    runner.step({{.seq = &seq, .tokens = ids}});
    for (int i = 0; i < steps; ++i) {
      int32_t t = int32_t((s * 7 + i * 13) % V);
      const auto& l = runner.step({{.seq = &seq, .tokens = std::span<const int32_t>(&t, 1)}});
      alone[s].insert(alone[s].end(), l.begin(), l.end());
    }
    runner.finish(seq);
  }
  // together: prefill separately, then decode all four in each step
  Runner runner(model, cpu_cache_sizing(model.config(), int32_t(lens.size()), 70 + steps + 1));
  std::vector<SequenceState> seqs(lens.size());
  std::vector<std::vector<int32_t>> prompts;
  for (size_t s = 0; s < lens.size(); ++s) {
    runner.start(seqs[s]);
    prompts.push_back(test_prompt(lens[s], V, int(s)));
    runner.step({{.seq = &seqs[s], .tokens = prompts[s]}});
  }
  std::vector<std::vector<float>> together(lens.size());
  std::vector<int32_t> toks(lens.size());
  for (int i = 0; i < steps; ++i) {
    std::vector<StepItem> items;
    for (size_t s = 0; s < lens.size(); ++s) {
      toks[s] = int32_t((s * 7 + i * 13) % V);
      items.push_back({.seq = &seqs[s], .tokens = std::span<const int32_t>(&toks[s], 1)});
    }
    const auto& l = runner.step(items);
    for (size_t s = 0; s < lens.size(); ++s)
      together[s].insert(together[s].end(), l.begin() + long(s) * V, l.begin() + long(s + 1) * V);
  }
  for (size_t s = 0; s < lens.size(); ++s) {
    EXPECT_EQ(alone[s], together[s]) << family << ": sequence " << s << " (prompt length " << lens[s] << ")";
  }
}

}  // namespace kestrel::test
