// The tiled split-KV decode attention (attention_tile.cu) that attention.cu launches for a
// head_dim of 256 or 512.
#pragma once

#include <cuda_bf16.h>

#include "backend/cuda/context.h"

namespace kestrel::cuda {

// Whether attention_tile_kernel serves this head_dim.
constexpr bool attention_tiles_apply(int64_t head_dim) { return head_dim == 256 || head_dim == 512; }

// attention_tile_kernel over attention.cu's split-KV grid (rows from row0, n_kv_heads x head
// pieces, max splits), C the cache's element type (float or __nv_bfloat16). part: the splits'
// partial results when the grid has more than one split (merged by the caller), else null.
template <typename C>
void launch_attention_tiles(const Context& ctx, dim3 grid, const Tensor& out, const Tensor& q,
                            const KvLayerView& cache, const AttentionParams& p, int64_t row0, bool per_row_splits,
                            float* part);

}  // namespace kestrel::cuda
