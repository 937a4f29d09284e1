// rope: rotate-half (NEOX) rotary embedding of the leading rotary_dim dims of every head, at the
// plan's positions. Angles in fp32 (position x inverse frequency), cos/sin in double, like the
// CPU oracle; frequencies over freq_dim dims (proportional RoPE) when set. whole_head_pairs
// (Gemma 4's proportional RoPE) pairs (i, i + head_dim/2) instead of (i, i + rotary_dim/2), of
// which the first rotary_dim/2 rotate.
#include "backend/cuda/device_util.cuh"

namespace kestrel::cuda {
namespace {

constexpr int kMaxPairs = 256;
struct InvFreqs {
  float v[kMaxPairs];  // rope_inv_freq of each rotating pair, formed on the host like the CPU's
};

// grid: T blocks; threads walk (head, i) for i < half; pair (i, i + span).
__global__ void rope_kernel(float* x,  // [T, n_heads * head_dim], in place
                            const int32_t* __restrict__ positions,  // [T]
                            int n_heads, int head_dim, int half, int span, const InvFreqs freqs) {
  pdl_begin();
  const int64_t r = blockIdx.x;
  const float pos = float(positions[r]);
  float* row = x + r * int64_t(n_heads) * head_dim;
  for (int w = threadIdx.x; w < n_heads * half; w += blockDim.x) {
    const int h = w / half, i = w % half;
    const float angle = pos * freqs.v[i];
    const float c = float(cos(double(angle))), s = float(sin(double(angle)));
    float* v = row + h * head_dim;
    const float a = v[i], b = v[i + span];
    v[i] = a * c - b * s;
    v[i + span] = b * c + a * s;
  }
}

}  // namespace

void rope(const Context& ctx, const Tensor& x, int head_dim, const RopeConfig& cfg, const StepPlan& plan) {
  const int rot = cfg.rotary_dim;
  if (rot == 0) return;
  check_f32(x, "rope x");
  check_step(ctx, plan);
  KCHECK_MSG(rot % 2 == 0 && rot <= head_dim && x.cols % head_dim == 0, "rope: rotary_dim ", rot, " head_dim ",
             head_dim, " cols ", x.cols);
  KCHECK(x.rows == plan.n_rows());
  if (x.rows == 0) return;
  const int half = rot / 2;
  const int span = cfg.whole_head_pairs ? head_dim / 2 : half;  // distance between a pair's dims
  KCHECK_MSG(!cfg.whole_head_pairs || (head_dim % 2 == 0 && half <= span), "rope: whole-head pairs with rotary_dim ",
             rot, " head_dim ", head_dim);
  const int freq_dim = cfg.freq_dim > 0 ? cfg.freq_dim : rot;
  const int n_heads = int(x.cols / head_dim);
  KCHECK_MSG(half <= kMaxPairs, "rope: rotary_dim ", rot, " above ", 2 * kMaxPairs);
  InvFreqs freqs{};
  for (int i = 0; i < half; ++i) freqs.v[i] = rope_inv_freq(cfg.theta, i, freq_dim);
  const int threads = std::min(256, std::max(32, (n_heads * half + 31) / 32 * 32));
  launch(rope_kernel, unsigned(x.rows), threads, 0, ctx.stream, x.f32(), ctx.step.positions, n_heads, head_dim, half,
         span, freqs);
  CUDA_CHECK_LAUNCH();
}

}  // namespace kestrel::cuda
