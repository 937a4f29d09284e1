// dilated_conv1d_silu: depthwise causal convolution with dilation over time, continuing each
// sequence's state (its last (kernel - 1) * dilation inputs per channel, oldest first), then SiLU
// (Qwen4-Exp's PLE conv). One thread per (row, channel): input j of row t is the sequence's input
// at t - (kernel - 1 - j) * dilation, from the step's rows or, before its first new token, from
// its state; the products are summed in double in kernel order, as on the CPU. The outputs go to
// their own tensor, so the states advance in a second kernel (thread per (sequence, channel)).
#include "backend/cuda/device_util.cuh"

namespace kestrel::cuda {
namespace {

constexpr int kThreads = 256;

// grid: ceil(T * C / kThreads).
__global__ void dilated_conv1d_silu_kernel(float* __restrict__ out,          // [T, C]
                                           const float* __restrict__ x,      // [T, C]
                                           const float* __restrict__ w,      // [C, K]
                                           const float* __restrict__ state,  // [n_slots, C * keep]
                                           const SeqStep* __restrict__ seqs, const int32_t* __restrict__ row_seq,
                                           int64_t T, int64_t C, int K, int dilation) {
  pdl_begin();
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= T * C) return;
  const int64_t r = i / C, c = i - r * C;
  const SeqStep s = seqs[row_seq[r]];
  const int64_t keep = int64_t(K - 1) * dilation;
  const int64_t t = r - s.row_begin;  // position among the sequence's new tokens
  const float* st = state + int64_t(s.state_slot) * C * keep + c * keep;
  double acc = 0.0;
  for (int j = 0; j < K; ++j) {
    const int64_t p = t - int64_t(K - 1 - j) * dilation;  // < 0: from the state
    const float in = p >= 0 ? x[(s.row_begin + p) * C + c] : st[keep + p];
    acc += double(w[c * K + j]) * double(in);
  }
  const float a = float(acc);
  out[i] = a / (1.0f + expf(-a));
}

// grid: (ceil(C / kThreads), n_seqs): each sequence's state becomes its last `keep` inputs. In
// place, ascending: entry j reads the old entry n_tokens + j (> j, not yet overwritten) or an input.
__global__ void dilated_conv1d_state_kernel(float* __restrict__ state, const float* __restrict__ x,
                                            const SeqStep* __restrict__ seqs, int64_t C, int64_t keep) {
  pdl_begin();
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  const SeqStep s = seqs[blockIdx.y];
  float* st = state + int64_t(s.state_slot) * C * keep + c * keep;
  for (int64_t j = 0; j < keep; ++j) {
    const int64_t p = int64_t(s.n_tokens) - keep + j;
    st[j] = p >= 0 ? x[(s.row_begin + p) * C + c] : st[keep + p];
  }
}

}  // namespace

void dilated_conv1d_silu(const Context& ctx, const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& state,
                         int kernel, int dilation, const StepPlan& plan) {
  check_step(ctx, plan);
  check_f32(out, "dilated_conv1d out");
  check_f32(x, "dilated_conv1d x");
  check_f32(w, "dilated_conv1d w");
  check_f32(state, "dilated_conv1d state");
  const int64_t C = x.cols, T = x.rows;
  KCHECK_MSG(kernel >= 1 && dilation >= 1, "dilated_conv1d_silu: kernel ", kernel, " dilation ", dilation);
  const int64_t keep = int64_t(kernel - 1) * dilation;
  KCHECK_MSG(out.rows == T && out.cols == C && out.data != x.data, "dilated_conv1d_silu: out [", out.rows, ", ",
             out.cols, "] for x [", T, ", ", C, "] (out may not be x)");
  KCHECK_MSG(w.rows == C && w.cols == kernel && state.cols == C * keep, "dilated_conv1d_silu: w [", w.rows, ", ",
             w.cols, "] state cols ", state.cols, " for ", C, " channels, kernel ", kernel, " dilation ", dilation);
  KCHECK(T == plan.n_rows());
  for (const SeqStep& s : plan.seqs) KCHECK(s.state_slot >= 0 && s.state_slot < state.rows);
  if (plan.seqs.empty() || C == 0 || T == 0) return;
  launch(dilated_conv1d_silu_kernel, unsigned(ceil_div(T * C, kThreads)), kThreads, 0, ctx.stream, out.f32(), x.f32(),
         w.f32(), state.f32(), ctx.step.seqs, ctx.step.row_seq, T, C, kernel, dilation);
  CUDA_CHECK_LAUNCH();
  if (keep > 0) {
    launch(dilated_conv1d_state_kernel, dim3(unsigned(ceil_div(C, kThreads)), unsigned(plan.seqs.size())), kThreads, 0,
           ctx.stream, state.f32(), x.f32(), ctx.step.seqs, C, keep);
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace kestrel::cuda
