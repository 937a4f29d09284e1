// The tiled split-KV decode attention (attention_tile.cu) that attention.cu launches for a
// head_dim of 256 or 512.
#pragma once

#include <cuda_bf16.h>

#include "backend/cuda/context.h"
#include "backend/cuda/rope.cuh"

namespace kestrel::cuda {

// Whether attention_tile_kernel serves this head_dim.
constexpr bool attention_tiles_apply(int64_t head_dim) { return head_dim == 256 || head_dim == 512; }

// Ops::norm_rope_attention's q/k work inside attention_tile_kernel, for a decode step (every
// sequence one new row; head_dim 256): each block norms and rotates its query heads from the raw q
// as qk_norm_rope_kernel would, and a block whose keys hold its row's own position first norms and
// rotates that row's k head and stores it and the v head in the cache row, as
// qk_norm_rope_kv_write would: the same bits, one launch fewer. Null k: the kernel's plain form
// (q as given, the step's k and v already in the cache).
struct TileQk {
  const float* k = nullptr;       // [rows, n_kv_heads * head_dim], raw
  const float* v = nullptr;       // [rows, n_kv_heads * head_dim]
  const float* q_norm = nullptr;  // [head_dim] or null
  const float* k_norm = nullptr;  // [head_dim] or null
  int half = 0, span = 0;         // the rotating pairs (i, i + span), i < half
  float eps = 0.0f;
  InvFreqs freqs{};
};

// attention_tile_kernel over attention.cu's split-KV grid (rows from row0, n_kv_heads x head
// pieces, max splits), C the cache's element type (float or __nv_bfloat16). part: the splits'
// partial results when the grid has more than one split (merged by the caller), else null.
// TileQk for these tensors, when qk_norm_rope_kv_write would take their shapes (rope.cu); false
// otherwise (nothing set).
bool tile_qk(TileQk& qk, const Tensor& q, const Tensor& q_norm, const Tensor& k, const Tensor& k_norm, const Tensor& v,
             int head_dim, float eps, const RopeConfig& cfg, const KvLayerView& cache, const StepPlan& plan);

// qk (or null): the q/k work of norm_rope_attention in the same launch (TileQk; head_dim 256).
template <typename C>
void launch_attention_tiles(const Context& ctx, dim3 grid, const Tensor& out, const Tensor& q,
                            const KvLayerView& cache, const AttentionParams& p, int64_t row0, bool per_row_splits,
                            float* part, const TileQk* qk = nullptr);

}  // namespace kestrel::cuda
