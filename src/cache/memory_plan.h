// Memory plan: how many KV blocks and state slots fit in what a device may use.
//
// A limit on the whole engine's device memory (`--gpu-memory`: a fraction of the device or a
// byte count) minus what is resident once the model is loaded, minus a reserve for the step's
// activations and scratch, is the cache's budget: the state slots the scheduler needs first,
// then as many KV blocks as fit. A plan that cannot hold one sequence of the requested context
// is refused, naming the numbers.
#pragma once

#include <cstdint>
#include <string>

#include "cache/model_cache.h"
#include "model/config.h"

namespace kestrel {

// "0.9" (a fraction of the device, in (0, 1]) or "60G" / "60GiB" / "512M" / "123456789" (bytes).
struct MemoryLimit {
  double fraction = 0;  // > 0: this share of the device's memory
  uint64_t bytes = 0;   // else: this many bytes
};
MemoryLimit parse_memory_limit(const std::string& text, const std::string& flag);

struct CachePlanRequest {
  uint64_t device_total = 0;   // the device's memory
  uint64_t device_free = 0;    // free now, with the model loaded
  MemoryLimit limit;
  int32_t n_slots = 0;         // state slots the scheduler will ask for
  int64_t max_context = 0;     // tokens one sequence must be able to reach
  int32_t max_step_tokens = 0; // rows of the largest step (sizes the activation reserve)
  int32_t max_logit_rows = 0;  // rows whose logits a step may produce
  int32_t block_size = 16;
  size_t kv_elem_bytes = 4;    // bytes of a K/V element: 4 (F32), 2 (--kv-cache bf16)
};

struct CachePlan {
  CacheSizing sizing;
  uint64_t limit = 0;          // bytes the engine may use
  uint64_t in_use = 0;         // resident when planned (the weights, and anything else on the device)
  uint64_t reserve = 0;        // kept for activations and scratch
  uint64_t state_bytes = 0, kv_bytes = 0;
  std::string summary() const;
};

// Bytes a step of `rows` rows (of which `logit_rows` produce logits) may need for activations and
// scratch: a conservative estimate from the model's widths, at least 512 MiB. With `max_context`
// (and up to `n_seqs` sequences a step) it also counts the CUDA tiled prefill attention's scratch:
// the BF16 copy of the keys a step attends and the per-segment partial results.
uint64_t activation_reserve(const ModelConfig& cfg, int64_t rows, int64_t logit_rows, int64_t max_context = 0,
                           int64_t n_seqs = 1);

// The CUDA tiled prefill attention's scratch for steps of `rows` rows over up to `n_seqs`
// sequences of up to `max_context` keys (src/backend/cuda/attention_prefill.cu): the attended keys
// as BF16 hi/lo terms of K and V (groups of sequences within 1 GiB, one longer sequence alone) and
// the per-segment partial results (within 256 MiB a launch, or one segment's); 0 when no step can
// take the kernel (no attention layer, or fewer than 64 rows a step).
uint64_t prefill_attention_scratch(const ModelConfig& cfg, int64_t rows, int64_t max_context, int64_t n_seqs);

CachePlan plan_cache(const ModelConfig& cfg, const CachePlanRequest& r);

}  // namespace kestrel
