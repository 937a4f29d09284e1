// The block-format GEMV's launches of FormatSet::kQ46Units: Q4_K, Q6_K and Q8_0 matrices with
// Q4_K_T32 and Q6_K_T32 ones (a Q4_K_M layer's launches with a Q6_K projection).
// A file of its own so that the format sets compile in parallel (matmul_quant_gemv.cuh).
#include "backend/cuda/matmul_quant_gemv.cuh"

namespace kestrel::cuda {

void launch_gemv_quant_q46(cudaStream_t stream, const MultiTargets& mt, int64_t blocks, const float* x, int64_t T,
                           int64_t K) {
  launch_gemv_quant_rows<FormatSet::kQ46Units, 3>(stream, mt, blocks, x, T, K);
}

}  // namespace kestrel::cuda
