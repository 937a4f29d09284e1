// conv1d_silu: depthwise causal convolution over time continuing each sequence's conv state
// (its last K-1 inputs, oldest first), then SiLU, in place. One thread per (row, channel): the
// K-1 inputs before a row come from the step's rows or, before the sequence's first new token,
// from its state; the products are summed in double in window order, as on the CPU. Outputs go
// to scratch first (the inputs must stay readable), then the states advance, then the outputs
// replace x. Steps whose sequences bring at most kFusedMaxRows rows each (decode) take one fused
// kernel instead: a thread per (sequence, channel) runs the sequence's rows in order with the
// window in registers, the same sums in the same order.
#include "backend/cuda/device_util.cuh"

namespace kestrel::cuda {
namespace {

constexpr int kMaxKernel = kConv1dMaxKernel;
constexpr int kThreads = 256;
constexpr int kFusedMaxRows = 4;

// grid: ceil(T * C / kThreads).
__global__ void conv1d_silu_kernel(float* __restrict__ y,          // [T, C]
                                   const float* __restrict__ x,    // [T, C]
                                   const float* __restrict__ w,    // [C, K]
                                   const float* __restrict__ conv, // [n_slots, C * (K - 1)]
                                   const SeqStep* __restrict__ seqs, const int32_t* __restrict__ row_seq, int64_t T,
                                   int64_t C, int K) {
  pdl_begin();
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= T * C) return;
  const int64_t r = i / C, c = i - r * C;
  const SeqStep s = seqs[row_seq[r]];
  const int keep = K - 1;
  const int64_t t = r - s.row_begin;  // position among the sequence's new tokens
  const float* st = conv + int64_t(s.state_slot) * C * keep + c * keep;
  double acc = 0.0;
#pragma unroll
  for (int j = 0; j < kMaxKernel; ++j) {
    if (j >= keep) break;
    const int64_t p = t - keep + j;  // < 0: from the state
    const float in = p >= 0 ? x[(s.row_begin + p) * C + c] : st[keep + p];
    acc += double(w[c * K + j]) * double(in);
  }
  acc += double(w[c * K + keep]) * double(x[i]);
  const float a = float(acc);
  y[i] = a / (1.0f + expf(-a));
}

// grid: (ceil(C / kThreads), n_seqs): each sequence's state becomes its last K-1 inputs.
__global__ void conv1d_state_kernel(float* __restrict__ conv, const float* __restrict__ x,
                                    const SeqStep* __restrict__ seqs, int64_t C, int K) {
  pdl_begin();
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  const SeqStep s = seqs[blockIdx.y];
  const int keep = K - 1;
  float* st = conv + int64_t(s.state_slot) * C * keep + c * keep;
  float next[kMaxKernel];
#pragma unroll
  for (int j = 0; j < kMaxKernel; ++j) {
    if (j >= keep) break;
    const int64_t p = int64_t(s.n_tokens) - keep + j;
    next[j] = p >= 0 ? x[(s.row_begin + p) * C + c] : st[keep + p];
  }
#pragma unroll
  for (int j = 0; j < kMaxKernel; ++j) {
    if (j >= keep) break;
    st[j] = next[j];
  }
}

// grid: (ceil(C / kThreads), n_seqs). Thread (s, c) is the only reader of channel c of sequence
// s's rows and state, so it writes each output over its input and the last K-1 inputs over the
// state: one launch for what the two kernels and the copy above do.
__global__ void conv1d_silu_fused_kernel(float* __restrict__ x,         // [T, C], in place
                                         const float* __restrict__ w,   // [C, K]
                                         float* __restrict__ conv,      // [n_slots, C * (K - 1)]
                                         const SeqStep* __restrict__ seqs, int64_t C, int K) {
  // The window, the weights and the plan are loaded before pdl_begin, while the kernel before this
  // one (the in-projection) still runs: the conv state was last written by this kernel in an
  // earlier step, the weights never, the plan before the step's first kernel. x after the wait.
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const bool live = c < C;
  const SeqStep s = seqs[blockIdx.y];
  const int keep = K - 1;
  float* st = conv + int64_t(s.state_slot) * C * keep + c * keep;
  // (constant indices only after unrolling, so both arrays stay in registers)
  float win[kMaxKernel], wk[kMaxKernel];
#pragma unroll
  for (int j = 0; j < kMaxKernel; ++j) {
    if (j >= keep) break;
    win[j] = live ? st[j] : 0.0f;
    wk[j] = live ? w[c * K + j] : 0.0f;
  }
  const float w_now = live ? w[c * K + keep] : 0.0f;
  pdl_begin();
  if (!live) return;
  for (int t = 0; t < s.n_tokens; ++t) {
    float* xi = x + (int64_t(s.row_begin) + t) * C + c;
    const float in = *xi;
    double acc = 0.0;
#pragma unroll
    for (int j = 0; j < kMaxKernel; ++j) {
      if (j >= keep) break;
      acc += double(wk[j]) * double(win[j]);
    }
    acc += double(w_now) * double(in);
    const float a = float(acc);
    *xi = a / (1.0f + expf(-a));
#pragma unroll
    for (int j = 0; j < kMaxKernel; ++j) {
      if (j >= keep) break;
      win[j] = j + 1 < keep ? win[j + 1 < kMaxKernel ? j + 1 : j] : in;
    }
  }
#pragma unroll
  for (int j = 0; j < kMaxKernel; ++j) {
    if (j >= keep) break;
    st[j] = win[j];
  }
}

}  // namespace

void conv1d_silu(const Context& ctx, const Tensor& x, const Tensor& w, const StateLayerView& state, int kernel,
                 const StepPlan& plan) {
  check_step(ctx, plan);
  check_f32(x, "conv1d x");
  check_f32(w, "conv1d w");
  check_f32(state.conv, "conv1d state");
  const int64_t C = x.cols, T = x.rows;
  const int keep = kernel - 1;
  KCHECK_MSG(kernel >= 1 && kernel <= kMaxKernel, "conv1d_silu: kernel ", kernel, " (CUDA takes 1..", kMaxKernel, ")");
  KCHECK_MSG(w.rows == C && w.cols == kernel && state.conv.cols == C * keep, "conv1d_silu: w [", w.rows, ", ", w.cols,
             "] state cols ", state.conv.cols, " for ", C, " channels, kernel ", kernel);
  KCHECK(x.rows == plan.n_rows());
  for (const SeqStep& s : plan.seqs) KCHECK(s.state_slot >= 0 && s.state_slot < state.conv.rows);
  if (plan.seqs.empty() || C == 0 || T == 0) return;
  bool short_rows = true;
  for (const SeqStep& s : plan.seqs) short_rows = short_rows && s.n_tokens <= kFusedMaxRows;
  if (short_rows) {
    launch(conv1d_silu_fused_kernel, dim3(unsigned(ceil_div(C, kThreads)), unsigned(plan.seqs.size())), kThreads, 0,
           ctx.stream, x.f32(), w.f32(), state.conv.f32(), ctx.step.seqs, C, kernel);
    CUDA_CHECK_LAUNCH();
    return;
  }
  auto* y = static_cast<float*>(ctx.scratch->get(kSlotConvOut, size_t(T * C) * 4));
  launch(conv1d_silu_kernel, unsigned(ceil_div(T * C, kThreads)), kThreads, 0, ctx.stream, y, x.f32(), w.f32(),
         state.conv.f32(), ctx.step.seqs, ctx.step.row_seq, T, C, kernel);
  CUDA_CHECK_LAUNCH();
  if (keep > 0) {
    launch(conv1d_state_kernel, dim3(unsigned(ceil_div(C, kThreads)), unsigned(plan.seqs.size())), kThreads, 0,
           ctx.stream, state.conv.f32(), x.f32(), ctx.step.seqs, C, kernel);
    CUDA_CHECK_LAUNCH();
  }
  CUDA_CHECK(cudaMemcpyAsync(x.data, y, size_t(T * C) * 4, cudaMemcpyDeviceToDevice, ctx.stream));
}

}  // namespace kestrel::cuda
