// gated_delta_rule: Gated DeltaNet per (sequence, value head),
//
//   S_t = exp(g_t) S_{t-1} + k_t (beta_t (v_t - S^T k_t))^T,    o_t = S_t^T q_t
//
// in two forms, chosen per sequence by where its new tokens sit on the absolute 64-grid:
// - the whole chunks of the grid (prefill) run the chunked (WY) form in F32
//   (gated_delta_rule_chunked.cu), when some sequence of the step has one and the head shapes
//   suit it (KESTREL_CUDA_CHUNKED_DELTANET=0 turns it off);
// - the tokens before the first grid point and after the last whole chunk (decode, partial
//   chunks) run the recurrent form below, token by token, in double.
// A sequence's pieces run in order (recurrent head, chunks, recurrent tail), each piece's
// arithmetic depending only on that sequence, so results do not depend on the batch.
//
// Recurrent kernel: a block owns 32 value columns of one head of one sequence (one column per
// lane) and all dk key rows, 32 per warp, with the state in registers in double, so a decode step
// reads and writes each state element once, spread over n_v_heads * ceil(dv / 32) blocks per
// sequence. The sums over k run per warp and then over the warps in a fixed order. The next
// token's q, k, v, a, b are loaded while the current one is computed. At the end of every chunk of
// the 64-aligned grid the state is rounded to F32, exactly as when a step ends there (and as the
// chunked form stores it), so prefill split on that grid is bit-identical to one pass; a split off
// the grid moves work between the two forms and agrees to their precision (docs/cuda.md).
#include <cstdlib>
#include <type_traits>

#include <cooperative_groups.h>

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/gated_delta_rule_chunked.h"

namespace kestrel::cuda {
namespace {

constexpr int kChunk = kGdrChunk;
constexpr int kRowsPerWarp = 32;

// Which of a sequence's new tokens a recurrent launch takes (gdr_split).
enum class Part : int { kAll, kHead, kTail };

// A block's shared scratch for one token: q, k [blockDim.x], partial sums [2][n_warps][32],
// norms [2][n_warps], doubles.
struct GdrScratch {
  double* qs;
  double* ks;
  double* red;
  double* norms;
};
// The scratch laid out in a block's dynamic shared memory, and its size for `threads` threads.
__device__ __forceinline__ GdrScratch gdr_scratch(unsigned char* raw) {
  const int n_warps = blockDim.x >> 5;
  double* qs = reinterpret_cast<double*>(raw);
  double* ks = qs + blockDim.x;
  double* red = ks + blockDim.x;
  return {qs, ks, red, red + 2 * n_warps * 32};
}
size_t gdr_scratch_bytes(int threads) {
  const size_t warps = size_t(threads) / 32;
  return (2 * size_t(threads) + 2 * warps * 32 + 2 * warps) * sizeof(double);
}

// One token of the recurrence for the block's 32 value columns (lane = column): qd, kd the
// thread's q and k elements (thread = key row), ve the lane's v, ar, br its head's raw a and b.
// Updates S (the warp's 32 key rows of the lane's column; rounded to F32 when round_state, the
// end of a chunk of the 64-grid) and returns the column's output, summed over the warps in
// order, in warp 0 (0 elsewhere). The scratch is free again when it returns.
template <bool kOneToken, typename Held>
__device__ __forceinline__ float gdr_token(Held (&S)[kRowsPerWarp], double qd, double kd, double ve, double ar,
                                           double br, double an, double bias, double q_scale, const GdrScratch& sc,
                                           int d0, bool round_state) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  // L2 norms of q and k over dk
  const double sq = warp_sum(qd * qd), sk = warp_sum(kd * kd);
  if (lane == 0) {
    sc.norms[warp] = sq;
    sc.norms[n_warps + warp] = sk;
  }
  __syncthreads();  // (A)
  double tq = 0, tk = 0;
  for (int w = 0; w < n_warps; ++w) {
    tq += sc.norms[w];
    tk += sc.norms[n_warps + w];
  }
  sc.qs[threadIdx.x] = qd * (1.0 / sqrt(tq + 1e-6) * q_scale);
  sc.ks[threadIdx.x] = kd * (1.0 / sqrt(tk + 1e-6));
  const double beta = 1.0 / (1.0 + exp(-br));
  const double x = ar + bias;
  const double decay = exp(an * (x > 20.0 ? x : log1p(exp(x))));
  __syncthreads();  // (B): qs, ks complete
  double part = 0;
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    if constexpr (kOneToken) {
      part = fma(sc.ks[d0 + i], __dmul_rn(double(S[i]), decay), part);
    } else {
      S[i] = __dmul_rn(S[i], decay);
      part = fma(sc.ks[d0 + i], S[i], part);
    }
  }
  sc.red[warp * 32 + lane] = part;
  __syncthreads();  // (C)
  double delta = 0;
  for (int w = 0; w < n_warps; ++w) delta += sc.red[w * 32 + lane];
  delta = (ve - delta) * beta;
  double o = 0;
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    if constexpr (kOneToken) {
      const double si = fma(sc.ks[d0 + i], delta, __dmul_rn(double(S[i]), decay));
      o = fma(sc.qs[d0 + i], si, o);
      S[i] = float(si);  // what the general form stores at the step's end
    } else {
      S[i] = fma(sc.ks[d0 + i], delta, S[i]);
      o = fma(sc.qs[d0 + i], S[i], o);
    }
  }
  sc.red[(n_warps + warp) * 32 + lane] = o;
  if (!kOneToken && round_state) {
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) S[i] = double(float(S[i]));
  }
  __syncthreads();  // (D): partial outputs complete; qs, ks and norms free for the next token
  if (warp != 0) return 0.0f;
  double sum = 0;
  for (int w = 0; w < n_warps; ++w) sum += sc.red[(n_warps + w) * 32 + lane];
  return float(sum);
}

// grid: (n_v_heads, n_seqs, ceil(dv / 32)); block: 32 * ceil(dk / 32) threads;
// dynamic smem: q, k [n_threads] + partial sums [2][n_warps][32] + norms [2][n_warps], doubles.
// kOneToken: every sequence of the launch has exactly one token (a decode step). Its state is
// rounded to F32 when the step ends anyway, so the registers hold it as loaded (F32, half the
// registers, ~2x the blocks resident: the batch-64 step is bound by state loads in flight) and
// each use widens it again, the decayed value formed twice by the same multiply: bit-identical
// to the general form (both spell out their roundings: __dmul_rn for the decay, fma for the
// sums, so contraction cannot differ between them).
#define GDR_PARAMS                                                                                  \
  float *__restrict__ out, const float *__restrict__ qkv, const float *__restrict__ a,                 \
      const float *__restrict__ b, const float *__restrict__ a_neg, const float *__restrict__ dt_bias, \
      float *__restrict__ ssm, const SeqStep *__restrict__ seqs, Part part, int nk, int nv, int kdiv, int dk, int dv
#define GDR_ARGS out, qkv, a, b, a_neg, dt_bias, ssm, seqs, part, nk, nv, kdiv, dk, dv
template <bool kOneToken>
__device__ __forceinline__ void gdr_body(float* __restrict__ out,            // [T, nv * dv]
                           const float* __restrict__ qkv,      // [T, 2 * nk * dk + nv * dv]
                           const float* __restrict__ a,        // [T, nv]
                           const float* __restrict__ b,        // [T, nv]
                           const float* __restrict__ a_neg,    // [nv]
                           const float* __restrict__ dt_bias,  // [nv]
                           float* __restrict__ ssm,            // [n_slots, nv * dk * dv]
                           const SeqStep* __restrict__ seqs, Part part, int nk, int nv, int kdiv, int dk,
                           int dv) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const GdrScratch sc = gdr_scratch(smem_raw);
  const int h = blockIdx.x, kh = (h / kdiv) % nk;  // DeltaNetConfig::key_head
  const SeqStep s = seqs[blockIdx.y];
  int32_t t_begin = 0, t_end = s.n_tokens;
  if (part != Part::kAll) {
    const GdrSplit sp = gdr_split(s.n_past, s.n_tokens);
    if (part == Part::kHead) t_end = sp.head;
    else t_begin = sp.head + sp.n_full * kChunk;
  }
  const int e = int(blockIdx.z) * 32 + lane;
  const bool col = e < dv;
  const int64_t qkv_cols = 2 * int64_t(nk) * dk + int64_t(nv) * dv;
  float* state = ssm + int64_t(s.state_slot) * nv * dk * dv + int64_t(h) * dk * dv;
  const int d0 = warp * kRowsPerWarp;
  using Held = std::conditional_t<kOneToken, float, double>;
  Held S[kRowsPerWarp];
  auto load_state = [&] {
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i)
      S[i] = (col && d0 + i < dk) ? Held(state[int64_t(d0 + i) * dv + e]) : Held(0);
  };
  // A decode step's state loads go before pdl_begin, while the kernel before this one (the
  // conv1d) still runs: this layer's state was last written by this kernel in an earlier step
  // (or by the chunked kernel of an earlier launch), and the step's plan was uploaded before the
  // step's first kernel. Launches that follow the chunked kernel in the same op (Part::kTail)
  // read the state it wrote, so they load after the wait.
  if constexpr (kOneToken) load_state();
  pdl_begin();
  if (t_begin >= t_end) return;  // the whole block: nothing to do, state untouched
  if constexpr (!kOneToken) load_state();
  const double q_scale = 1.0 / sqrt(double(dk));
  const double an = a_neg[h], bias = dt_bias[h];
  const int d_own = threadIdx.x;  // the q, k element this thread loads
  float qn = 0, kn = 0, vn = 0, araw = 0, braw = 0;
  auto load = [&](int64_t r) {
    const float* row = qkv + r * qkv_cols;
    qn = d_own < dk ? row[int64_t(kh) * dk + d_own] : 0.0f;
    kn = d_own < dk ? row[int64_t(nk) * dk + int64_t(kh) * dk + d_own] : 0.0f;
    vn = col ? row[2 * int64_t(nk) * dk + int64_t(h) * dv + e] : 0.0f;
    araw = a[r * nv + h];
    braw = b[r * nv + h];
  };
  load(s.row_begin + t_begin);
  for (int32_t t = t_begin; t < t_end; ++t) {
    const int64_t r = s.row_begin + t;
    const double qd = qn, kd = kn, ve = vn, ar = araw, br = braw;
    if (!kOneToken && t + 1 < t_end) load(r + 1);
    const float o = gdr_token<kOneToken>(S, qd, kd, ve, ar, br, an, bias, q_scale, sc, d0,
                                         (s.n_past + t + 1) % kChunk == 0);
    if (warp == 0 && col) out[r * int64_t(nv) * dv + int64_t(h) * dv + e] = o;
  }
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i)
    if (col && d0 + i < dk) state[int64_t(d0 + i) * dv + e] = float(S[i]);
}

template <bool kOneToken>
__global__ void gdr_kernel(GDR_PARAMS) {
  gdr_body<kOneToken>(GDR_ARGS);
}
// The same for 128 threads (dk = 128), its registers capped so that kMinBlocks blocks fit a SM.
template <bool kOneToken, int kMinBlocks>
__global__ void __launch_bounds__(128, kMinBlocks) gdr_kernel_128(GDR_PARAMS) {
  gdr_body<kOneToken>(GDR_ARGS);
}
constexpr size_t kGdrCappedMinSeqs = 16;

// Ops::deltanet_recurrence for a decode step (every sequence one token): the conv before the
// one-token recurrence and the gated norm after it, in the recurrence's blocks. The blocks form
// clusters of share x Z: the share = nv / nk value heads that read one key head (grid x, so
// cluster x = the key head; `tiled` value heads h = m nk + g, else g share + m) times the
// Z = dv / 32 column blocks of each (grid z).
// - Conv: each thread runs conv1d_silu_fused_kernel's sums for its q and k channels (key row
//   threadIdx.x) and its lane's v channel: the window's products before pdl_begin (the kernel
//   before writes neither the conv state nor the weights), the new input's after, in the same order.
// - Norm: warp 0 puts its 32 outputs in shared memory; after a cluster barrier each lane reads its
//   column in every block of its head (cluster rank m + share z, z = the column block: column
//   order) and forms group_rms_norm_staged_kernel's sum over them: the same sums, the same bits.
// - The conv state advances after that barrier, when every block of the cluster has read the old
//   windows: q and k by the cluster's first block (all of its blocks read them), v by warp 0 of
//   the block that owns the columns. A second barrier keeps each block's shared memory alive
//   until the others have read it.
// Requires dk and dv multiples of 32 and share Z <= 8 (deltanet_recurrence checks).
#define GDR_FUSED_PARAMS                                                                             \
  float *__restrict__ out, const float *__restrict__ qkv, const float *__restrict__ z,                 \
      const float *__restrict__ a, const float *__restrict__ b, const float *__restrict__ conv_w,      \
      float *__restrict__ conv, const float *__restrict__ a_neg, const float *__restrict__ dt_bias,    \
      const float *__restrict__ norm_w, float *__restrict__ ssm, const SeqStep *__restrict__ seqs, int nk, \
      int nv, int share, bool tiled, int dk, int dv, int K, float eps
#define GDR_FUSED_ARGS out, qkv, z, a, b, conv_w, conv, a_neg, dt_bias, norm_w, ssm, seqs, nk, nv, share, tiled, dk, dv, K, eps

// The window part of a channel's conv sum (conv1d_silu_fused_kernel's first `keep` terms).
__device__ __forceinline__ double conv_window_sum(const float* __restrict__ win, const float* __restrict__ w,
                                                  int keep) {
  double acc = 0.0;
  for (int j = 0; j < keep; ++j) acc += double(w[j]) * double(win[j]);
  return acc;
}
__device__ __forceinline__ float conv_finish(double acc, float w_now, float in) {
  acc += double(w_now) * double(in);
  const float v = float(acc);
  return v / (1.0f + expf(-v));
}
// The window of one channel advanced by its new input, in place (oldest first).
__device__ __forceinline__ void conv_advance(float* __restrict__ win, int keep, float in) {
  for (int j = 0; j + 1 < keep; ++j) win[j] = win[j + 1];
  if (keep > 0) win[keep - 1] = in;
}

__device__ __forceinline__ void gdr_fused_body(GDR_FUSED_PARAMS) {
  namespace cg = cooperative_groups;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ float exch[32];
  const cg::cluster_group cluster = cg::this_cluster();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const GdrScratch sc = gdr_scratch(smem_raw);
  const int g = int(blockIdx.x) / share, m = int(blockIdx.x) % share;
  const int h = tiled ? m * nk + g : g * share + m;
  const SeqStep s = seqs[blockIdx.y];
  const int e = int(blockIdx.z) * 32 + lane;
  const int keep = K - 1;
  const int64_t C = 2 * int64_t(nk) * dk + int64_t(nv) * dv;
  const int64_t cq = int64_t(g) * dk + threadIdx.x, ck = int64_t(nk) * dk + cq;
  const int64_t cv = 2 * int64_t(nk) * dk + int64_t(h) * dv + e;
  float* cst = conv + int64_t(s.state_slot) * C * keep;
  float* state = ssm + int64_t(s.state_slot) * nv * dk * dv + int64_t(h) * dk * dv;
  const int d0 = warp * kRowsPerWarp;
  // Before the wait: the recurrent state, the conv windows' sums, weights (see above).
  float S[kRowsPerWarp];
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) S[i] = state[int64_t(d0 + i) * dv + e];
  const double pq = conv_window_sum(cst + cq * keep, conv_w + cq * K, keep);
  const double pk = conv_window_sum(cst + ck * keep, conv_w + ck * K, keep);
  const double pv = conv_window_sum(cst + cv * keep, conv_w + cv * K, keep);
  const float wq = conv_w[cq * K + keep], wk = conv_w[ck * K + keep], wv = conv_w[cv * K + keep];
  const double an = a_neg[h], bias = dt_bias[h];
  const float nw = norm_w[e];
  pdl_begin();
  const int64_t r = s.row_begin;
  const float* row = qkv + r * C;
  const float in_q = row[cq], in_k = row[ck], in_v = row[cv];
  const float araw = a[r * nv + h], braw = b[r * nv + h];
  const int64_t o_at = r * int64_t(nv) * dv + int64_t(h) * dv + e;
  const float zv = z[o_at];
  const float qn = conv_finish(pq, wq, in_q), kn = conv_finish(pk, wk, in_k), vn = conv_finish(pv, wv, in_v);
  const float o = gdr_token<true>(S, qn, kn, vn, araw, braw, an, bias, 1.0 / sqrt(double(dk)), sc, d0, false);
  if (warp == 0) exch[lane] = o;
  cluster.sync();  // every block's outputs are in place and every old window has been read
  if (warp == 0) {
    const int Z = dv / 32;
    double ss = 0.0;
    for (int c = 0; c < Z; ++c) {
      const float v = *cluster.map_shared_rank(&exch[lane], unsigned(m + share * c));
      ss += double(v) * double(v);
    }
    ss = warp_sum(ss);
    const float sn = rms_scale(ss, dv, eps);
    float y = (o * sn) * nw;
    y *= siluf(zv);
    out[o_at] = y;
    conv_advance(cst + cv * keep, keep, in_v);
  }
  if (m == 0 && blockIdx.z == 0) {
    conv_advance(cst + cq * keep, keep, in_q);
    conv_advance(cst + ck * keep, keep, in_k);
  }
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) state[int64_t(d0 + i) * dv + e] = S[i];
  cluster.sync();  // the other blocks have read exch
}

__global__ void gdr_fused_kernel(GDR_FUSED_PARAMS) { gdr_fused_body(GDR_FUSED_ARGS); }
__global__ void __launch_bounds__(128, 4) gdr_fused_kernel_128(GDR_FUSED_PARAMS) { gdr_fused_body(GDR_FUSED_ARGS); }

bool chunked_enabled() {
  const char* v = std::getenv("KESTREL_CUDA_CHUNKED_DELTANET");
  return !(v && v[0] == '0');
}

// gated_delta_rule's argument checks (deltanet_recurrence's too, beside its conv and norm ones).
void check_gdr_args(const Context& ctx, const Tensor& out, const Tensor& qkv, const Tensor& a, const Tensor& b,
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
}

}  // namespace

void gated_delta_rule(const Context& ctx, const Tensor& out, const Tensor& qkv, const Tensor& a, const Tensor& b,
                      const Tensor& a_neg, const Tensor& dt_bias, const StateLayerView& state,
                      const DeltaNetConfig& cfg, const StepPlan& plan) {
  check_gdr_args(ctx, out, qkv, a, b, a_neg, dt_bias, state, cfg, plan);
  const int nk = cfg.n_k_heads, nv = cfg.n_v_heads, dk = cfg.k_head_dim, dv = cfg.v_head_dim;
  if (plan.seqs.empty()) return;
  KCHECK_MSG(dk <= 1024, "gated_delta_rule: key head size ", dk, " exceeds 1024");
  KCHECK_MSG(plan.seqs.size() <= 65535, "gated_delta_rule: more than 65535 sequences in one step");
  const int threads = 32 * int(ceil_div(dk, 32));
  const size_t smem = gdr_scratch_bytes(threads);
  dim3 grid(unsigned(nv), unsigned(plan.seqs.size()), unsigned(ceil_div(dv, 32)));
  bool decode_step = true;  // every sequence one token: the whole step is a kAll launch
  for (const SeqStep& s : plan.seqs) decode_step = decode_step && s.n_tokens == 1;
  auto recurrent = [&](Part part) {
    const bool one_token = part == Part::kAll && decode_step;
    // Many decoding sequences: the register-capped one-token kernel (4 blocks a SM instead of 2;
    // batch 64 of the 9B's layer 170 -> 133 us); few: the uncapped one, whose spills would cost
    // more than the added residency buys (batch 1: 4.8 us against 6.4).
    auto* kernel = !one_token ? gdr_kernel<false>
                   : threads == 128 && plan.seqs.size() >= kGdrCappedMinSeqs ? gdr_kernel_128<true, 4>
                                                                           : gdr_kernel<true>;
    if (smem > 48 * 1024)
      CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    launch(kernel, grid, threads, smem, ctx.stream, out.f32(), qkv.f32(), a.f32(), b.f32(), a_neg.f32(),
           dt_bias.f32(), state.ssm.f32(), ctx.step.seqs, part, nk, nv, cfg.key_head_div(), dk, dv);
    CUDA_CHECK_LAUNCH();
  };
  std::vector<GdrChunkRun> runs;
  if (chunked_enabled() && gdr_chunked_supports(cfg)) {
    for (const SeqStep& s : plan.seqs) {
      const GdrSplit sp = gdr_split(s.n_past, s.n_tokens);
      if (sp.n_full > 0) runs.push_back({s.row_begin + sp.head, sp.n_full, s.state_slot});
    }
  }
  if (runs.empty()) {
    recurrent(Part::kAll);
    return;
  }
  recurrent(Part::kHead);
  gated_delta_rule_chunked(ctx, out, qkv, a, b, a_neg, dt_bias, state.ssm, cfg, runs);
  recurrent(Part::kTail);
}

bool deltanet_recurrence(const Context& ctx, const Tensor& out, const Tensor& qkv, const Tensor& z, const Tensor& a,
                         const Tensor& b, const Tensor& conv_w, const Tensor& a_neg, const Tensor& dt_bias,
                         const Tensor& norm, float eps, const StateLayerView& state, const DeltaNetConfig& cfg,
                         const StepPlan& plan) {
  const int nk = cfg.n_k_heads, nv = cfg.n_v_heads, dk = cfg.k_head_dim, dv = cfg.v_head_dim, K = cfg.conv_kernel;
  if (plan.seqs.empty() || nk <= 0 || nv % nk != 0 || dk % 32 != 0 || dk > 1024 || dv % 32 != 0 || K < 1 ||
      K > kConv1dMaxKernel || plan.seqs.size() > 65535)
    return false;
  const int share = nv / nk, Z = dv / 32;
  if (share * Z > 8) return false;  // the portable cluster size
  for (const SeqStep& s : plan.seqs)
    if (s.n_tokens != 1) return false;
  check_gdr_args(ctx, out, qkv, a, b, a_neg, dt_bias, state, cfg, plan);
  for (const Tensor* t : {&z, &conv_w, &norm, &state.conv}) check_f32(*t, "deltanet_recurrence tensor");
  const int64_t C = cfg.conv_dim();
  KCHECK_MSG(z.rows == out.rows && z.cols == out.cols, "deltanet_recurrence: z [", z.rows, ", ", z.cols, "], out [",
             out.rows, ", ", out.cols, "]");
  KCHECK_MSG(conv_w.rows == C && conv_w.cols == K && state.conv.cols == C * (K - 1), "deltanet_recurrence: conv w [",
             conv_w.rows, ", ", conv_w.cols, "], state cols ", state.conv.cols, " for ", C, " channels, kernel ", K);
  KCHECK(norm.numel() == dv);
  for (const SeqStep& s : plan.seqs) KCHECK(s.state_slot < state.conv.rows);
  const int threads = dk;
  const size_t smem = gdr_scratch_bytes(threads);
  // Many sequences: the register-capped kernel, as gated_delta_rule picks for its one-token kernel.
  auto* kernel = threads == 128 && plan.seqs.size() >= kGdrCappedMinSeqs ? gdr_fused_kernel_128 : gdr_fused_kernel;
  if (smem > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  launch_cluster(kernel, dim3(unsigned(nv), unsigned(plan.seqs.size()), unsigned(Z)), threads,
                 dim3(unsigned(share), 1, unsigned(Z)), smem, ctx.stream, out.f32(), qkv.f32(), z.f32(), a.f32(),
                 b.f32(), conv_w.f32(), state.conv.f32(), a_neg.f32(), dt_bias.f32(), norm.f32(), state.ssm.f32(),
                 ctx.step.seqs, nk, nv, share, cfg.tiled_value_heads, dk, dv, K, eps);
  CUDA_CHECK_LAUNCH();
  return true;
}

}  // namespace kestrel::cuda
