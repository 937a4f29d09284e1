// The block-format GEMV's launches of FormatSet::kAll, the general kernel (every format), x in two
// terms for the T32 matrices (--matmul-precision bf16). The default's three are
// matmul_quant_gemv_all.cu's, a file apart so that the two compile in parallel.
#include "backend/cuda/matmul_quant_gemv.cuh"

namespace kestrel::cuda {

void launch_gemv_quant_all_two(cudaStream_t stream, const MultiTargets& mt, int64_t blocks, const float* x, int64_t T,
                               int64_t K) {
  launch_gemv_quant_rows<FormatSet::kAll, 2>(stream, mt, blocks, x, T, K);
}

}  // namespace kestrel::cuda
