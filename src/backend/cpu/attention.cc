// attention: paged-KV causal softmax attention with GQA and an optional sliding window.
// First the step's k/v rows are written into each sequence's blocks, then every (row, head)
// attends over its sequence's cached positions [max(0, p - window + 1), p], or over the row's
// selected positions (sparse attention), in ascending order.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/kernels.h"
#include "core/thread_pool.h"

namespace kestrel::cpu {
namespace {

// Row of the cache tensors holding position `pos` of sequence `s`.
inline int64_t cache_row(const StepPlan& plan, const SeqStep& s, int64_t pos) {
  int32_t block = plan.block_tables[size_t(s.table_begin + pos / plan.block_size)];
  return int64_t(block) * plan.block_size + pos % plan.block_size;
}

}  // namespace

void attention(const Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, const KvLayerView& cache,
               const AttentionParams& p, const StepPlan& plan) {
  const int hd = p.head_dim;
  const int64_t kv_width = int64_t(p.n_kv_heads) * hd;
  const bool append = !k.empty();  // empty k/v: read the cache only (KV-shared layer)
  KCHECK(k.empty() == v.empty());
  KCHECK(q.cols == int64_t(p.n_heads) * hd && (!append || (k.cols == kv_width && v.cols == kv_width)));
  KCHECK(cache.k.cols == kv_width && out.cols == q.cols && out.rows == q.rows);
  KCHECK(p.n_heads % p.n_kv_heads == 0);
  const int group = p.n_heads / p.n_kv_heads;

  // 1. append this step's keys and values
  for (int64_t r = 0; append && r < k.rows; ++r) {
    const SeqStep& s = plan.seqs[size_t(plan.row_seq[size_t(r)])];
    KCHECK(plan.positions[size_t(r)] < int64_t(s.n_blocks) * plan.block_size);
    int64_t row = cache_row(plan, s, plan.positions[size_t(r)]);
    std::memcpy(cache.k.f32() + row * kv_width, k.f32() + r * kv_width, size_t(kv_width) * 4);
    std::memcpy(cache.v.f32() + row * kv_width, v.f32() + r * kv_width, size_t(kv_width) * 4);
  }

  // 2. attend, one (row, head) per work item
  ThreadPool::global().parallel_for(q.rows * p.n_heads, [&](int64_t w0, int64_t w1) {
    std::vector<float> scores;
    std::vector<int64_t> positions;
    std::vector<float> acc(static_cast<size_t>(hd));
    for (int64_t w = w0; w < w1; ++w) {
      const int64_t r = w / p.n_heads;
      const int h = int(w % p.n_heads);
      const int kvh = h / group;
      const SeqStep& s = plan.seqs[size_t(plan.row_seq[size_t(r)])];
      const int64_t pos = plan.positions[size_t(r)];
      const int64_t first = p.window > 0 ? std::max<int64_t>(0, pos - p.window + 1) : 0;
      const float* qv = q.f32() + r * q.cols + int64_t(h) * hd;
      // the attended positions, ascending: [first, pos], or the row's selection
      positions.clear();
      if (p.select.empty()) {
        for (int64_t j = first; j <= pos; ++j) positions.push_back(j);
      } else {
        const int32_t* sel = p.select.as<const int32_t>() + r * p.select.cols;
        for (int64_t c = 0; c < p.select.cols; ++c) {
          if (sel[c] < 0) continue;
          KCHECK(sel[c] <= pos);
          positions.push_back(sel[c]);
        }
        std::sort(positions.begin(), positions.end());
      }
      scores.resize(positions.size());
      float max_score = -INFINITY;
      for (size_t z = 0; z < positions.size(); ++z) {
        const float* kv = cache.k.f32() + cache_row(plan, s, positions[z]) * kv_width + int64_t(kvh) * hd;
        float d = dot_f32(qv, kv, hd) * p.scale;
        scores[z] = d;
        max_score = std::max(max_score, d);
      }
      double sum = 0.0;
      for (float& sc : scores) {
        sc = std::exp(sc - max_score);
        sum += sc;
      }
      const float inv = float(1.0 / sum);
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (size_t z = 0; z < positions.size(); ++z) {
        const float* vv = cache.v.f32() + cache_row(plan, s, positions[z]) * kv_width + int64_t(kvh) * hd;
        const float pj = scores[z];
        for (int i = 0; i < hd; ++i) acc[size_t(i)] += pj * vv[i];
      }
      float* o = out.f32() + r * out.cols + int64_t(h) * hd;
      for (int i = 0; i < hd; ++i) o[i] = acc[size_t(i)] * inv;
    }
  }, 4);
}

}  // namespace kestrel::cpu
