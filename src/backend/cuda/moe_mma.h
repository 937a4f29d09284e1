// The grouped expert products of a prefill step on the tensor cores (moe_mma.cu): BF16 or
// block-format experts, the pairs already grouped by expert (moe.cu's moe_group_kernel: order,
// offsets, active, n_active), the activations split into BF16 terms as the dense prefill GEMMs
// split them; and on the same block code, block-format matmuls of a few rows.
#pragma once

#include <cstdint>

#include "backend/cuda/context.h"

namespace kestrel::cuda {

// Whether moe_experts' grouped path may take these kernels: not in deterministic mode nor at
// kExact (whose results must match the per-pair kernels' bit for bit: those keep the CUDA-core
// grouped kernels), and not with KESTREL_CUDA_MOE_MMA=0 in the environment.
bool moe_mma_enabled(const Context& ctx);

// Whether a projection of dtype dt whose inputs have K elements a row takes them: BF16 or a block
// format, K a multiple of 32 and of the format's block.
bool moe_mma_supported(DType dt, int64_t K);

// hbuf[p, f] = act(gate_e x_t) * up_e x_t for every grouped pair p of expert e (t = p / k);
// expert_rows: the grid rows (min(E, pairs)), rows past *n_active exit.
void launch_moe_gate_up_mma(const Context& ctx, DType dt, float* hbuf, const float* x, const int32_t* order,
                            const int32_t* offsets, const int32_t* active, const int32_t* n_active,
                            const void* const* gate, const void* const* up, int k, int64_t H, int64_t F,
                            unsigned expert_rows, Activation act);

// ybuf[p, c] = (weight_p [* expert_scale[e]]) * down_e[c] . h[p] for every grouped pair p.
void launch_moe_down_mma(const Context& ctx, DType dt, float* ybuf, const float* hbuf, const int32_t* order,
                         const int32_t* offsets, const int32_t* active, const int32_t* n_active,
                         const float* weights, const void* const* down, const float* expert_scale, int64_t H,
                         int64_t F, unsigned expert_rows);

// out [T, N] = x [T, K] times w [N, K]^T for BF16 or block-format w (moe_mma_supported(dt, K)), on
// the same tensor-core block code: the prefill products matmul_quant's dequantized tiles give (at
// the context's precision, not kExact), with the weight decoded in registers. A grid too small for
// the GPU splits K into ranges whose partials go to the kSlotMatmulPartial scratch, summed into out.
void launch_block_matmul_mma(const Context& ctx, float* out, const float* x, const void* w, DType dt, int64_t T,
                             int64_t K, int64_t N);

}  // namespace kestrel::cuda
