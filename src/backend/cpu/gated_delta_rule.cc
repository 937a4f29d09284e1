// gated_delta_rule: Gated DeltaNet, per (sequence, value head), with the state S [dk, dv]
// carried in the sequence's slot.
//
//   S_t = exp(g_t) S_{t-1} + k_t (beta_t (v_t - S^T k_t))^T,    o_t = S_t^T q_t
//
// Decode tokens run this recurrence directly. Prefill runs the chunked (WY) form over chunks
// of at most 64 tokens whose boundaries sit at absolute positions that are multiples of 64, so
// prefill split on that grid gives bit-identical results to one pass. A chunk of one token
// runs the recurrence.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/kernels.h"
#include "core/thread_pool.h"

namespace kestrel::cpu {
namespace {

constexpr int kChunk = 64;

// The oracle does the delta-rule algebra in double (cheap next to the projections, and the
// recurrence is poorly conditioned in f32 when outputs cancel); the cached state keeps the
// activation dtype (F32, or F64 in the float64 oracle mode).
using acc_t = double;

inline double softplus(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }

void l2_normalize(acc_t* v, int n) {
  acc_t ss = 0.0;
  for (int i = 0; i < n; ++i) ss += v[i] * v[i];
  acc_t s = 1.0 / std::sqrt(ss + 1e-6);
  for (int i = 0; i < n; ++i) v[i] *= s;
}

struct Scratch {
  // per chunk: [kChunk, dk] / [kChunk, dv] / [kChunk, kChunk]
  std::vector<acc_t> q, k, v, beta, g, gc, A, U, W, vnew;
  std::vector<acc_t> S;  // [dk, dv] working copy of the state
  std::vector<acc_t> o;  // [kChunk, dv]
};

// One token of the recurrence. q [dk] (scaled), k [dk], v [dv]; S [dk, dv]; o [dv].
void recurrent_step(acc_t* S, const acc_t* q, const acc_t* k, const acc_t* v, acc_t beta, acc_t g, int dk, int dv,
                    acc_t* o) {
  const acc_t decay = std::exp(g);
  for (int i = 0; i < dk * dv; ++i) S[i] *= decay;
  std::vector<acc_t> delta(size_t(dv), 0.0);
  for (int d = 0; d < dk; ++d) {
    const acc_t kd = k[d];
    const acc_t* row = S + d * dv;
    for (int e = 0; e < dv; ++e) delta[size_t(e)] += kd * row[e];
  }
  for (int e = 0; e < dv; ++e) delta[size_t(e)] = (v[e] - delta[size_t(e)]) * beta;
  for (int d = 0; d < dk; ++d) {
    acc_t* row = S + d * dv;
    for (int e = 0; e < dv; ++e) row[e] += k[d] * delta[size_t(e)];
  }
  for (int e = 0; e < dv; ++e) o[e] = 0.0;
  for (int d = 0; d < dk; ++d) {
    const acc_t qd = q[d];
    const acc_t* row = S + d * dv;
    for (int e = 0; e < dv; ++e) o[e] += qd * row[e];
  }
}

// L tokens (2 <= L <= 64) of the chunked form. Inputs in the scratch's q, k, v, beta, g.
void chunk_step(acc_t* S, Scratch& sc, int L, int dk, int dv, acc_t* out, int64_t out_stride) {
  acc_t* q = sc.q.data();
  acc_t* k = sc.k.data();
  acc_t* v = sc.v.data();
  acc_t* A = sc.A.data();   // [L, L]
  acc_t* U = sc.U.data();   // [L, dv]
  acc_t* W = sc.W.data();   // [L, dk]
  acc_t* vn = sc.vnew.data();
  acc_t* gc = sc.gc.data();
  for (int i = 0; i < L; ++i) gc[i] = (i ? gc[i - 1] : 0.0) + sc.g[size_t(i)];
  // A[i][j] = -beta_i (k_i . k_j) exp(gc_i - gc_j) for j < i
  for (int i = 0; i < L; ++i) {
    for (int j = 0; j < L; ++j) {
      acc_t val = 0.0;
      if (j < i) {
        acc_t d = 0.0;
        for (int e = 0; e < dk; ++e) d += k[i * dk + e] * k[j * dk + e];
        val = -(sc.beta[size_t(i)] * d) * std::exp(gc[i] - gc[j]);
      }
      A[i * L + j] = val;
    }
  }
  // forward substitution: T = (I - strict_lower)^-1 built row by row, then + I
  for (int i = 1; i < L; ++i) {
    for (int j = 0; j < i; ++j) {
      acc_t acc = A[i * L + j];
      for (int m = j + 1; m < i; ++m) acc += A[i * L + m] * A[m * L + j];
      A[i * L + j] = acc;
    }
  }
  for (int i = 0; i < L; ++i) A[i * L + i] = 1.0;
  // U = T (beta v), W = T (beta k exp(gc))
  for (int i = 0; i < L; ++i) {
    for (int e = 0; e < dv; ++e) U[i * dv + e] = 0.0;
    for (int e = 0; e < dk; ++e) W[i * dk + e] = 0.0;
    for (int j = 0; j <= i; ++j) {
      const acc_t t = A[i * L + j];
      const acc_t tb = t * sc.beta[size_t(j)];
      const acc_t tbg = tb * std::exp(gc[j]);
      for (int e = 0; e < dv; ++e) U[i * dv + e] += tb * v[j * dv + e];
      for (int e = 0; e < dk; ++e) W[i * dk + e] += tbg * k[j * dk + e];
    }
  }
  // v_new = U - W S
  for (int i = 0; i < L; ++i) {
    for (int e = 0; e < dv; ++e) vn[i * dv + e] = U[i * dv + e];
    for (int d = 0; d < dk; ++d) {
      const acc_t w = W[i * dk + d];
      const acc_t* row = S + d * dv;
      for (int e = 0; e < dv; ++e) vn[i * dv + e] -= w * row[e];
    }
  }
  // o_i = exp(gc_i) q_i S + sum_{j<=i} (q_i . k_j) exp(gc_i - gc_j) v_new_j
  for (int i = 0; i < L; ++i) {
    acc_t* o = out + i * out_stride;
    const acc_t eg = std::exp(gc[i]);
    for (int e = 0; e < dv; ++e) o[e] = 0.0;
    for (int d = 0; d < dk; ++d) {
      const acc_t qd = q[i * dk + d] * eg;
      const acc_t* row = S + d * dv;
      for (int e = 0; e < dv; ++e) o[e] += qd * row[e];
    }
    for (int j = 0; j <= i; ++j) {
      acc_t d = 0.0;
      for (int e = 0; e < dk; ++e) d += q[i * dk + e] * k[j * dk + e];
      const acc_t c = d * std::exp(gc[i] - gc[j]);
      for (int e = 0; e < dv; ++e) o[e] += c * vn[j * dv + e];
    }
  }
  // S = exp(gc_last) S + sum_i (k_i exp(gc_last - gc_i)) v_new_i^T
  const acc_t glast = gc[L - 1];
  const acc_t el = std::exp(glast);
  for (int i = 0; i < dk * dv; ++i) S[i] *= el;
  for (int i = 0; i < L; ++i) {
    const acc_t c = std::exp(glast - gc[i]);
    for (int d = 0; d < dk; ++d) {
      const acc_t kd = k[i * dk + d] * c;
      acc_t* row = S + d * dv;
      for (int e = 0; e < dv; ++e) row[e] += kd * vn[i * dv + e];
    }
  }
}

}  // namespace

void gated_delta_rule(const Tensor& out, const Tensor& qkv, const Tensor& a, const Tensor& b, const Tensor& a_neg,
                      const Tensor& dt_bias, const StateLayerView& state, const DeltaNetConfig& cfg,
                      const StepPlan& plan) {
  const int nk = cfg.n_k_heads, nv = cfg.n_v_heads, dk = cfg.k_head_dim, dv = cfg.v_head_dim;
  KCHECK(qkv.cols == cfg.conv_dim() && out.cols == int64_t(nv) * dv && a.cols == nv && b.cols == nv);
  KCHECK(state.ssm.cols == int64_t(nv) * dk * dv);
  const acc_t q_scale = 1.0 / std::sqrt(acc_t(dk));
  const int64_t n_items = int64_t(plan.seqs.size()) * nv;
  with_act(qkv, [&]<typename A>() {
  ThreadPool::global().parallel_for(n_items, [&](int64_t w0, int64_t w1) {
    Scratch sc;
    sc.q.resize(size_t(kChunk * dk));
    sc.k.resize(size_t(kChunk * dk));
    sc.v.resize(size_t(kChunk * dv));
    sc.beta.resize(kChunk);
    sc.g.resize(kChunk);
    sc.gc.resize(kChunk);
    sc.A.resize(size_t(kChunk * kChunk));
    sc.U.resize(size_t(kChunk * dv));
    sc.W.resize(size_t(kChunk * dk));
    sc.vnew.resize(size_t(kChunk * dv));
    sc.S.resize(size_t(dk * dv));
    sc.o.resize(size_t(kChunk * dv));
    for (int64_t item = w0; item < w1; ++item) {
      const SeqStep& s = plan.seqs[size_t(item / nv)];
      const int h = int(item % nv);
      const int kh = cfg.key_head(h);  // grouped: h / ratio (repeat_interleave); tiled: h mod nk
      A* state_row = act<A>(state.ssm) + int64_t(s.state_slot) * state.ssm.cols + int64_t(h) * dk * dv;
      acc_t* S = sc.S.data();
      for (int i = 0; i < dk * dv; ++i) S[i] = state_row[i];
      const acc_t an = a_neg.f32()[h], bias = dt_bias.f32()[h];
      int32_t t = 0;
      while (t < s.n_tokens) {
        const int32_t pos = s.n_past + t;
        const int L = std::min<int32_t>(kChunk - pos % kChunk, s.n_tokens - t);
        for (int i = 0; i < L; ++i) {
          const int64_t r = s.row_begin + t + i;
          const A* row = act<A>(qkv) + r * qkv.cols;
          acc_t* qi = sc.q.data() + i * dk;
          acc_t* ki = sc.k.data() + i * dk;
          for (int e = 0; e < dk; ++e) {
            qi[e] = row[int64_t(kh) * dk + e];
            ki[e] = row[int64_t(nk) * dk + int64_t(kh) * dk + e];
          }
          l2_normalize(qi, dk);
          l2_normalize(ki, dk);
          for (int e = 0; e < dk; ++e) qi[e] *= q_scale;
          const A* vr = row + 2 * int64_t(nk) * dk + int64_t(h) * dv;
          for (int e = 0; e < dv; ++e) sc.v[size_t(i * dv + e)] = vr[e];
          const acc_t bv = act<A>(b)[r * nv + h];
          sc.beta[size_t(i)] = 1.0 / (1.0 + std::exp(-bv));
          sc.g[size_t(i)] = an * softplus(acc_t(act<A>(a)[r * nv + h]) + bias);
        }
        acc_t* o = sc.o.data();
        if (L == 1) {
          recurrent_step(S, sc.q.data(), sc.k.data(), sc.v.data(), sc.beta[0], sc.g[0], dk, dv, o);
        } else {
          chunk_step(S, sc, L, dk, dv, o, dv);
        }
        // The state is rounded to its stored precision after every piece of the grid, so a
        // prefill split on the grid computes exactly what one pass computes.
        for (int i = 0; i < dk * dv; ++i) S[i] = acc_t(A(S[i]));
        for (int i = 0; i < L; ++i) {
          A* dst = act<A>(out) + int64_t(s.row_begin + t + i) * out.cols + int64_t(h) * dv;
          for (int e = 0; e < dv; ++e) dst[e] = A(o[i * dv + e]);
        }
        t += L;
      }
      for (int i = 0; i < dk * dv; ++i) state_row[i] = A(S[i]);
    }
  });
  });
}

}  // namespace kestrel::cpu
