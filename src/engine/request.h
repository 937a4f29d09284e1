// Request: one generation request as the scheduler sees it, shared with whoever submitted it.
//
// The submitter (an HTTP handler, the chat CLI, a test) waits for events — new tokens and the
// final outcome — and may cancel at any time; the scheduler thread produces them.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/sampler.h"

namespace kestrel {

enum class FinishReason { kNone, kStop, kLength, kCancelled, kError };
const char* finish_reason_name(FinishReason reason);  // "stop", "length", "cancelled", "error"

struct RequestOptions {
  int max_tokens = 16;
  SamplingParams sampling;
  std::vector<int32_t> stop_token_ids;  // besides the model's EOS ids (unless ignore_eos)
  bool ignore_eos = false;
  int top_logprobs = -1;                // -1: no logprobs; k >= 0: the chosen token's and the top k
};

struct TokenOut {
  int32_t token = 0;
  float logprob = 0;                            // valid when logprobs were asked for
  std::vector<std::pair<int32_t, float>> top;  // the top_logprobs most likely tokens
};

class Request {
 public:
  using clock = std::chrono::steady_clock;

  Request(uint64_t id, std::vector<int32_t> prompt, RequestOptions opts)
      : id_(id), prompt_(std::move(prompt)), opts_(std::move(opts)), queued_at_(clock::now()) {}

  uint64_t id() const { return id_; }
  const std::vector<int32_t>& prompt() const { return prompt_; }
  const RequestOptions& options() const { return opts_; }

  // Waits up to `timeout` for news; moves new tokens into `out` (appending). Returns the finish
  // reason (kNone while still running).
  FinishReason wait(std::vector<TokenOut>& out, std::chrono::milliseconds timeout);
  // Asks the scheduler to stop this request; it is aborted within one step.
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }
  std::string error() const;

  // Prefix-cache outcome, known once the request is admitted.
  int cached_tokens() const { return cached_tokens_; }
  std::string prefix_note() const;
  bool admitted() const { return admitted_; }

  // ---- scheduler side ----
  void on_admitted(int cached_tokens, std::string note);
  void push(TokenOut token);
  void finish(FinishReason reason, std::string error = {});
  clock::time_point queued_at() const { return queued_at_; }

 private:
  uint64_t id_;
  std::vector<int32_t> prompt_;
  RequestOptions opts_;
  clock::time_point queued_at_;
  std::atomic<bool> cancelled_{false};
  std::atomic<bool> admitted_{false};
  std::atomic<int> cached_tokens_{0};

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<TokenOut> pending_;
  FinishReason finish_ = FinishReason::kNone;
  std::string error_, prefix_note_;
};

}  // namespace kestrel
