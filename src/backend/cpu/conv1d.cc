// conv1d_silu: depthwise causal convolution over time that continues each sequence's conv
// state (its last K-1 inputs), then SiLU. The state is updated to the last K-1 inputs.
#include <cmath>
#include <vector>

#include "backend/cpu/kernels.h"
#include "core/thread_pool.h"

namespace kestrel::cpu {

void conv1d_silu(const Tensor& x, const Tensor& w, const StateLayerView& state, int kernel, const StepPlan& plan) {
  const int64_t C = x.cols;
  const int keep = kernel - 1;
  KCHECK(w.rows == C && w.cols == kernel && state.conv.cols == C * keep);
  // Parallel over (sequence, channel block): each channel's time loop is sequential.
  const int64_t n_seq = int64_t(plan.seqs.size());
  const int64_t cblocks = (C + 63) / 64;
  with_act(x, [&]<typename A>() {
  ThreadPool::global().parallel_for(n_seq * cblocks, [&](int64_t w0, int64_t w1) {
    std::vector<A> window(static_cast<size_t>(kernel));
    for (int64_t item = w0; item < w1; ++item) {
      const SeqStep& s = plan.seqs[size_t(item / cblocks)];
      const int64_t c0 = (item % cblocks) * 64, c1 = std::min<int64_t>(C, c0 + 64);
      A* st = act<A>(state.conv) + int64_t(s.state_slot) * state.conv.cols;  // [C, keep]
      for (int64_t c = c0; c < c1; ++c) {
        const float* wc = w.f32() + c * kernel;
        A* sc = st + c * keep;
        for (int j = 0; j < keep; ++j) window[size_t(j)] = sc[j];
        for (int32_t t = 0; t < s.n_tokens; ++t) {
          A* xv = act<A>(x) + int64_t(s.row_begin + t) * C + c;
          window[size_t(keep)] = *xv;
          double acc_d = 0.0;
          for (int j = 0; j < kernel; ++j) acc_d += double(wc[j]) * double(window[size_t(j)]);
          A acc = A(acc_d);
          for (int j = 0; j < keep; ++j) window[size_t(j)] = window[size_t(j + 1)];
          *xv = acc / (A(1) + std::exp(-acc));
        }
        for (int j = 0; j < keep; ++j) sc[j] = window[size_t(j)];
      }
    }
  });
  });
}

}  // namespace kestrel::cpu
