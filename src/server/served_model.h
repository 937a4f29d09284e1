// ServedModel: one loaded model with everything the server needs around it — the tokenizer,
// the chat template, the output format its chat model speaks, and the scheduler that runs it.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "ops/profiling_ops.h"

#include "chat/chat_template.h"
#include "chat/output_parser.h"
#include "engine/scheduler.h"
#include "model/loader.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::server {

struct ServedModel {
  std::string name;  // as reported by /v1/models and checked against "model" in requests
  std::string dir;
  std::unique_ptr<Ops> backend;   // the device backend, when `ops` wraps it (--profile)
  std::unique_ptr<Ops> ops;       // what the model runs on
  ProfilingOps* profiler = nullptr;  // = ops when profiling
  LoadedModel loaded;
  std::unique_ptr<tok::Tokenizer> tokenizer;
  std::optional<chat::ChatTemplate> chat_template;  // absent: /v1/chat/completions is refused
  chat::OutputFormat output_format = chat::plain_output_format();
  std::unique_ptr<Scheduler> scheduler;
  std::vector<int32_t> stop_ids;  // EOS ids (config, generation_config, tokenizer)
};

struct ServeOptions {
  std::string device = "cpu";
  std::string name;             // default: the directory's last component
  int32_t max_running = 16;
  int64_t max_context = 8192;   // tokens per sequence the KV pool is sized for
  int32_t kv_blocks = 0;        // 0: max_running x max_context / block
  std::string gpu_memory;       // non-empty: size the KV pool from device memory (cache/memory_plan.h)
  int32_t max_step_tokens = 512;
  bool prefix_cache = true;
  bool profile = false;         // time every op (ProfilingOps); printed when the server stops
  bool deterministic = false;   // batch-invariant backend and scheduling (SchedulerConfig::deterministic)
  int32_t sample_candidates = -1;  // SchedulerConfig::sample_candidates (-1 auto, 0 off, up to 4096)
  std::optional<std::string> matmul_precision;  // the CUDA backend's (cli::BackendOptions); absent: its default
  std::optional<std::string> kv_cache;  // f32|bf16 (cli::BackendOptions); absent: f32
};

// Loads the model, its tokenizer (required) and chat template (optional) from DIR.
std::unique_ptr<ServedModel> load_served_model(const std::string& dir, const ServeOptions& options);

}  // namespace kestrel::server
