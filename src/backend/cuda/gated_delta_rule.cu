// gated_delta_rule: Gated DeltaNet per (sequence, value head), the state S [dk, dv] loaded from
// the sequence's slot into shared memory, advanced token by token, and stored back as F32.
//
//   S_t = exp(g_t) S_{t-1} + k_t (beta_t (v_t - S^T k_t))^T,    o_t = S_t^T q_t
//
// This first kernel runs the recurrent form for prefill too (correctness first; the chunked WY
// kernel is next, docs/cuda.md). The state is rounded to F32 at the end of every chunk of the
// 64-aligned grid, exactly as when a step ends there, so prefill split on that grid is
// bit-identical to one pass (and any other split agrees to F32 rounding). The algebra is in
// double while the state fits in shared memory (as on the CPU oracle, whose comment explains
// why), else in float.
#include "backend/cuda/device_util.cuh"

namespace kestrel::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kChunk = 64;  // the engine's chunk grid (absolute positions)
constexpr size_t kMaxSmem = 200 * 1024;

// grid: (n_v_heads, n_seqs); block: kThreads; dynamic smem: S [dk * dv] + q, k [dk] of Acc.
// Thread e owns columns e, e + kThreads, ... of S.
template <typename Acc>
__global__ void gdr_recurrent_kernel(float* __restrict__ out,         // [T, nv * dv]
                                     const float* __restrict__ qkv,   // [T, 2 * nk * dk + nv * dv]
                                     const float* __restrict__ a,     // [T, nv]
                                     const float* __restrict__ b,     // [T, nv]
                                     const float* __restrict__ a_neg, // [nv]
                                     const float* __restrict__ dt_bias,  // [nv]
                                     float* __restrict__ ssm,         // [n_slots, nv * dk * dv]
                                     const SeqStep* __restrict__ seqs, int nk, int nv, int dk, int dv) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Acc* S = reinterpret_cast<Acc*>(smem_raw);  // [dk, dv]
  Acc* qs = S + dk * dv;                      // [dk]
  Acc* ks = qs + dk;                          // [dk]
  const int h = blockIdx.x, kh = h / (nv / nk);
  const SeqStep s = seqs[blockIdx.y];
  const int64_t qkv_cols = 2 * int64_t(nk) * dk + int64_t(nv) * dv;
  float* state = ssm + int64_t(s.state_slot) * nv * dk * dv + int64_t(h) * dk * dv;
  for (int i = threadIdx.x; i < dk * dv; i += blockDim.x) S[i] = Acc(state[i]);
  const Acc q_scale = Acc(1) / sqrt(Acc(dk));
  const Acc an = a_neg[h], bias = dt_bias[h];
  for (int32_t t = 0; t < s.n_tokens; ++t) {
    const int64_t r = s.row_begin + t;
    const float* row = qkv + r * qkv_cols;
    Acc sq = 0, sk = 0;
    for (int d = threadIdx.x; d < dk; d += blockDim.x) {
      const Acc qd = row[int64_t(kh) * dk + d], kd = row[int64_t(nk) * dk + int64_t(kh) * dk + d];
      qs[d] = qd;
      ks[d] = kd;
      sq += qd * qd;
      sk += kd * kd;
    }
    sq = block_sum(sq);
    sk = block_sum(sk);  // block_sum synchronizes: qs, ks are complete
    const Acc q_norm = Acc(1) / sqrt(sq + Acc(1e-6)) * q_scale, k_norm = Acc(1) / sqrt(sk + Acc(1e-6));
    const Acc beta = Acc(1) / (Acc(1) + exp(-Acc(b[r * nv + h])));
    const Acc x = Acc(a[r * nv + h]) + bias;
    const Acc g = an * (x > Acc(20) ? x : log1p(exp(x)));
    const Acc decay = exp(g);
    for (int e = threadIdx.x; e < dv; e += blockDim.x) {
      const Acc ve = row[2 * int64_t(nk) * dk + int64_t(h) * dv + e];
      Acc delta = 0;
      for (int d = 0; d < dk; ++d) {
        const Acc sv = S[d * dv + e] * decay;
        S[d * dv + e] = sv;
        delta += (ks[d] * k_norm) * sv;
      }
      delta = (ve - delta) * beta;
      Acc o = 0;
      for (int d = 0; d < dk; ++d) {
        const Acc sv = S[d * dv + e] + (ks[d] * k_norm) * delta;
        S[d * dv + e] = sv;
        o += (qs[d] * q_norm) * sv;
      }
      out[r * int64_t(nv) * dv + int64_t(h) * dv + e] = float(o);
      // At the end of each 64-aligned chunk the state is rounded to F32, as if stored to the
      // slot: a prefill split on that grid is then bit-identical to one pass.
      if ((s.n_past + t + 1) % kChunk == 0) {
        for (int d = 0; d < dk; ++d) S[d * dv + e] = Acc(float(S[d * dv + e]));
      }
    }
    __syncthreads();  // qs, ks are rewritten by the next token
  }
  for (int i = threadIdx.x; i < dk * dv; i += blockDim.x) state[i] = float(S[i]);
}

template <typename Acc>
void launch_gdr(const Context& ctx, const Tensor& out, const Tensor& qkv, const Tensor& a, const Tensor& b,
                const Tensor& a_neg, const Tensor& dt_bias, const StateLayerView& state, const DeltaNetConfig& cfg,
                int n_seqs, size_t smem) {
  if (smem > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(gdr_recurrent_kernel<Acc>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(smem)));
  dim3 grid(unsigned(cfg.n_v_heads), unsigned(n_seqs));
  gdr_recurrent_kernel<Acc><<<grid, kThreads, smem, ctx.stream>>>(
      out.f32(), qkv.f32(), a.f32(), b.f32(), a_neg.f32(), dt_bias.f32(), state.ssm.f32(), ctx.step.seqs,
      cfg.n_k_heads, cfg.n_v_heads, cfg.k_head_dim, cfg.v_head_dim);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void gated_delta_rule(const Context& ctx, const Tensor& out, const Tensor& qkv, const Tensor& a, const Tensor& b,
                      const Tensor& a_neg, const Tensor& dt_bias, const StateLayerView& state,
                      const DeltaNetConfig& cfg, const StepPlan& plan) {
  check_step(ctx, plan);
  for (const Tensor* t : {&out, &qkv, &a, &b, &a_neg, &dt_bias, &state.ssm}) check_f32(*t, "gated_delta_rule tensor");
  const int nk = cfg.n_k_heads, nv = cfg.n_v_heads, dk = cfg.k_head_dim, dv = cfg.v_head_dim;
  KCHECK_MSG(nk > 0 && nv % nk == 0, "gated_delta_rule: ", nv, " value heads over ", nk, " key heads");
  KCHECK_MSG(qkv.cols == cfg.conv_dim() && out.cols == int64_t(nv) * dv && a.cols == nv && b.cols == nv,
             "gated_delta_rule: qkv cols ", qkv.cols, " (want ", cfg.conv_dim(), "), out cols ", out.cols, ", a/b cols ",
             a.cols, "/", b.cols);
  KCHECK(a_neg.numel() == nv && dt_bias.numel() == nv);
  KCHECK(state.ssm.cols == int64_t(nv) * dk * dv);
  KCHECK(qkv.rows == plan.n_rows() && out.rows == qkv.rows && a.rows == qkv.rows && b.rows == qkv.rows);
  for (const SeqStep& s : plan.seqs) KCHECK(s.state_slot >= 0 && s.state_slot < state.ssm.rows);
  if (plan.seqs.empty()) return;
  const size_t smem_d = (size_t(dk) * dv + 2 * size_t(dk)) * sizeof(double);
  const size_t smem_f = (size_t(dk) * dv + 2 * size_t(dk)) * sizeof(float);
  if (smem_d <= kMaxSmem) {
    launch_gdr<double>(ctx, out, qkv, a, b, a_neg, dt_bias, state, cfg, int(plan.seqs.size()), smem_d);
  } else {
    KCHECK_MSG(smem_f <= kMaxSmem, "gated_delta_rule: a ", dk, "x", dv, " state does not fit in shared memory");
    launch_gdr<float>(ctx, out, qkv, a, b, a_neg, dt_bias, state, cfg, int(plan.seqs.size()), smem_f);
  }
}

}  // namespace kestrel::cuda
