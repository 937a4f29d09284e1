// The block-format GEMV's launches of FormatSet::kQ8Units: Q4_K, Q6_K and Q8_0 matrices with
// Q8_0_T32 ones (a Q8_0 model's).
// A file of its own so that the format sets compile in parallel (matmul_quant_gemv.cuh).
#include "backend/cuda/matmul_quant_gemv.cuh"

namespace kestrel::cuda {

void launch_gemv_quant_q8(cudaStream_t stream, const MultiTargets& mt, int64_t blocks, const float* x, int64_t T,
                          int64_t K) {
  launch_gemv_quant_rows<FormatSet::kQ8Units, 3>(stream, mt, blocks, x, T, K);
}

}  // namespace kestrel::cuda
