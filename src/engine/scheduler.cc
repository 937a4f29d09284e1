#include "engine/scheduler.h"

#include <algorithm>
#include <mutex>
#include <optional>

#include "core/error.h"
#include "core/thread_pool.h"

namespace kestrel {

struct Scheduler::Seq {
  std::shared_ptr<Request> req;
  SequenceState state;
  Sampler sampler;
  std::vector<int32_t> tokens;  // prompt, then generated tokens
  int32_t n_prompt = 0;
  int32_t n_generated = 0;
  uint64_t order = 0;
  bool admitted_once = false;
  Request::clock::time_point last_token_at;

  Seq(std::shared_ptr<Request> r, uint64_t o)
      : req(std::move(r)), sampler(req->options().sampling), tokens(req->prompt()),
        n_prompt(int32_t(tokens.size())), order(o) {}
};

namespace {

CacheSizing with_slots(const ModelConfig& cfg, CacheSizing sizing, const SchedulerConfig& sc) {
  sizing.n_slots = scheduler_slots(cfg, sc);
  return sizing;
}

constexpr int64_t kStepGrid = 64;  // the DeltaNet chunk grid: its state is rounded to F32 there anyway

// Deterministic mode: how many of the n prompt tokens offered to a sequence with n_cached of its
// tokens cached (n_prompt of them its prompt) the step takes, so that its steps end where they
// would with no other sequence: inside the prompt only on the grid, else at the prompt's end;
// past the prompt (tokens recomputed after a preemption) after every token. 0: not this step
// (the budget left does not reach the next grid point).
int64_t deterministic_chunk(int64_t n_cached, int64_t n_prompt, int64_t n) {
  if (n_cached >= n_prompt) return 1;
  const int64_t end = std::min(n_cached + n, n_prompt);
  if (end == n_prompt) return end - n_cached;
  return end / kStepGrid * kStepGrid - n_cached;
}

}  // namespace

int32_t scheduler_slots(const ModelConfig& cfg, const SchedulerConfig& sc) {
  return cfg.has_sequence_state() ? sc.max_running + (sc.prefix_cache ? sc.max_checkpoints : 0) : 0;
}

Scheduler::Scheduler(Model& model, CacheSizing sizing, SchedulerConfig config)
    : model_(model), cfg_(config), runner_(model, with_slots(model.config(), sizing, config)),
      slots_for_running_(config.max_running) {
  if (cfg_.max_running < 1 || cfg_.max_step_tokens < 1 || cfg_.prefill_chunk < 1)
    bad_input("scheduler: max_running, max_step_tokens and prefill_chunk must be positive");
  if (cfg_.deterministic && (cfg_.max_step_tokens < kStepGrid || cfg_.prefill_chunk < kStepGrid))
    bad_input("scheduler: deterministic mode needs a step budget and prefill chunk of at least ", kStepGrid,
              " tokens (prompt chunks end on the ", kStepGrid, "-token grid), got ", cfg_.max_step_tokens, " and ",
              cfg_.prefill_chunk);
  share_prompts_only_ = cfg_.deterministic && model.config().count_layers(LayerKind::kLinearAttention) > 0;
  candidate_count_ = Runner::candidate_count(cfg_.sample_candidates, model.ops().device(), "scheduler");
  const bool has_state = model.config().has_sequence_state();
  if (cfg_.prefix_cache) {
    const int32_t bs = sizing.block_size;
    int32_t interval = std::max(cfg_.checkpoint_interval, 64);
    interval = (interval + 63) / 64 * 64;
    while (interval % bs != 0) interval += 64;
    prefix_ = std::make_unique<PrefixCache>(runner_.cache(), has_state, interval, cfg_.max_checkpoints);
  }
  capacity_ = int64_t(sizing.n_blocks) * sizing.block_size;
  publish_cache_state();
}

Scheduler::~Scheduler() { stop(); }

int64_t Scheduler::max_prompt_tokens() const { return capacity_; }

void Scheduler::publish_cache_state() {
  ModelCache& cache = runner_.cache();
  metrics_.blocks_total = cache.sizing().n_blocks;
  metrics_.blocks_free = cache.free_blocks();
  metrics_.slots_total = cache.sizing().n_slots;
  metrics_.slots_free = cache.free_slots();
  metrics_.waiting = int64_t(waiting_.size());
  metrics_.running = int64_t(running_.size());
}

std::shared_ptr<Request> Scheduler::submit(std::vector<int32_t> prompt, RequestOptions options) {
  const int64_t V = model_.config().vocab_size;
  if (prompt.empty()) bad_input("the prompt is empty");
  for (int32_t t : prompt) {
    if (t < 0 || t >= V) bad_input("prompt token id ", t, " is outside the vocabulary [0, ", V, ")");
  }
  if (options.max_tokens < 1) bad_input("max_tokens must be at least 1");
  const int64_t capacity = max_prompt_tokens();
  if (int64_t(prompt.size()) + options.max_tokens > capacity)
    bad_input("prompt (", prompt.size(), " tokens) plus max_tokens (", options.max_tokens,
              ") exceeds the KV cache capacity of ", capacity, " tokens");
  std::lock_guard<std::mutex> lock(mu_);
  if (!fault_.empty()) fail(ErrorKind::kInternal, fault_);
  if (metrics_.waiting + int64_t(incoming_.size()) >= cfg_.max_queue) return nullptr;
  auto req = std::make_shared<Request>(next_id_++, std::move(prompt), std::move(options));
  incoming_.push_back(req);
  ++metrics_.requests_submitted;
  metrics_.prompt_tokens += req->prompt().size();
  wake_.notify_one();
  return req;
}

int32_t Scheduler::shareable_tokens(const Seq& s) const {
  return share_prompts_only_ ? std::min(s.state.n_cached, s.n_prompt) : s.state.n_cached;
}

void Scheduler::release(Seq& s) {
  if (prefix_) prefix_->register_blocks(s.tokens, s.state.blocks, shareable_tokens(s));
  runner_.finish(s.state);
}

void Scheduler::finish(Seq& s, FinishReason reason, const std::string& error) {
  release(s);
  s.req->finish(reason, error);
  std::lock_guard<std::mutex> lock(mu_);
  ++metrics_.requests_finished;
  if (reason == FinishReason::kCancelled) ++metrics_.requests_cancelled;
  if (reason == FinishReason::kError) ++metrics_.requests_failed;
}

void Scheduler::reap_cancelled() {
  for (auto it = running_.begin(); it != running_.end();) {
    if ((*it)->req->cancelled()) {
      finish(**it, FinishReason::kCancelled);
      it = running_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if ((*it)->req->cancelled()) {
      finish(**it, FinishReason::kCancelled);
      it = waiting_.erase(it);
    } else {
      ++it;
    }
  }
}

void Scheduler::admit() {
  ModelCache& cache = runner_.cache();
  const int32_t bs = cache.sizing().block_size;
  while (!waiting_.empty() && int32_t(running_.size()) < cfg_.max_running) {
    Seq& s = *waiting_.front();
    // With nothing running, nothing will free what this request lacks: refuse it rather than
    // leave it (and everything queued behind it) waiting for ever.
    const int64_t total_need = (int64_t(s.tokens.size()) + bs) / bs;
    if (running_.empty() && ((cache.needs_slots() && cache.sizing().n_slots == 0) ||
                             total_need > cache.sizing().n_blocks)) {
      finish(s, FinishReason::kError,
             cat("the request needs ", total_need, " KV blocks and a state slot but the cache has ",
                 cache.sizing().n_blocks, " blocks and ", cache.sizing().n_slots, " slots"));
      waiting_.pop_front();
      continue;
    }
    if (cache.needs_slots() && cache.free_slots() == 0) {
      if (!prefix_ || !prefix_->drop_oldest_checkpoint()) break;
    }
    PrefixMatch m;
    if (prefix_) m = prefix_->match(s.tokens);
    const int64_t need = total_need - int64_t(m.blocks.size());
    if (need > cache.free_blocks()) {
      cache.release(m.blocks);
      break;  // wait for running sequences to finish (or be preempted)
    }
    runner_.start(s.state);
    s.state.blocks = std::move(m.blocks);
    s.state.n_cached = m.tokens;
    if (m.checkpoint_slot >= 0) cache.copy_slot(s.state.slot, m.checkpoint_slot);
    if (!s.admitted_once) {
      s.admitted_once = true;
      s.req->on_admitted(m.tokens, m.note);
      std::lock_guard<std::mutex> lock(mu_);
      metrics_.cached_prompt_tokens += uint64_t(m.tokens);
      if (m.tokens > 0) ++metrics_.prefix_hits;
    }
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
}

void Scheduler::preempt_newest() {
  auto newest = std::max_element(running_.begin(), running_.end(),
                                 [](const auto& a, const auto& b) { return a->order < b->order; });
  std::unique_ptr<Seq> s = std::move(*newest);
  running_.erase(newest);
  release(*s);  // its full blocks stay in the prefix cache, so recomputing it can reuse them
  waiting_.push_front(std::move(s));
  std::lock_guard<std::mutex> lock(mu_);
  ++metrics_.preemptions;
}

bool Scheduler::step() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    while (!incoming_.empty()) {
      waiting_.push_back(std::make_unique<Seq>(std::move(incoming_.front()), ++order_));
      incoming_.pop_front();
    }
  }
  reap_cancelled();
  admit();
  if (running_.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    publish_cache_state();
    return false;
  }
  const int64_t V = model_.config().vocab_size;
  const bool align = prefix_ && runner_.cache().needs_slots();
  std::vector<StepItem> items;
  std::vector<Seq*> owners;
  for (;;) {
    items.clear();
    owners.clear();
    int32_t budget = cfg_.max_step_tokens;
    for (auto& s : running_) {  // decode tokens first
      const int64_t remaining = int64_t(s->tokens.size()) - s->state.n_cached;
      if (remaining == 1 && budget > 0) {
        items.push_back({.seq = &s->state, .tokens = std::span<const int32_t>(s->tokens).subspan(size_t(s->state.n_cached))});
        owners.push_back(s.get());
        --budget;
      }
    }
    for (auto& s : running_) {  // then prompt chunks, oldest first
      const int64_t remaining = int64_t(s->tokens.size()) - s->state.n_cached;
      if (remaining <= 1 || budget <= 0) continue;
      int64_t n = std::min<int64_t>({remaining, cfg_.prefill_chunk, budget});
      if (align && n < remaining) {  // end on a checkpoint position when one is crossed
        const int64_t iv = prefix_->checkpoint_interval();
        const int64_t boundary = (s->state.n_cached / iv + 1) * iv;
        if (s->state.n_cached + n > boundary) n = boundary - s->state.n_cached;
      }
      if (cfg_.deterministic) {
        n = deterministic_chunk(s->state.n_cached, s->n_prompt, n);
        if (n <= 0) continue;
      }
      items.push_back({.seq = &s->state,
                       .tokens = std::span<const int32_t>(s->tokens).subspan(size_t(s->state.n_cached), size_t(n)),
                       .no_logits = n < remaining});
      owners.push_back(s.get());
      budget -= int32_t(n);
    }
    try {
      // When every row is plain greedy without logprobs, the tokens are picked on the backend and
      // no logits come back to the host.
      // When every row is plain greedy or samples without penalties or bias (and none wants
      // logprobs), the backend reduces each row to its first candidates (step_candidates).
      bool on_backend = true, by_candidates = candidate_count_ > 0;
      std::vector<float> temperatures;
      for (size_t i = 0; i < items.size(); ++i) {
        if (items[i].no_logits) continue;
        const Sampler& sm = owners[i]->sampler;
        const bool no_logprobs = owners[i]->req->options().top_logprobs < 0;
        on_backend = on_backend && sm.plain_greedy() && no_logprobs;
        by_candidates = by_candidates && no_logprobs && (sm.plain_greedy() || sm.candidates_apply());
        temperatures.push_back(sm.plain_greedy() ? 1.0f : sm.params().temperature);  // greedy: the top at t = 1 is the argmax
      }
      by_candidates = by_candidates && !on_backend;
      static const std::vector<float> kNoLogits;
      static const std::vector<int32_t> kNoIds;
      const std::vector<int32_t>& ids = on_backend ? runner_.step_argmax(items) : kNoIds;
      const Runner::Candidates* cands =
          by_candidates ? &runner_.step_candidates(items, temperatures, candidate_count_) : nullptr;
      const std::vector<float>& logits = on_backend || by_candidates ? kNoLogits : runner_.step(items);
      // Sample every row, in parallel: each sequence has its own sampler (and random stream), and
      // the rows are independent. The backend is idle here (the step has returned).
      std::vector<size_t> row_item;  // the item behind each logit row
      for (size_t i = 0; i < items.size(); ++i) {
        if (!items[i].no_logits) row_item.push_back(i);
      }
      std::vector<TokenOut> outs(row_item.size());
      std::vector<int64_t> whole_rows;  // candidate rows whose walk went past their candidates
      std::mutex whole_mu;
      auto sample_rows = [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          Seq& s = *owners[row_item[size_t(r)]];
          TokenOut& out = outs[size_t(r)];
          if (on_backend) {
            out.token = ids[size_t(r)];
            continue;
          }
          if (cands) {
            const SampleCandidates c = cands->row(r);
            std::optional<int32_t> t = s.sampler.plain_greedy() ? std::optional<int32_t>(c.ids[0])
                                                                : s.sampler.sample_candidates(c, V);
            if (t) {
              out.token = *t;
            } else {
              std::lock_guard<std::mutex> lock(whole_mu);
              whole_rows.push_back(r);
            }
            continue;
          }
          const float* l = logits.data() + size_t(r) * size_t(V);
          std::span<const int32_t> all(s.tokens);
          out.token = s.sampler.sample(l, V, all.first(size_t(s.n_prompt)), all.subspan(size_t(s.n_prompt)));
          const int k = s.req->options().top_logprobs;
          if (k >= 0) {
            const double lse = log_sum_exp(l, V);
            out.logprob = token_logprob(l, V, out.token, lse);
            if (k > 0) out.top = top_logprobs(l, V, k, lse);
          }
        }
      };
      if (on_backend || row_item.size() < 2) {
        sample_rows(0, int64_t(row_item.size()));
      } else {
        ThreadPool::global().parallel_for(int64_t(row_item.size()), sample_rows);
      }
      if (cands) {
        std::lock_guard<std::mutex> lock(mu_);
        metrics_.candidate_rows += row_item.size();
        metrics_.candidate_whole_rows += whole_rows.size();
      }
      if (!whole_rows.empty()) {  // their logits from the backend, and sample() as usual
        std::vector<float> l(static_cast<size_t>(V));
        for (int64_t r : whole_rows) {
          Seq& s = *owners[row_item[size_t(r)]];
          runner_.row_logits(r, l.data());
          std::span<const int32_t> all(s.tokens);
          outs[size_t(r)].token = s.sampler.sample(l.data(), V, all.first(size_t(s.n_prompt)), all.subspan(size_t(s.n_prompt)));
        }
      }
      size_t row = 0;
      const auto now = Request::clock::now();
      std::vector<Seq*> done;
      std::vector<FinishReason> why;
      for (size_t i = 0; i < items.size(); ++i) {
        Seq& s = *owners[i];
        if (prefix_) {
          const int32_t shared = shareable_tokens(s);
          prefix_->register_blocks(s.tokens, s.state.blocks, shared);
          const int32_t spare = runner_.cache().free_slots() - (cfg_.max_running - int32_t(running_.size()));
          if (shared == s.state.n_cached) prefix_->maybe_checkpoint(s.tokens, s.state.n_cached, s.state.slot, spare);
        }
        if (items[i].no_logits) continue;
        TokenOut out = std::move(outs[row++]);
        const int32_t tok = out.token;
        s.tokens.push_back(tok);
        ++s.n_generated;
        {
          std::lock_guard<std::mutex> lock(mu_);
          ++metrics_.generated_tokens;
          const auto& since = s.n_generated == 1 ? s.req->queued_at() : s.last_token_at;
          (s.n_generated == 1 ? metrics_.ttft : metrics_.itl).push_back(std::chrono::duration<double>(now - since).count());
        }
        s.last_token_at = now;
        s.req->push(std::move(out));
        const auto& o = s.req->options();
        const auto& eos = model_.config().eos_token_ids;
        const bool stop = std::find(o.stop_token_ids.begin(), o.stop_token_ids.end(), tok) != o.stop_token_ids.end() ||
                          (!o.ignore_eos && std::find(eos.begin(), eos.end(), tok) != eos.end());
        if (stop || s.n_generated >= o.max_tokens) {
          done.push_back(&s);
          why.push_back(stop ? FinishReason::kStop : FinishReason::kLength);
        }
      }
      for (size_t i = 0; i < done.size(); ++i) {
        finish(*done[i], why[i]);
        running_.erase(std::find_if(running_.begin(), running_.end(), [&](const auto& p) { return p.get() == done[i]; }));
      }
      break;
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kOutOfMemory) {
        fail_step(owners, e);
        break;
      }
      if (running_.size() > 1) {
        preempt_newest();
        continue;
      }
      finish(*running_.front(), FinishReason::kError, e.what());
      running_.clear();
      break;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  ++metrics_.steps;
  publish_cache_state();
  return true;
}

std::string Scheduler::fault() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fault_;
}

void Scheduler::fail_step(const std::vector<Seq*>& owners, const std::exception& e) {
  for (Seq* s : owners) {
    auto it = std::find_if(running_.begin(), running_.end(), [&](const auto& p) { return p.get() == s; });
    if (it == running_.end()) continue;
    finish(*s, FinishReason::kError, cat("the step computing this request failed: ", e.what()));
    running_.erase(it);
  }
  const std::string fault = model_.ops().device_fault();
  if (fault.empty()) return;
  const std::string why = cat("the ", model_.ops().name(), " device failed (", fault, "); the engine stopped");
  {
    std::lock_guard<std::mutex> lock(mu_);
    fault_ = why;  // submit() refuses from here on
  }
  end_all(FinishReason::kError, why);
}

void Scheduler::end_all(FinishReason reason, const std::string& why) {
  std::deque<std::shared_ptr<Request>> incoming;
  {
    std::lock_guard<std::mutex> lock(mu_);
    incoming.swap(incoming_);
  }
  for (auto& r : incoming) r->finish(reason, why);
  for (auto& s : running_) finish(*s, reason, why);
  for (auto& s : waiting_) finish(*s, reason, why);
  running_.clear();
  waiting_.clear();
}

void Scheduler::start() {
  stop_ = false;
  thread_ = std::thread([this] {
    while (!stop_) {
      bool worked = false;
      try {
        worked = step();
      } catch (const std::exception& e) {
        // A failed step poisons only the sequences in it.
        for (auto& s : running_) finish(*s, FinishReason::kError, e.what());
        running_.clear();
        std::lock_guard<std::mutex> lock(mu_);
        publish_cache_state();
      }
      if (!worked) {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait_for(lock, std::chrono::milliseconds(20), [this] { return stop_ || !incoming_.empty(); });
      }
    }
  });
}

void Scheduler::stop() {
  stop_ = true;
  wake_.notify_all();
  if (!thread_.joinable()) return;
  thread_.join();
  end_all(FinishReason::kCancelled, "the server is shutting down");  // nothing will step these any more
}

bool Scheduler::idle() const {
  std::lock_guard<std::mutex> lock(mu_);
  return incoming_.empty() && metrics_.waiting == 0 && metrics_.running == 0;
}

SchedulerMetrics Scheduler::metrics(bool take_latencies) {
  std::lock_guard<std::mutex> lock(mu_);
  SchedulerMetrics m = metrics_;
  if (take_latencies) {
    metrics_.ttft.clear();
    metrics_.itl.clear();
  }
  return m;
}

}  // namespace kestrel
