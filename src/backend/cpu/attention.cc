// attention: causal softmax attention with GQA, an optional sliding window or a per-row
// selection, over the KV cache (paged blocks, or a per-sequence ring for sliding layers) and this
// step's own keys and values. Positions before the step come from the cache, the step's own
// positions from k/v (when given), so a ring only has to hold the window's past; the step's k/v
// are written to the cache after every row has attended (unless p.write_kv is false).
// A BF16 cache (Ops::kv_cache_dtype) stores rows rounded to BF16, and every key and value a row
// attends is then taken at BF16 — the step's own rows rounded as they are read — so a position's
// value is the same whether a prefill's chunking puts it in the step or in the cache.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/kernels.h"
#include "core/thread_pool.h"

namespace kestrel::cpu {
namespace {

// Row of the cache tensors holding position `pos` of sequence `s`.
inline int64_t cache_row(const StepPlan& plan, const KvLayerView& cache, const SeqStep& s, int64_t pos) {
  if (cache.ring_rows > 0) return int64_t(s.state_slot) * cache.ring_rows + pos % cache.ring_rows;
  int32_t block = plan.block_tables[size_t(s.table_begin + pos / plan.block_size)];
  return int64_t(block) * plan.block_size + pos % plan.block_size;
}

}  // namespace

void kv_write(const KvLayerView& cache, const Tensor& k, const Tensor& v, const StepPlan& plan) {
  const int64_t width = k.cols;
  KCHECK(v.cols == width && cache.k.cols == width && cache.v.cols == width && k.rows == plan.n_rows());
  KCHECK_MSG(v.dtype == k.dtype && cache.v.dtype == cache.k.dtype &&
                 (cache.k.dtype == k.dtype || cache.k.dtype == DType::kBF16),
             "kv_write: k/v of ", dtype_name(k.dtype), " into a ", dtype_name(cache.k.dtype),
             " cache (the activation dtype or BF16)");
  for (int64_t r = 0; r < k.rows; ++r) {
    const SeqStep& s = plan.seqs[size_t(plan.row_seq[size_t(r)])];
    const int64_t pos = plan.positions[size_t(r)];
    if (cache.ring_rows > 0) {
      KCHECK(s.state_slot >= 0 && (s.state_slot + 1) * int64_t(cache.ring_rows) <= cache.k.rows);
      // only the ring's worth of the step's last positions survive; skip the rest
      if (int64_t(s.row_begin) + s.n_tokens - r > cache.ring_rows) continue;
    } else {
      KCHECK(pos < int64_t(s.n_blocks) * plan.block_size);
    }
    const int64_t row = cache_row(plan, cache, s, pos);
    if (cache.k.dtype == DType::kBF16) {  // rounded to nearest even, as every reader expects
      with_act(k, [&]<typename A>() {
        for (const auto& [dst, src] : {std::pair{cache.k, k}, std::pair{cache.v, v}}) {
          uint16_t* d = dst.template as<uint16_t>() + row * width;
          const A* x = act<A>(src) + r * width;
          for (int64_t i = 0; i < width; ++i) d[i] = f32_to_bf16(float(x[i]));
        }
      });
      continue;
    }
    const size_t es = dtype_size(k.dtype);
    std::memcpy(static_cast<uint8_t*>(cache.k.data) + size_t(row * width) * es,
                static_cast<const uint8_t*>(k.data) + size_t(r * width) * es, size_t(width) * es);
    std::memcpy(static_cast<uint8_t*>(cache.v.data) + size_t(row * width) * es,
                static_cast<const uint8_t*>(v.data) + size_t(r * width) * es, size_t(width) * es);
  }
}

void attention(const Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, const KvLayerView& cache,
               const AttentionParams& p, const StepPlan& plan) {
  const int hd = p.head_dim;
  const int64_t kv_width = int64_t(p.n_kv_heads) * hd;
  const bool step_kv = !k.empty();  // empty k/v: everything comes from the cache
  KCHECK(k.empty() == v.empty());
  KCHECK(q.cols == int64_t(p.n_heads) * hd && (!step_kv || (k.cols == kv_width && v.cols == kv_width)));
  KCHECK(cache.k.cols == kv_width && out.cols == q.cols && out.rows == q.rows);
  KCHECK(p.n_heads % p.n_kv_heads == 0);
  KCHECK(cache.ring_rows == 0 || (p.window > 0 && p.window <= cache.ring_rows && p.select.empty()));
  KCHECK(cache.v.dtype == cache.k.dtype && (cache.k.dtype == q.dtype || cache.k.dtype == DType::kBF16));
  const bool bf16 = cache.k.dtype == DType::kBF16;
  const int group = p.n_heads / p.n_kv_heads;
  with_act(q, [&]<typename A>() {
  // KV head kvh's key (or value) of position j for sequence s: this step's tensor or the cache;
  // with a BF16 cache, rounded to BF16 into `buf` (hd values)
  auto row_of = [&](const Tensor& step, const Tensor& cached, const SeqStep& s, int64_t j, int kvh,
                    std::vector<A>& buf) -> const A* {
    const bool own = step_kv && j >= s.n_past;
    const int64_t row = own ? int64_t(s.row_begin) + j - s.n_past : cache_row(plan, cache, s, j);
    const int64_t at = row * kv_width + int64_t(kvh) * hd;
    if (!bf16) return act<A>(own ? step : cached) + at;
    if (own)
      for (int i = 0; i < hd; ++i) buf[size_t(i)] = A(bf16_to_f32(f32_to_bf16(float(act<A>(step)[at + i]))));
    else
      for (int i = 0; i < hd; ++i) buf[size_t(i)] = A(bf16_to_f32(cached.as<const uint16_t>()[at + i]));
    return buf.data();
  };

  // attend, one (row, head) per work item
  ThreadPool::global().parallel_for(q.rows * p.n_heads, [&](int64_t w0, int64_t w1) {
    std::vector<A> scores;
    std::vector<int64_t> positions;
    std::vector<A> acc(static_cast<size_t>(hd)), buf(static_cast<size_t>(hd));
    for (int64_t w = w0; w < w1; ++w) {
      const int64_t r = w / p.n_heads;
      const int h = int(w % p.n_heads);
      const int kvh = h / group;
      const SeqStep& s = plan.seqs[size_t(plan.row_seq[size_t(r)])];
      const int64_t pos = plan.positions[size_t(r)];
      const int64_t first = p.window > 0 ? std::max<int64_t>(0, pos - p.window + 1) : 0;
      const A* qv = act<A>(q) + r * q.cols + int64_t(h) * hd;
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
      A max_score = -INFINITY;
      for (size_t z = 0; z < positions.size(); ++z) {
        const A* kv = row_of(k, cache.k, s, positions[z], kvh, buf);
        A d = dot_act(qv, kv, hd) * A(p.scale);
        scores[z] = d;
        max_score = std::max(max_score, d);
      }
      double sum = 0.0;
      for (A& sc : scores) {
        sc = std::exp(sc - max_score);
        sum += sc;
      }
      const A inv = A(1.0 / sum);
      std::fill(acc.begin(), acc.end(), A(0));
      for (size_t z = 0; z < positions.size(); ++z) {
        const A* vv = row_of(v, cache.v, s, positions[z], kvh, buf);
        const A pj = scores[z];
        for (int i = 0; i < hd; ++i) acc[size_t(i)] += pj * vv[i];
      }
      A* o = act<A>(out) + r * out.cols + int64_t(h) * hd;
      for (int i = 0; i < hd; ++i) o[i] = acc[size_t(i)] * inv;
    }
  }, 4);
  });
  if (step_kv && p.write_kv) kv_write(cache, k, v, plan);
}

}  // namespace kestrel::cpu
