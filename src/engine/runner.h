// Runner: drives a Model and its cache one step at a time for any number of sequences.
//
// A sequence is a SequenceState: its KV block table, its recurrent-state slot and how many of
// its tokens are cached. step() builds the StepPlan for a batch of (sequence, new tokens)
// items, reserves the blocks they need, runs the forward pass and returns the logits rows.
//
// Decode steps as graphs: when the backend records step graphs (ops/step_graphs.h: CudaOps) and
// the model allows it (Model::graph_blocker), a decode step — every item one token, each with its
// logits, no hidden capture — runs from a graph recorded for its row count (its bucket): the
// first two steps of a bucket run eagerly (they grow scratch, workspace and pointer tables to
// their size), the third is recorded and launched, later ones replay it after uploading their
// plan. A graph gone stale (device memory moved) is recorded again the same way; a capture that
// fails runs its step eagerly, and a bucket whose capture failed 3 times stays eager. Other steps
// (prefill chunks, mixed steps) always run eagerly. graph_stats() says what happened.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cache/model_cache.h"
#include "engine/sampler.h"
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

// What the decode steps of a Runner ran as (see the header comment).
struct GraphStats {
  int64_t replayed = 0;  // decode steps replayed from a graph
  int64_t recorded = 0;  // decode steps recorded as a graph (and launched)
  int64_t eager = 0;     // decode steps run eagerly (warm-up, failed captures, graphs off)
  std::string off;       // why graphs are not used at all (empty when they are)
  std::string failure;   // the last capture failure, if any
};

class StepGraphs;

class Runner {
 public:
  Runner(Model& model, CacheSizing sizing);
  ~Runner();
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

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
  // step_argmax without bringing the ids back: the host does not wait for the step, so steps
  // queue on the backend back to back (kestrel bench --queue-steps: a step's device time with the
  // host's turnaround off the chain). The caller picks the next tokens without this step's.
  void queue_step_argmax(const std::vector<StepItem>& items);
  // The same step, each requested row reduced on the backend to the first m tokens of its
  // sampling order at temperatures[r] and the mass of its weights (Ops::sample_candidates), which
  // Sampler::sample_candidates draws from: m * 8 bytes a row come back instead of the vocabulary's
  // logits. The logits stay on the backend until the next step (row_logits).
  struct Candidates {
    int64_t m = 0;
    std::vector<int32_t> ids;   // [rows, m]
    std::vector<float> scaled;  // [rows, m]
    std::vector<double> mass;   // [rows]
    SampleCandidates row(int64_t r) const {
      return {std::span<const int32_t>(ids).subspan(size_t(r * m), size_t(m)),
              std::span<const float>(scaled).subspan(size_t(r * m), size_t(m)), mass[size_t(r)]};
    }
  };
  const Candidates& step_candidates(const std::vector<StepItem>& items, std::span<const float> temperatures, int64_t m);
  // The candidate count a sample_candidates setting means on a backend: -1 (auto) 1024 on a device
  // and 0 (off) on the CPU, whose logits are already in host memory; 0 off; else the count, at
  // most kMaxSampleCandidates. Other settings are refused, naming `who`.
  static constexpr int kMaxSampleCandidates = 4096;
  static int64_t candidate_count(int setting, Device device, const char* who);
  // Row r of the logits of the last step_candidates() (vocab_size floats into dst).
  void row_logits(int64_t r, float* dst);
  const StepPlan& last_plan() const { return plan_; }
  const GraphStats& graph_stats() const { return graph_stats_; }

 private:
  Model& model_;
  ModelCache cache_;
  StepPlan plan_;
  // Reserves the items' blocks, runs the forward pass, returns the logits rows on the backend.
  Tensor forward(const std::vector<StepItem>& items, HiddenCapture* capture);
  // The forward pass and each requested row's argmax, the ids left on the backend.
  Tensor argmax_ids(const std::vector<StepItem>& items);
  // Runs plan_ as a decode step from a graph (replayed or recorded now); false when it must run
  // eagerly (then counted as such).
  bool run_graph(const std::vector<StepItem>& items, const Tensor& out);

  struct Bucket {
    bool recorded = false;  // a graph exists (it may have gone stale)
    int eager_runs = 0;     // eager steps since the last recording or failure
    int failures = 0;
  };
  StepGraphs* graphs_ = nullptr;  // the backend's, when it records step graphs
  std::map<int32_t, Bucket> buckets_;  // by row count
  GraphStats graph_stats_;

  Buffer logits_, ids_;
  std::vector<float> host_logits_;
  std::vector<int32_t> host_ids_;
  Buffer cand_;                   // step_candidates' results, packed (see there)
  std::vector<double> cand_host_;  // and their copy on the host
  Candidates candidates_;
  Tensor last_logits_;  // step_candidates' rows, on the backend
};

// Sizes a CPU cache for `max_seqs` sequences of up to `max_tokens` tokens each.
CacheSizing cpu_cache_sizing(const ModelConfig& cfg, int32_t max_seqs, int64_t max_tokens);

}  // namespace kestrel
