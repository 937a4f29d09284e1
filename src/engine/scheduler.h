// Scheduler: continuous batching over one model.
//
// Requests join and leave between steps. Each step packs, under a token budget, one decode
// token for every sequence that is generating and then prefill chunks of the sequences still
// reading their prompts (oldest first). A request is admitted when a recurrent-state slot and
// the KV blocks for its prompt are free; when a step cannot get the blocks it needs, the newest
// sequence is preempted (its blocks and slot freed, its tokens recomputed later) instead of
// failing the others. With the prefix cache on, an admitted request first resumes from the
// longest cached prefix of its prompt (see prefix_cache.h).
//
// Deterministic mode (SchedulerConfig::deterministic, with a batch-invariant backend) makes a
// request's logits independent of the other requests: the kernels already compute each row alone,
// and what is left is where a sequence's steps end, since the DeltaNet state is rounded to F32
// at every step end (and at every 64-position grid point anyway). So a prompt chunk may end only
// on the 64-position grid or at the prompt's end, whatever budget the others leave; generated
// tokens recomputed after a preemption go one per step, as they were generated; and on models
// with DeltaNet layers the prefix cache keeps only work done on prompts (a generated span decoded
// token by token carries other roundings than the same text prefilled by a later request).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "engine/prefix_cache.h"
#include "engine/request.h"
#include "engine/runner.h"

namespace kestrel {

struct SchedulerConfig {
  int32_t max_running = 16;         // sequences decoding or prefilling at once
  int32_t max_step_tokens = 512;    // token budget of one step
  int32_t prefill_chunk = 256;      // most prompt tokens of one sequence per step
  bool prefix_cache = true;
  int32_t checkpoint_interval = 256;  // recurrent-state checkpoints (hybrid models), tokens
  int32_t max_checkpoints = 32;
  int64_t max_queue = 256;          // waiting requests beyond this are refused (submit returns null)
  bool deterministic = false;       // step ends that do not depend on the batch (see above); needs
                                    // prefill_chunk and max_step_tokens >= 64
  // Steps whose rows all sample without penalties, bias or logprobs (or are plain greedy) bring
  // back only each row's first sample_candidates tokens of its sampling order and its mass
  // (Runner::step_candidates; the same tokens as the whole rows, which come back for a row whose
  // walk goes further). 0: never; -1: 1024 when the logits live on a device, never on the CPU.
  int32_t sample_candidates = -1;
};

// State slots a scheduler with config `sc` gives a model: one per running sequence plus the
// prefix cache's checkpoints, when the model keeps per-sequence state; else none.
int32_t scheduler_slots(const ModelConfig& cfg, const SchedulerConfig& sc);

struct SchedulerMetrics {
  uint64_t requests_submitted = 0, requests_finished = 0, requests_cancelled = 0, requests_failed = 0;
  uint64_t prompt_tokens = 0, generated_tokens = 0, cached_prompt_tokens = 0, prefix_hits = 0;
  uint64_t preemptions = 0, steps = 0;
  // sampled rows drawn from their backend candidates, and those whose walk needed the whole row
  uint64_t candidate_rows = 0, candidate_whole_rows = 0;
  int64_t waiting = 0, running = 0;
  int32_t blocks_total = 0, blocks_free = 0, slots_total = 0, slots_free = 0;
  // latency samples since the last metrics() call, in seconds
  std::vector<double> ttft, itl;
};

class Scheduler {
 public:
  Scheduler(Model& model, CacheSizing sizing, SchedulerConfig config);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  const ModelConfig& model_config() const { return model_.config(); }
  const SchedulerConfig& config() const { return cfg_; }

  // Thread-safe. Returns null when the queue is full. Throws Error(kBadInput) for a request that
  // can never run (empty prompt, ids outside the vocabulary, longer than the cache).
  std::shared_ptr<Request> submit(std::vector<int32_t> prompt, RequestOptions options);

  // Runs one step on the calling thread; false when there was nothing to do.
  bool step();
  // Runs steps on a background thread until stop().
  void start();
  void stop();
  bool idle() const;

  SchedulerMetrics metrics(bool take_latencies = true);
  int64_t max_prompt_tokens() const;
  // Non-empty once the backend failed beyond recovery (a sticky device error): every request was
  // ended with that error and submit() refuses new ones. Thread-safe.
  std::string fault() const;

 private:
  struct Seq;
  void admit();
  void preempt_newest();
  void finish(Seq& s, FinishReason reason, const std::string& error = {});
  void release(Seq& s);
  // How many of s's cached tokens the prefix cache may share: all, or (deterministic mode, DeltaNet
  // models) only those of its prompt.
  int32_t shareable_tokens(const Seq& s) const;
  void reap_cancelled();
  void publish_cache_state();  // under mu_
  // A step failed with `e`: its sequences end with the error and give back what they held; when
  // the backend reports a fault, everything else ends too and the scheduler stops taking work.
  void fail_step(const std::vector<Seq*>& owners, const std::exception& e);
  // Ends every request (incoming, waiting, running) with `reason` and `why`. On the scheduler
  // thread, or after it has stopped.
  void end_all(FinishReason reason, const std::string& why);
  std::string fault_;  // guarded by mu_

  Model& model_;
  SchedulerConfig cfg_;
  Runner runner_;
  std::unique_ptr<PrefixCache> prefix_;
  int32_t slots_for_running_;
  bool share_prompts_only_ = false;  // deterministic mode on a model with DeltaNet layers
  int64_t candidate_count_ = 0;  // cfg_.sample_candidates resolved: 0 = the whole rows come back
  int64_t capacity_ = 0;  // tokens the KV pool holds

  mutable std::mutex mu_;  // guards incoming_, metrics_
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Request>> incoming_;
  SchedulerMetrics metrics_;
  uint64_t next_id_ = 1;

  // scheduler-thread state
  std::deque<std::unique_ptr<Seq>> waiting_;  // admitted order: front first
  std::vector<std::unique_ptr<Seq>> running_;
  uint64_t order_ = 0;
  std::thread thread_;
  std::atomic<bool> stop_{false};
};

}  // namespace kestrel
