// qsa_select: the QSA (Qwen4-Exp sparse attention) indexer. Each row at position p sees its
// sequence's positions [0, p]; their raw indexer keys, in complete blocks of `ratio`, are
// mean-pooled, RMS-normed and rotated at the block's first position, then scored against the
// row's indexer query heads (relu, summed over heads). The best budget/ratio blocks plus the
// incomplete tail [blocks * ratio, p] are the positions the row attends.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "backend/cpu/kernels.h"
#include "core/thread_pool.h"

namespace kestrel::cpu {
namespace {

inline int64_t cache_row(const StepPlan& plan, const SeqStep& s, int64_t pos) {
  int32_t block = plan.block_tables[size_t(s.table_begin + pos / plan.block_size)];
  return int64_t(block) * plan.block_size + pos % plan.block_size;
}

}  // namespace

void qsa_select(const Tensor& select, const Tensor& q, const Tensor& k, const Tensor& k_norm, const KvLayerView& cache,
                const QsaParams& p, const StepPlan& plan) {
  const int d = p.head_dim, r = p.ratio;
  KCHECK(r > 0 && p.budget % r == 0 && select.dtype == DType::kI32);
  KCHECK(select.rows == q.rows && select.cols == p.budget + r - 1);
  KCHECK(q.cols == int64_t(p.n_heads) * d && k.cols == d && cache.index_k.cols == d && k_norm.cols == d);
  with_act(q, [&]<typename A>() {
  // 1. append this step's raw keys
  for (int64_t row = 0; row < k.rows; ++row) {
    const SeqStep& s = plan.seqs[size_t(plan.row_seq[size_t(row)])];
    const int64_t dst = cache_row(plan, s, plan.positions[size_t(row)]);
    std::memcpy(act<A>(cache.index_k) + dst * d, act<A>(k) + row * d, size_t(d) * sizeof(A));
  }
  const int keep_blocks = p.budget / r;
  const double inv_sqrt_d = 1.0 / std::sqrt(double(d));
  // 2. select, one row per work item
  ThreadPool::global().parallel_for(q.rows, [&](int64_t r0, int64_t r1) {
    std::vector<A> pooled(static_cast<size_t>(d));
    std::vector<double> scores;
    std::vector<int32_t> order;
    for (int64_t row = r0; row < r1; ++row) {
      const SeqStep& s = plan.seqs[size_t(plan.row_seq[size_t(row)])];
      const int64_t pos = plan.positions[size_t(row)];
      const int64_t n_blocks = (pos + 1) / r;
      scores.assign(size_t(n_blocks), 0.0);
      for (int64_t b = 0; b < n_blocks; ++b) {
        for (int i = 0; i < d; ++i) {
          double acc = 0.0;
          for (int j = 0; j < r; ++j) acc += double(act<A>(cache.index_k)[cache_row(plan, s, b * r + j) * d + i]);
          pooled[size_t(i)] = A(acc / double(r));
        }
        double ss = 0.0;
        for (int i = 0; i < d; ++i) ss += double(pooled[size_t(i)]) * double(pooled[size_t(i)]);
        const A inv = A(1.0 / std::sqrt(ss / double(d) + double(p.eps)));
        for (int i = 0; i < d; ++i) pooled[size_t(i)] = (pooled[size_t(i)] * inv) * A(k_norm.f32()[i]);
        rope_vector(pooled.data(), d, p.rope, b * r);
        double score = 0.0;
        for (int h = 0; h < p.n_heads; ++h) {
          const A* qh = act<A>(q) + row * q.cols + int64_t(h) * d;
          double dot = 0.0;
          for (int i = 0; i < d; ++i) dot += double(qh[i]) * double(pooled[size_t(i)]);
          score += std::max(dot, 0.0);
        }
        scores[size_t(b)] = score * inv_sqrt_d;
      }
      order.resize(size_t(n_blocks));
      std::iota(order.begin(), order.end(), 0);
      const int64_t take = std::min<int64_t>(keep_blocks, n_blocks);
      std::partial_sort(order.begin(), order.begin() + take, order.end(), [&](int32_t a, int32_t b) {
        return scores[size_t(a)] != scores[size_t(b)] ? scores[size_t(a)] > scores[size_t(b)] : a < b;
      });
      int32_t* out = select.as<int32_t>() + row * select.cols;
      int64_t n = 0;
      for (int64_t i = 0; i < take; ++i) {
        for (int j = 0; j < r; ++j) out[n++] = int32_t(int64_t(order[size_t(i)]) * r + j);
      }
      for (int64_t t = n_blocks * r; t <= pos; ++t) out[n++] = int32_t(t);
      KCHECK(n <= select.cols);
      for (; n < select.cols; ++n) out[n] = -1;
    }
  });
  });
}

}  // namespace kestrel::cpu
