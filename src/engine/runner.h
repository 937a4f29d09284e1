// Runner: drives a Model and its cache one step at a time for any number of sequences.
//
// A sequence is a SequenceState: its KV block table, its recurrent-state slot and how many of
// its tokens are cached. step() builds the StepPlan for a batch of (sequence, new tokens)
// items, reserves the blocks they need, runs the forward pass and returns the logits rows.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "cache/model_cache.h"
#include "model/model.h"

namespace kestrel {

struct SequenceState {
  std::vector<int32_t> blocks;  // KV block table
  int32_t slot = -1;            // recurrent-state slot
  int32_t n_cached = 0;         // tokens already in the cache
  bool live = false;
};

struct StepItem {
  SequenceState* seq = nullptr;
  std::span<const int32_t> tokens;  // new tokens
  bool all_logits = false;          // logits of every new token (else: only the last)
  bool no_logits = false;           // no logits at all (an intermediate prefill chunk)
};

class Runner {
 public:
  Runner(Model& model, CacheSizing sizing);

  Model& model() { return model_; }
  ModelCache& cache() { return cache_; }

  // Takes a recurrent-state slot (if the model needs one). Error(kOutOfMemory) when none is free.
  void start(SequenceState& seq);
  // Releases the sequence's blocks and slot.
  void finish(SequenceState& seq);

  // Runs one step. Returns host logits, one row of vocab_size floats per requested row, in item
  // order. Error(kOutOfMemory) when the KV pool cannot hold the new tokens (nothing is changed).
  const std::vector<float>& step(const std::vector<StepItem>& items, HiddenCapture* capture = nullptr);
  // The same step, returning for each requested row only the index of its largest logit (the
  // sampler's argmax, computed on the backend): greedy decoding without bringing the logits back.
  const std::vector<int32_t>& step_argmax(const std::vector<StepItem>& items);
  const StepPlan& last_plan() const { return plan_; }

 private:
  Model& model_;
  ModelCache cache_;
  StepPlan plan_;
  // Reserves the items' blocks, runs the forward pass, returns the logits rows on the backend.
  Tensor forward(const std::vector<StepItem>& items, HiddenCapture* capture);

  Buffer logits_, ids_;
  std::vector<float> host_logits_;
  std::vector<int32_t> host_ids_;
};

// Sizes a CPU cache for `max_seqs` sequences of up to `max_tokens` tokens each.
CacheSizing cpu_cache_sizing(const ModelConfig& cfg, int32_t max_seqs, int64_t max_tokens);

}  // namespace kestrel
