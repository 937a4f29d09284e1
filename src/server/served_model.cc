#include "server/served_model.h"

#include <cstdio>

#include "cache/memory_plan.h"
#include "cli/backend_select.h"
#include "core/error.h"
#include "core/files.h"
#include "io/gguf.h"

namespace kestrel::server {

std::unique_ptr<ServedModel> load_served_model(const std::string& dir, const ServeOptions& o) {
  auto m = std::make_unique<ServedModel>();
  m->dir = dir;
  std::string base = dir;
  while (!base.empty() && base.back() == '/') base.pop_back();
  base = base.substr(base.find_last_of('/') + 1);
  if (is_gguf_file(dir) && base.size() > 5 && base.ends_with(".gguf")) base.resize(base.size() - 5);  // x.gguf serves as "x"
  m->name = o.name.empty() ? base : o.name;
  if (!is_gguf_file(dir) && !file_exists(path_join(dir, "tokenizer.json")))
    bad_input(dir, ": no tokenizer.json in the model directory (the server needs the model's tokenizer)");
  m->tokenizer = std::make_unique<tok::Tokenizer>(tok::Tokenizer::load(dir));
  try {
    m->chat_template = chat::ChatTemplate::load(dir);
    std::string source;
    for (const auto& [name, t] : m->chat_template->templates()) source += t.source();
    m->output_format = chat::detect_output_format(source);
  } catch (const Error&) {
    m->chat_template.reset();  // no template: completions only
  }
  m->ops = cli::make_backend(
      {.device = o.device, .deterministic = o.deterministic, .matmul_precision = o.matmul_precision,
       .kv_cache = o.kv_cache});
  if (o.profile) {  // the model runs on a wrapper that times every op on the backend's clock
    m->backend = std::move(m->ops);
    auto p = std::make_unique<ProfilingOps>(*m->backend);
    p->set_recording(true);
    m->profiler = p.get();
    m->ops = std::move(p);
  }
  m->loaded = load_model(dir, *m->ops);
  const ModelConfig& cfg = m->loaded.config();
  if (m->tokenizer->vocab_size() > cfg.vocab_size)
    bad_input(dir, ": the tokenizer has ", m->tokenizer->vocab_size(), " tokens but the model's vocabulary is ",
              cfg.vocab_size);
  m->stop_ids = cfg.eos_token_ids;
  if (auto eos = m->tokenizer->eos_id()) {
    if (std::find(m->stop_ids.begin(), m->stop_ids.end(), *eos) == m->stop_ids.end()) m->stop_ids.push_back(*eos);
  }
  const SchedulerConfig sc{.max_running = o.max_running, .max_step_tokens = o.max_step_tokens,
                           .prefill_chunk = 256, .prefix_cache = o.prefix_cache, .deterministic = o.deterministic,
                           .sample_candidates = o.sample_candidates};
  CacheSizing sizing;
  sizing.block_size = 16;
  const int64_t per_seq = (o.max_context + sizing.block_size - 1) / sizing.block_size;
  sizing.n_blocks = o.kv_blocks > 0 ? o.kv_blocks : int32_t(per_seq * o.max_running);
  if (!o.gpu_memory.empty()) {
    if (o.kv_blocks > 0) bad_input("--gpu-memory and --kv-blocks both size the KV cache: give one of them");
    const MemoryLimit limit = parse_memory_limit(o.gpu_memory, "--gpu-memory");
    uint64_t free_bytes = 0, total_bytes = 0;
    if (!m->ops->device_memory(free_bytes, total_bytes))
      bad_input("--gpu-memory needs --device cuda (the ", m->ops->name(), " backend has no device memory to plan)");
    const CachePlan plan = plan_cache(cfg, {.device_total = total_bytes, .device_free = free_bytes, .limit = limit,
                                            .n_slots = scheduler_slots(cfg, sc), .max_context = o.max_context,
                                            .max_step_tokens = o.max_step_tokens, .max_logit_rows = o.max_running,
                                            .block_size = sizing.block_size,
                                            .kv_elem_bytes = dtype_size(m->ops->kv_cache_dtype())});
    sizing = plan.sizing;
    std::fprintf(stderr, "kestrel serve: memory plan: %s\n", plan.summary().c_str());
  }
  m->scheduler = std::make_unique<Scheduler>(*m->loaded.model, sizing, sc);
  return m;
}

}  // namespace kestrel::server
