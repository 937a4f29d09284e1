// What the chunked DeltaNet's two kernel pairs share: the F32 pair and the host side in
// gated_delta_rule_chunked.cu, the tensor-core pair (--matmul-precision bf16) in
// gated_delta_rule_chunked_mma.cu. Private to those two files.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "backend/cuda/gated_delta_rule_chunked.h"

namespace kestrel::cuda::gdr_chunked {

constexpr int kC = kGdrChunk;
constexpr int kThreads = 256;
constexpr int kBV = 32;  // value columns per scan block

// Per (chunk, head) scratch: W, Q', K' [64, dk] and P [64, 64] as E — F32, or BF16 at
// --matmul-precision bf16 (gdr_prep_mma_kernel rounds them for gdr_scan_mma_kernel's operands) —
// and U [64, dv] and exp(gc_63) in F32.
template <typename E>
struct ChunkScratchOf {
  E* w;       // [n_chunks, nv, 64, dk]  W; -W in BF16 (the scan's V' = U + (-W) S)
  float* u;   // [n_chunks, nv, 64, dv]
  E* q;       // [n_chunks, nv, 64, dk]  exp(gc_i) q_i
  E* k;       // [n_chunks, nv, 64, dk]  exp(gc_63 - gc_i) k_i
  E* p;       // [n_chunks, nv, 64, 64]  (q_i . k_j) exp(gc_i - gc_j), j <= i, else 0
  float* gl;  // [n_chunks, nv]          exp(gc_63)
};
using ChunkScratch = ChunkScratchOf<float>;
using ChunkScratchBf16 = ChunkScratchOf<__nv_bfloat16>;

struct RunDev {
  int32_t row_begin, n_chunks, state_slot, chunk0;  // chunk0: index of its first chunk in the group
};

// One group of chunks as its two launches take it: its chunks' first rows and its runs, on the
// device (grids: (n_chunks, nv) for the prep, (nv, n_runs, ceil(dv / kBV)) for the scan).
struct Group {
  const int32_t* rows;
  const RunDev* runs;
  int32_t n_chunks, n_runs;
};

// The step's tensors and head shapes, as every launch takes them.
struct Args {
  float* out;
  const float *qkv, *a, *b, *a_neg, *dt_bias;
  float* ssm;
  int nk, nv, kdiv, dk, dv;
};

// gated_delta_rule_chunked_mma.cu: whether the tensor-core pair takes these head sizes, and its
// launches over the groups (scratch carved with BF16 W, Q', K', P).
bool mma_takes(int dk, int dv);
void run_mma(cudaStream_t stream, const ChunkScratchBf16& sc, const Args& args, const std::vector<Group>& groups);

}  // namespace kestrel::cuda::gdr_chunked
