// rope: rotary position embedding, rotate-half (NEOX) pairing: over the leading rotary_dim dims
// of every head, or (whole_head_pairs) pairs (i, i + head_dim/2) of which the first rotary_dim/2
// rotate. Angles are formed in fp32 (position x inverse frequency), as transformers does.
#include <cmath>
#include <vector>

#include "backend/cpu/kernels.h"
#include "core/thread_pool.h"

namespace kestrel::cpu {

template <typename A>
void rope_vector_t(A* v, int head_dim, const RopeConfig& cfg, int64_t position) {
  const int rot = cfg.rotary_dim;
  if (rot == 0) return;
  const int half = rot / 2;
  const int span = cfg.whole_head_pairs ? head_dim / 2 : half;
  const int freq_dim = cfg.freq_dim > 0 ? cfg.freq_dim : rot;
  const float pos = float(position);
  for (int i = 0; i < half; ++i) {
    const float angle = pos * rope_inv_freq(cfg.theta, i, freq_dim);
    const A cs = float(std::cos(double(angle))), sn = float(std::sin(double(angle)));
    const A a = v[i], b = v[i + span];
    v[i] = a * cs - b * sn;
    v[i + span] = b * cs + a * sn;
  }
}

void rope_vector(float* v, int head_dim, const RopeConfig& cfg, int64_t position) {
  rope_vector_t(v, head_dim, cfg, position);
}
void rope_vector(double* v, int head_dim, const RopeConfig& cfg, int64_t position) {
  rope_vector_t(v, head_dim, cfg, position);
}

void rope(const Tensor& x, int head_dim, const RopeConfig& cfg, const StepPlan& plan) {
  const int rot = cfg.rotary_dim;
  if (rot == 0) return;
  KCHECK(rot % 2 == 0 && rot <= head_dim && x.cols % head_dim == 0);
  KCHECK(x.rows == plan.n_rows());
  const int half = rot / 2;                                    // rotating pairs
  const int span = cfg.whole_head_pairs ? head_dim / 2 : half;  // distance between a pair's dims
  KCHECK(!cfg.whole_head_pairs || (head_dim % 2 == 0 && half <= span));
  const int freq_dim = cfg.freq_dim > 0 ? cfg.freq_dim : rot;
  std::vector<float> freqs(half);
  for (int i = 0; i < half; ++i) freqs[i] = rope_inv_freq(cfg.theta, i, freq_dim);
  const int64_t n_heads = x.cols / head_dim;
  with_act(x, [&]<typename A>() {
  ThreadPool::global().parallel_for(x.rows, [&](int64_t r0, int64_t r1) {
    std::vector<float> cs(half), sn(half);
    for (int64_t r = r0; r < r1; ++r) {
      float pos = float(plan.positions[size_t(r)]);
      for (int i = 0; i < half; ++i) {
        float angle = pos * freqs[i];
        cs[i] = float(std::cos(double(angle)));
        sn[i] = float(std::sin(double(angle)));
      }
      for (int64_t h = 0; h < n_heads; ++h) {
        A* v = act<A>(x) + r * x.cols + h * head_dim;
        for (int i = 0; i < half; ++i) {
          const A a = v[i], b = v[i + span], c = cs[i], d = sn[i];
          v[i] = a * c - b * d;
          v[i + span] = b * c + a * d;
        }
      }
    }
  });
  });
}

}  // namespace kestrel::cpu
