// The split-KV partition shared by the decode attention kernels (attention.cu's per-key and
// general kernels, attention_tile.cu's tiled one): how many splits a row's keys are cut into, which
// query heads and keys a block of the (rows, KV heads x head pieces, splits) grid takes, and where a
// position's row lies in the paged cache. The kernels must agree on all of it: they write one
// partial-results layout that attention_combine_kernel merges.
#pragma once

#include "backend/cuda/device_util.cuh"

namespace kestrel::cuda::split_kv {

constexpr int kMaxSplits = 64;
constexpr int kMinKeysPerSplit = 64;
constexpr int64_t kDetKeysPerSplit = 256;  // deterministic mode: keys per split
constexpr int kHeads = 4;                  // query heads a block serves (a piece of a GQA group)

// Deterministic mode: the splits of a row attending `keys` keys, a function of its keys only.
__host__ __device__ __forceinline__ int det_splits(int64_t keys) {
  const int64_t n = (keys + kDetKeysPerSplit - 1) / kDetKeysPerSplit;
  return int(n < 1 ? 1 : n > kMaxSplits ? kMaxSplits : n);
}

// Deterministic mode: the grid depth a launch whose rows need at most `splits` splits takes (a
// power of two, at most kMaxSplits), so a recorded step graph covers rows growing past their
// count until they need more than the depth.
__host__ __device__ __forceinline__ int det_depth(int splits) {
  int d = 1;
  while (d < splits && d < kMaxSplits) d *= 2;
  return d;
}

// The split count of a step whose largest position is max_pos: kMinKeysPerSplit keys per split
// at least, at most `cap` (the grid depth, split_cap) and kMaxSplits. A row's key count grows
// with its position, so the step's longest row is the one at max_pos.
__host__ __device__ __forceinline__ int step_splits(int64_t max_pos, int window, int cap) {
  const int64_t keys = max_pos - first_key(max_pos, window) + 1;
  int64_t n = (keys + kMinKeysPerSplit - 1) / kMinKeysPerSplit;
  if (n > cap) n = cap;
  return int(n < 1 ? 1 : n > kMaxSplits ? kMaxSplits : n);
}

// The split count of a row at position pos, the one count every kernel of a launch (the split
// kernel and attention_combine_kernel) must agree on: det_splits of the row's own keys when
// per_row_splits (deterministic mode), else step_splits of the step's largest position when the
// launch sizes it on the device (max_position), else `cap`, the grid's depth.
__device__ __forceinline__ int row_splits(int64_t pos, int window, bool per_row_splits,
                                          const int32_t* __restrict__ max_position, int cap) {
  if (per_row_splits) return det_splits(pos - first_key(pos, window) + 1);
  return max_position ? step_splits(*max_position, window, cap) : cap;
}

// Blocks per (row, split) for a GQA group of `group` query heads: pieces of up to `heads` heads
// (kHeads for the CUDA-core kernels, attention_mma.h's kMmaHeads for the tensor-core one).
__host__ __device__ __forceinline__ int head_pieces(int group, int heads = kHeads) {
  return (group + heads - 1) / heads;
}

__device__ __forceinline__ int64_t cache_row(const int32_t* block_tables, const SeqStep& s, int block_size,
                                             int64_t pos) {
  const int32_t block = block_tables[s.table_begin + pos / block_size];
  return int64_t(block) * block_size + pos % block_size;
}

// What one block of the grid (rows, n_kv_heads * head_pieces(group, heads), max_splits) takes, for
// rows from row0: row r, query heads h0 .. h0 + nh - 1 (of KV head kvh's group), and the keys [j0, j1]
// of split `split` of the row's n_splits (j1 < j0: none). A row has step_splits(*max_position)
// splits, or det_splits(its keys) when per_row_splits (deterministic mode).
struct SplitBlock {
  int64_t r;
  int kvh, h0, nh;
  SeqStep s;
  int64_t pos, first;
  int n_splits, split;
  int64_t j0, j1;
};
// False for a surplus split of its row: the whole block exits.
__device__ __forceinline__ bool split_block(SplitBlock& b, const int32_t* __restrict__ positions,
                                            const int32_t* __restrict__ row_seq, const SeqStep* __restrict__ seqs,
                                            int group, int window, int64_t row0, bool per_row_splits,
                                            const int32_t* __restrict__ max_position, int heads = kHeads) {
  b.r = row0 + blockIdx.x;
  const int pieces = head_pieces(group, heads);
  b.kvh = int(blockIdx.y) / pieces;
  b.h0 = b.kvh * group + (int(blockIdx.y) % pieces) * heads;
  b.nh = min(heads, b.kvh * group + group - b.h0);
  b.s = seqs[row_seq[b.r]];
  b.pos = positions[b.r];
  b.first = first_key(b.pos, window);
  b.n_splits = row_splits(b.pos, window, per_row_splits, max_position, int(gridDim.z));
  b.split = blockIdx.z;
  if (b.split >= b.n_splits) return false;
  const int64_t per_split = (b.pos - b.first + 1 + b.n_splits - 1) / b.n_splits;
  b.j0 = b.first + b.split * per_split;
  b.j1 = b.j0 + per_split - 1 < b.pos ? b.j0 + per_split - 1 : b.pos;  // inclusive
  return true;
}

}  // namespace kestrel::cuda::split_kv
