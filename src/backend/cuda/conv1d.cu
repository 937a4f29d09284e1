// conv1d_silu: depthwise causal convolution over time continuing each sequence's conv state
// (its last K-1 inputs, oldest first), then SiLU, in place. One thread per (sequence, channel)
// walks the sequence's tokens in order; the products are summed in double as on the CPU.
#include "backend/cuda/device_util.cuh"

namespace kestrel::cuda {
namespace {

constexpr int kMaxKernel = 8;

// grid: (ceil(C / 128), n_seqs).
__global__ void conv1d_silu_kernel(float* x,                    // [T, C], in place
                                   const float* __restrict__ w, // [C, K]
                                   float* __restrict__ conv,    // [n_slots, C * (K - 1)]
                                   const SeqStep* __restrict__ seqs, int64_t C, int K) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  const SeqStep s = seqs[blockIdx.y];
  const int keep = K - 1;
  float* st = conv + int64_t(s.state_slot) * C * keep + c * keep;
  float win[kMaxKernel];
  float wc[kMaxKernel];
#pragma unroll
  for (int j = 0; j < kMaxKernel; ++j) {
    win[j] = j < keep ? st[j] : 0.0f;
    wc[j] = j < K ? w[c * K + j] : 0.0f;
  }
  for (int32_t t = 0; t < s.n_tokens; ++t) {
    float* xv = x + int64_t(s.row_begin + t) * C + c;
    double acc_d = 0.0;
#pragma unroll
    for (int j = 0; j < kMaxKernel; ++j) {
      if (j < keep) acc_d += double(wc[j]) * double(win[j]);
    }
    const float in = *xv;
    acc_d += double(wc[keep]) * double(in);
    const float acc = float(acc_d);
#pragma unroll
    for (int j = 0; j + 1 < kMaxKernel; ++j) {
      if (j + 1 < keep) win[j] = win[j + 1];
    }
    if (keep > 0) win[keep - 1] = in;
    *xv = acc / (1.0f + expf(-acc));
  }
#pragma unroll
  for (int j = 0; j < kMaxKernel; ++j)
    if (j < keep) st[j] = win[j];
}

}  // namespace

void conv1d_silu(const Context& ctx, const Tensor& x, const Tensor& w, const StateLayerView& state, int kernel,
                 const StepPlan& plan) {
  check_step(ctx, plan);
  check_f32(x, "conv1d x");
  check_f32(w, "conv1d w");
  check_f32(state.conv, "conv1d state");
  const int64_t C = x.cols;
  const int keep = kernel - 1;
  KCHECK_MSG(kernel >= 1 && kernel <= kMaxKernel, "conv1d_silu: kernel ", kernel, " (CUDA takes 1..", kMaxKernel, ")");
  KCHECK_MSG(w.rows == C && w.cols == kernel && state.conv.cols == C * keep, "conv1d_silu: w [", w.rows, ", ", w.cols,
             "] state cols ", state.conv.cols, " for ", C, " channels, kernel ", kernel);
  KCHECK(x.rows == plan.n_rows());
  for (const SeqStep& s : plan.seqs) KCHECK(s.state_slot >= 0 && s.state_slot < state.conv.rows);
  if (plan.seqs.empty() || C == 0) return;
  dim3 grid(unsigned(ceil_div(C, 128)), unsigned(plan.seqs.size()));
  conv1d_silu_kernel<<<grid, 128, 0, ctx.stream>>>(x.f32(), w.f32(), state.conv.f32(), ctx.step.seqs, C, kernel);
  CUDA_CHECK_LAUNCH();
}

}  // namespace kestrel::cuda
