#include "server/metrics_text.h"

#include <cstdio>

namespace kestrel::server {

void Histogram::add(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++n_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& help) const {
  char buf[256];
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    std::snprintf(buf, sizeof buf, "%s_bucket{le=\"%g\"} %llu\n", name.c_str(), bounds_[i], (unsigned long long)cum);
    out += buf;
  }
  cum += counts_.back();
  std::snprintf(buf, sizeof buf, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name.c_str(),
                (unsigned long long)cum, name.c_str(), sum_, name.c_str(), (unsigned long long)n_);
  out += buf;
}

MetricsText::MetricsText()
    : ttft_({0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}),
      itl_({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}) {}

std::string MetricsText::render(Scheduler& scheduler, const std::string& model, int http_in_flight,
                                uint64_t http_rejected) {
  SchedulerMetrics m = scheduler.metrics(true);
  std::lock_guard<std::mutex> lock(mu_);
  for (double v : m.ttft) ttft_.add(v);
  for (double v : m.itl) itl_.add(v);
  std::string out;
  auto counter = [&](const char* name, const char* help, double v, const std::string& labels = "") {
    char buf[256];
    std::snprintf(buf, sizeof buf, "# HELP %s %s\n# TYPE %s counter\n%s%s %.17g\n", name, help, name, name,
                  labels.c_str(), v);
    out += buf;
  };
  auto gauge = [&](const char* name, const char* help, double v) {
    char buf[256];
    std::snprintf(buf, sizeof buf, "# HELP %s %s\n# TYPE %s gauge\n%s %.17g\n", name, help, name, name, v);
    out += buf;
  };
  out += "# model " + model + "\n";
  counter("kestrel_requests_submitted_total", "Generation requests accepted by the scheduler", double(m.requests_submitted));
  counter("kestrel_requests_finished_total", "Generation requests finished (any outcome)", double(m.requests_finished));
  counter("kestrel_requests_cancelled_total", "Requests cancelled (client gone or stop string)", double(m.requests_cancelled));
  counter("kestrel_requests_failed_total", "Requests that ended in an error", double(m.requests_failed));
  counter("kestrel_requests_rejected_total", "Requests refused with 429 (queue or concurrency limit)", double(http_rejected));
  counter("kestrel_prompt_tokens_total", "Prompt tokens submitted", double(m.prompt_tokens));
  counter("kestrel_generation_tokens_total", "Tokens generated", double(m.generated_tokens));
  counter("kestrel_prefix_cache_hits_total", "Requests that reused a cached prompt prefix", double(m.prefix_hits));
  counter("kestrel_prefix_cache_tokens_total", "Prompt tokens reused from the prefix cache", double(m.cached_prompt_tokens));
  counter("kestrel_preemptions_total", "Sequences preempted to free KV blocks", double(m.preemptions));
  counter("kestrel_steps_total", "Forward steps run", double(m.steps));
  counter("kestrel_sampled_candidate_rows_total", "Sampled rows drawn from the device's candidates",
          double(m.candidate_rows));
  counter("kestrel_sampled_whole_rows_total", "Candidate rows whose draw needed the whole row of logits",
          double(m.candidate_whole_rows));
  gauge("kestrel_queue_length", "Requests waiting to be admitted", double(m.waiting));
  gauge("kestrel_running_sequences", "Sequences prefilling or decoding", double(m.running));
  gauge("kestrel_http_in_flight", "Generation requests being served over HTTP", double(http_in_flight));
  gauge("kestrel_kv_blocks_total", "KV cache blocks", double(m.blocks_total));
  gauge("kestrel_kv_blocks_used", "KV cache blocks in use (not free or reusable)", double(m.blocks_total - m.blocks_free));
  gauge("kestrel_kv_cache_usage", "Fraction of KV cache blocks in use",
        m.blocks_total ? double(m.blocks_total - m.blocks_free) / double(m.blocks_total) : 0.0);
  gauge("kestrel_state_slots_total", "Recurrent-state slots (sequences + prefix checkpoints)", double(m.slots_total));
  gauge("kestrel_state_slots_used", "Recurrent-state slots in use", double(m.slots_total - m.slots_free));
  ttft_.render(out, "kestrel_time_to_first_token_seconds", "Time from submission to the first generated token");
  itl_.render(out, "kestrel_inter_token_latency_seconds", "Time between consecutive generated tokens of a request");
  return out;
}

}  // namespace kestrel::server
