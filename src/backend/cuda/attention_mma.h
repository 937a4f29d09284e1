// The tensor-core split-KV decode attention (attention_mma.cu) that attention.cu launches over a
// BF16 KV cache at head_dim 256.
#pragma once

#include <cuda_bf16.h>

#include "backend/cuda/context.h"

namespace kestrel::cuda {

constexpr int kMmaHeads = 8;        // query heads a block serves: the mma's 8 columns
constexpr int kMmaBlocksPerSm = 1;  // its shared memory (three 64-key stages) fills a multiprocessor

// Whether attention_mma_kernel serves a decode over this cache: BF16 at head_dim 256, the matmul
// precision not kExact (which keeps the CUDA-core kernels), and KESTREL_CUDA_MMA_DECODE not 0.
bool attention_mma_applies(const Context& ctx, DType cache_dtype, int64_t head_dim);

// attention_mma_kernel over the split-KV grid (rows from row0, n_kv_heads x
// head_pieces(group, kMmaHeads), max splits), writing attention.cu's partial results when the grid
// has more than one split (part; merged by the caller), else the output.
void launch_attention_mma(const Context& ctx, dim3 grid, const Tensor& out, const Tensor& q,
                          const KvLayerView& cache, const AttentionParams& p, int64_t row0, bool per_row_splits,
                          float* part);

}  // namespace kestrel::cuda
