// The block-format GEMV's launches of FormatSet::kAll, the general kernel: every format.
// A file of its own so that the format sets compile in parallel (matmul_quant_gemv.cuh).
#include "backend/cuda/matmul_quant_gemv.cuh"

namespace kestrel::cuda {

void launch_gemv_quant_all(cudaStream_t stream, const MultiTargets& mt, int64_t blocks, const float* x, int64_t T,
                           int64_t K) {
  launch_gemv_quant_rows<FormatSet::kAll, 3>(stream, mt, blocks, x, T, K);
}

}  // namespace kestrel::cuda
