// moe_route / moe_experts: softmax top-k routing and the routed gated-MLP experts (SwiGLU or GeGLU).
// Each (token, rank) pair is computed on its own and the ranks are summed in order, so a
// token's output never depends on which other tokens share the batch.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backend/cpu/kernels.h"
#include "core/thread_pool.h"

namespace kestrel::cpu {

void moe_route(const Tensor& ids, const Tensor& weights, const Tensor& logits, int top_k, bool norm_topk) {
  const int64_t T = logits.rows, E = logits.cols;
  KCHECK(ids.dtype == DType::kI32 && ids.rows == T && ids.cols == top_k && weights.cols == top_k);
  with_act(logits, [&]<typename A>() {
  std::vector<double> prob(static_cast<size_t>(E));
  std::vector<int32_t> order(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t) {
    const A* l = act<A>(logits) + t * E;
    A mx = *std::max_element(l, l + E);
    double sum = 0.0;
    for (int64_t e = 0; e < E; ++e) sum += prob[size_t(e)] = std::exp(double(l[e]) - double(mx));
    for (auto& p : prob) p /= sum;
    std::iota(order.begin(), order.end(), 0);
    // highest probability first; ties to the lower expert index
    std::partial_sort(order.begin(), order.begin() + top_k, order.end(), [&](int32_t x, int32_t y) {
      return prob[size_t(x)] != prob[size_t(y)] ? prob[size_t(x)] > prob[size_t(y)] : x < y;
    });
    double denom = 0.0;
    for (int j = 0; j < top_k; ++j) denom += prob[size_t(order[size_t(j)])];
    for (int j = 0; j < top_k; ++j) {
      ids.as<int32_t>()[t * top_k + j] = order[size_t(j)];
      double w = prob[size_t(order[size_t(j)])];
      act<A>(weights)[t * top_k + j] = A(norm_topk ? w / denom : w);
    }
  }
  });
}

void moe_experts(const Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                 const ExpertWeights& experts) {
  const int64_t T = x.rows, H = x.cols;
  const int k = int(ids.cols);
  const int64_t E = int64_t(experts.gate.size());
  KCHECK(out.rows == T && out.cols == H && E > 0);
  const int64_t F = experts.gate[0].rows;
  // Group (token, rank) pairs by expert so each expert's weights stream once per step.
  std::vector<std::vector<int64_t>> by_expert(static_cast<size_t>(E));  // entries: t * k + j
  for (int64_t t = 0; t < T; ++t) {
    for (int j = 0; j < k; ++j) {
      int32_t e = ids.as<int32_t>()[t * k + j];
      KCHECK(e >= 0 && e < E);
      by_expert[size_t(e)].push_back(t * k + j);
    }
  }
  with_act(x, [&]<typename A>() {
  constexpr DType kAct = kActDType<A>;
  std::vector<A> partial(size_t(T * k * H), A(0));  // [T, k, H]
  for (int64_t e = 0; e < E; ++e) {
    const auto& pairs = by_expert[size_t(e)];
    if (pairs.empty()) continue;
    const int64_t n = int64_t(pairs.size());
    Buffer xs = host_buffer(kAct, n, H);
    for (int64_t i = 0; i < n; ++i)
      std::copy_n(act<A>(x) + (pairs[size_t(i)] / k) * H, H, act<A>(xs.view()) + i * H);
    Buffer g = host_buffer(kAct, n, F), u = host_buffer(kAct, n, F), y = host_buffer(kAct, n, H);
    matmul(g, xs, experts.gate[size_t(e)]);
    matmul(u, xs, experts.up[size_t(e)]);
    if (experts.act == Activation::kGeluTanh) {
      gelu_tanh_mul(g, g, u);
    } else {
      silu_mul(g, g, u);
    }
    matmul(y, g, experts.down[size_t(e)]);
    for (int64_t i = 0; i < n; ++i) {
      A w = act<A>(weights)[pairs[size_t(i)]];
      if (!experts.expert_scale.empty()) w *= A(experts.expert_scale.f32()[e]);
      A* dst = partial.data() + pairs[size_t(i)] * H;
      const A* src = act<A>(y.view()) + i * H;
      for (int64_t c = 0; c < H; ++c) dst[c] = w * src[c];
    }
  }
  for (int64_t t = 0; t < T; ++t) {
    A* o = act<A>(out) + t * H;
    for (int64_t c = 0; c < H; ++c) o[c] = A(0);
    for (int j = 0; j < k; ++j) {
      const A* p = partial.data() + (t * k + j) * H;
      for (int64_t c = 0; c < H; ++c) o[c] += p[c];
    }
  }
  });
}

}  // namespace kestrel::cpu
