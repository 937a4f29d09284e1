// The chunked (WY) form of the CUDA gated_delta_rule (gated_delta_rule_chunked.cu), used by
// gated_delta_rule.cu for the whole 64-token chunks of the absolute grid in a prefill.
#pragma once

#include <vector>

#include "backend/cuda/context.h"

namespace kestrel::cuda {

constexpr int kGdrChunk = 64;  // the engine's chunk grid (absolute positions)

// How a sequence's new tokens split on the grid: [0, head) up to the first grid point, then
// n_full whole chunks, then the tail [head + 64 * n_full, n_tokens).
struct GdrSplit {
  int32_t head = 0, n_full = 0;
};
__host__ __device__ inline GdrSplit gdr_split(int32_t n_past, int32_t n_tokens) {
  GdrSplit s;
  const int32_t to_grid = (kGdrChunk - n_past % kGdrChunk) % kGdrChunk;
  s.head = to_grid < n_tokens ? to_grid : n_tokens;
  s.n_full = (n_tokens - s.head) / kGdrChunk;
  return s;
}

// A run of whole chunks of one sequence: rows [row_begin, row_begin + 64 * n_chunks), the first
// at an absolute position that is a multiple of 64, continuing the state in slot state_slot.
struct GdrChunkRun {
  int32_t row_begin = 0, n_chunks = 0, state_slot = 0;
};

// Whether the chunked kernels take these head shapes (k head size a multiple of 4, at most 192).
bool gdr_chunked_supports(const DeltaNetConfig& cfg);

// Runs the chunked form over the runs (tensors as gated_delta_rule takes them, already checked),
// reading and writing each run's state in ssm [n_slots, n_v * dk * dv].
void gated_delta_rule_chunked(const Context& ctx, const Tensor& out, const Tensor& qkv, const Tensor& a,
                              const Tensor& b, const Tensor& a_neg, const Tensor& dt_bias, const Tensor& ssm,
                              const DeltaNetConfig& cfg, const std::vector<GdrChunkRun>& runs);

}  // namespace kestrel::cuda
