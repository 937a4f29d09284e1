// The tiled (flash) prefill kernel of the CUDA attention op (attention_prefill.cu), used by
// attention.cu on its write-first paged path when a step holds a long prefill chunk.
#pragma once

#include <cstddef>

#include "backend/cuda/context.h"

namespace kestrel::cuda {

// Whether attention_prefill takes this step: any matmul precision but kExact (BF16 products for
// kBf16, hi/lo split products for the multi-term ones), or KESTREL_CUDA_TILED_ATTENTION=1 (=0:
// never); not deterministic mode; head_dim 64, 128 or 256; 16-byte aligned q and cache; and some
// sequence with at least 64 new rows.
bool attention_prefill_applies(const Context& ctx, const Tensor& q, const KvLayerView& cache,
                               const AttentionParams& p, const StepPlan& plan);

// out [T, n_heads * head_dim] = causal (optionally sliding-window) GQA attention of q over the
// paged cache, which must already hold the step's k/v. Refuses steps attention_prefill_applies rejects.
void attention_prefill(const Context& ctx, const Tensor& out, const Tensor& q, const KvLayerView& cache,
                       const AttentionParams& p, const StepPlan& plan);

// For tests: the scratch bytes one launch's partial results may take (default 256 MiB; at least
// one key segment's per launch whatever it is set to) and the BF16 copy of one group of
// sequences' keys (default 1 GiB; at least one sequence's); 0 restores a default. A row's results
// do not depend on them (the fold runs in the same order over any split of launches, the copy is
// elementwise).
void set_attention_prefill_budgets(size_t partial_bytes, size_t copy_bytes);

}  // namespace kestrel::cuda
