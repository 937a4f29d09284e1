// The CUDA tiled prefill attention's step and scratch limits (src/backend/cuda/attention_prefill.cu),
// here because the memory plan (src/cache/memory_plan.cc) sizes its scratch in builds without CUDA.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kestrel::attention_prefill {

constexpr int kMinRows = 64;                          // a step takes the kernel when a sequence has this many new rows
constexpr int kSegKeys = 2048;                        // key positions per segment (absolute grid)
constexpr size_t kPartialBudget = size_t(256) << 20;  // scratch bytes for one launch's partial results
constexpr size_t kCopyBudget = size_t(1) << 30;       // the BF16 key copy of one group of sequences

}  // namespace kestrel::attention_prefill
