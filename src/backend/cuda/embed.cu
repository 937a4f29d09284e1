// embed: out[T, H] = table[tokens[t], :] * scale (table BF16/F16/F32 [V, H]).
#include "backend/cuda/device_util.cuh"

namespace kestrel::cuda {
namespace {

// grid: T blocks; each block copies one row.
template <typename W>
__global__ void embed_kernel(float* __restrict__ out,      // [T, H]
                             const W* __restrict__ table,  // [V, H]
                             const int32_t* __restrict__ tokens, int64_t H, int64_t V, float scale) {
  const int64_t r = blockIdx.x;
  const int32_t id = tokens[r];
  float* o = out + r * H;
  if (id < 0 || id >= V) {  // the entry point checked the ids; never read out of bounds regardless
    for (int64_t i = threadIdx.x; i < H; i += blockDim.x) o[i] = 0.0f;
    return;
  }
  const W* src = table + int64_t(id) * H;
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x) {
    const float v = to_f32(src[i]);
    o[i] = scale != 1.0f ? v * scale : v;
  }
}

}  // namespace

void embed(const Context& ctx, const Tensor& out, const Tensor& table, const StepPlan& plan, float scale) {
  check_f32(out, "embed out");
  check_step(ctx, plan);
  KCHECK_MSG(out.rows == plan.n_rows() && out.cols == table.cols, "embed: out [", out.rows, ", ", out.cols,
             "] for ", plan.n_rows(), " tokens of a [", table.rows, ", ", table.cols, "] table");
  if (out.rows == 0) return;
  // Token ids were validated on the host already (the plan is host data): check here too.
  for (int32_t id : plan.tokens) KCHECK_MSG(id >= 0 && id < table.rows, "token id ", id, " outside the vocabulary");
  dispatch_weight(table.dtype, "embed", [&]<typename W>() {
    embed_kernel<W><<<unsigned(out.rows), 256, 0, ctx.stream>>>(out.f32(), table.as<const W>(), ctx.step.tokens,
                                                                 out.cols, table.rows, scale);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace kestrel::cuda
