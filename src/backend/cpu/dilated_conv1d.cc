// dilated_conv1d_silu: depthwise causal convolution with dilation that continues each
// sequence's state (its last (kernel - 1) * dilation inputs per channel), then SiLU.
#include <cmath>
#include <vector>

#include "backend/cpu/kernels.h"
#include "core/thread_pool.h"

namespace kestrel::cpu {

void dilated_conv1d_silu(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& state, int kernel,
                         int dilation, const StepPlan& plan) {
  const int64_t C = x.cols;
  const int64_t keep = int64_t(kernel - 1) * dilation;
  KCHECK(out.rows == x.rows && out.cols == C && out.data != x.data);
  KCHECK(w.rows == C && w.cols == kernel && state.cols == C * keep);
  const int64_t n_seq = int64_t(plan.seqs.size());
  with_act(x, [&]<typename A>() {
  ThreadPool::global().parallel_for(n_seq * C, [&](int64_t i0, int64_t i1) {
    std::vector<A> hist;  // [keep + n_tokens]: state then this step's inputs
    for (int64_t item = i0; item < i1; ++item) {
      const SeqStep& s = plan.seqs[size_t(item / C)];
      const int64_t c = item % C;
      A* st = act<A>(state) + int64_t(s.state_slot) * state.cols + c * keep;
      hist.assign(st, st + keep);
      for (int32_t t = 0; t < s.n_tokens; ++t) hist.push_back(act<A>(x)[int64_t(s.row_begin + t) * C + c]);
      const float* wc = w.f32() + c * kernel;
      for (int32_t t = 0; t < s.n_tokens; ++t) {
        double acc = 0.0;
        for (int j = 0; j < kernel; ++j) acc += double(wc[j]) * double(hist[size_t(keep + t - int64_t(kernel - 1 - j) * dilation)]);
        const A a = A(acc);
        act<A>(out)[int64_t(s.row_begin + t) * C + c] = a / (A(1) + std::exp(-a));
      }
      std::copy(hist.end() - keep, hist.end(), st);
    }
  }, 64);
  });
}

}  // namespace kestrel::cpu
