// rope: rotate-half (NEOX) rotary embedding of the leading rotary_dim dims of every head, at the
// plan's positions. Angles in fp32 (position x inverse frequency), cos/sin in double, like the
// CPU oracle; frequencies over freq_dim dims (proportional RoPE) when set. whole_head_pairs
// (Gemma 4's proportional RoPE) pairs (i, i + head_dim/2) instead of (i, i + rotary_dim/2), of
// which the first rotary_dim/2 rotate.
#include "backend/cuda/attention_split.cuh"
#include "backend/cuda/device_util.cuh"

namespace kestrel::cuda {
namespace {

constexpr int kMaxPairs = 256;
struct InvFreqs {
  float v[kMaxPairs];  // rope_inv_freq of each rotating pair, formed on the host like the CPU's
};

// A pair's rotation, its roundings spelled out so that rope_kernel and qk_norm_rope_kernel give
// the same bits: x' = a c - b s, y' = b c + a s, the second product rounded first.
__device__ __forceinline__ void rotate_pair(float a, float b, float c, float s, float& x, float& y) {
  x = __fmaf_rn(a, c, -__fmul_rn(b, s));
  y = __fmaf_rn(b, c, __fmul_rn(a, s));
}

// grid: T blocks; threads walk (head, i) for i < half; pair (i, i + span).
__global__ void rope_kernel(float* x,  // [T, n_heads * head_dim], in place
                            const int32_t* __restrict__ positions,  // [T]
                            int n_heads, int head_dim, int half, int span, const InvFreqs freqs) {
  pdl_begin();
  const int64_t r = blockIdx.x;
  const float pos = float(positions[r]);
  float* row = x + r * int64_t(n_heads) * head_dim;
  for (int w = threadIdx.x; w < n_heads * half; w += blockDim.x) {
    const int h = w / half, i = w % half;
    const float angle = pos * freqs.v[i];
    const float c = float(cos(double(angle))), s = float(sin(double(angle)));
    float* v = row + h * head_dim;
    const float a = v[i], b = v[i + span];
    rotate_pair(a, b, c, s, v[i], v[i + span]);
  }
}

// Ops::qk_norm_rope in one launch: a warp per (row, head) of q, then of k, the head's R * 32
// values in registers (R = head_dim / 32), normalized as group_rms_norm_staged_kernel does (a
// lane's values in order, the double sum over the warp) when the head's weight is given, then
// rotated as rope_kernel does. With a cache (kv.k_cache not null; qk_norm_rope_kv_write) a k
// head's warp also stores its values in the row's paged cache row as kv_write_kernel does, and
// warps after k's copy v's heads there. grid: ceil(rows * heads a row / kQkWarps) blocks of
// kQkWarps warps.
constexpr int kQkWarps = 8, kQkMaxDim = 256;
template <typename C>
struct KvDest {
  C* k_cache = nullptr;  // cache rows [*, k_heads * d]; null: no cache write
  C* v_cache = nullptr;
  const float* v = nullptr;  // [rows, k_heads * d]
  const int32_t* row_seq = nullptr;
  const SeqStep* seqs = nullptr;
  const int32_t* block_tables = nullptr;
  int block_size = 0;
};
template <int R, typename C>
__global__ void qk_norm_rope_kernel(float* q, const float* __restrict__ q_norm, int64_t q_heads,  // q [rows, q_heads * d]
                                    float* k, const float* __restrict__ k_norm, int64_t k_heads,  // k [rows, k_heads * d] or null
                                    const int32_t* __restrict__ positions, int64_t rows, int d, int half, int span,
                                    float eps, const InvFreqs freqs, const KvDest<C> kv) {
  pdl_begin();
  const int lane = threadIdx.x & 31;
  const int64_t g = blockIdx.x * int64_t(blockDim.x / 32) + (threadIdx.x >> 5);
  const int64_t per_row = q_heads + k_heads + (kv.k_cache ? k_heads : 0);
  if (g >= rows * per_row) return;
  const int64_t r = g / per_row, h = g % per_row;
  const bool is_q = h < q_heads;
  C* cached = nullptr;  // this head's row in the cache (a k or v head, with a cache)
  if (kv.k_cache && !is_q) {
    const int64_t row = split_kv::cache_row(kv.block_tables, kv.seqs[kv.row_seq[r]], kv.block_size, positions[r]);
    const int64_t kvh = h < q_heads + k_heads ? h - q_heads : h - q_heads - k_heads;
    cached = (h < q_heads + k_heads ? kv.k_cache : kv.v_cache) + (row * k_heads + kvh) * d;
    if (h >= q_heads + k_heads) {  // a v head: copied as it is
      const float* src = kv.v + (r * k_heads + kvh) * d;
#pragma unroll
      for (int j = 0; j < R; ++j) cached[lane + 32 * j] = to_cache<C>(src[lane + 32 * j]);
      return;
    }
  }
  float* v = is_q ? q + (r * q_heads + h) * d : k + (r * k_heads + (h - q_heads)) * d;
  const float* w = is_q ? q_norm : k_norm;
  float xv[R];
#pragma unroll
  for (int j = 0; j < R; ++j) xv[j] = v[lane + 32 * j];
  if (w) {
    float wv[R];
#pragma unroll
    for (int j = 0; j < R; ++j) wv[j] = w[lane + 32 * j];
    double ss = 0.0;
#pragma unroll
    for (int j = 0; j < R; ++j) ss += double(xv[j]) * double(xv[j]);
    ss = warp_sum(ss);
    const float sc = rms_scale(ss, d, eps);
#pragma unroll
    for (int j = 0; j < R; ++j) xv[j] = (xv[j] * sc) * wv[j];
  }
  // The rotation reads a pair's two values from the warp's copy of the head in shared memory;
  // a pair's owner (i < half) writes both, every other value is written as it is.
  __shared__ float heads[kQkWarps][kQkMaxDim];
  float* hs = heads[threadIdx.x >> 5];
#pragma unroll
  for (int j = 0; j < R; ++j) hs[lane + 32 * j] = xv[j];
  __syncwarp();
  const float pos = float(positions[r]);
#pragma unroll
  for (int j = 0; j < R; ++j) {
    const int i = lane + 32 * j;
    if (i < half) {
      const float angle = pos * freqs.v[i];
      const float c = float(cos(double(angle))), s = float(sin(double(angle)));
      float a, b;
      rotate_pair(hs[i], hs[i + span], c, s, a, b);
      v[i] = a;
      v[i + span] = b;
      if (cached) {
        cached[i] = to_cache<C>(a);
        cached[i + span] = to_cache<C>(b);
      }
    } else if (i < span || i >= span + half) {
      v[i] = xv[j];
      if (cached) cached[i] = to_cache<C>(xv[j]);
    }
  }
}

// The per-pair inverse frequencies of a RoPE config (rope_inv_freq, as the CPU forms them).
InvFreqs inv_freqs(const RopeConfig& cfg) {
  const int half = cfg.rotary_dim / 2, freq_dim = cfg.freq_dim > 0 ? cfg.freq_dim : cfg.rotary_dim;
  KCHECK_MSG(half <= kMaxPairs, "rope: rotary_dim ", cfg.rotary_dim, " above ", 2 * kMaxPairs);
  InvFreqs freqs{};
  for (int i = 0; i < half; ++i) freqs.v[i] = rope_inv_freq(cfg.theta, i, freq_dim);
  return freqs;
}

// Whether qk_norm_rope_kernel takes these shapes (head_dim a multiple of 32 up to kQkMaxDim, the
// rotation within the head, F32 q/k of the step's rows, norm weights of head_dim values).
bool qk_kernel_fits(const Tensor& q, const Tensor& q_norm, const Tensor& k, const Tensor& k_norm, int d,
                    const RopeConfig& cfg, const StepPlan& plan) {
  const int rot = cfg.rotary_dim, half = rot / 2, span = cfg.whole_head_pairs ? d / 2 : half;
  if (rot <= 0 || rot % 2 || rot > d || d % 32 || d > kQkMaxDim || half > span || span + half > d) return false;
  for (const Tensor* t : {&q, &k}) {
    if (t == &k && k.empty()) continue;
    if (t->dtype != DType::kF32 || t->cols % d || t->rows != plan.n_rows()) return false;
  }
  for (const Tensor* w : {&q_norm, &k_norm})
    if (!w->empty() && (w->dtype != DType::kF32 || w->numel() != d)) return false;
  return true;
}

template <typename C>
void launch_qk_norm_rope(const Context& ctx, const Tensor& q, const Tensor& q_norm, const Tensor& k,
                         const Tensor& k_norm, int d, float eps, const RopeConfig& cfg, const KvDest<C>& kv) {
  const int half = cfg.rotary_dim / 2, span = cfg.whole_head_pairs ? d / 2 : half;
  const bool has_k = !k.empty();
  const int64_t rows = q.rows, q_heads = q.cols / d, k_heads = has_k ? k.cols / d : 0;
  if (rows == 0) return;
  const InvFreqs freqs = inv_freqs(cfg);
  const int64_t per_row = q_heads + k_heads + (kv.k_cache ? k_heads : 0);
  const unsigned grid = unsigned(ceil_div(rows * per_row, kQkWarps));
  const float* wq = q_norm.empty() ? nullptr : q_norm.f32();
  const float* wk = has_k && !k_norm.empty() ? k_norm.f32() : nullptr;
  float* kp = has_k ? k.f32() : nullptr;
  static_assert(kQkMaxDim / 32 <= 8, "a lane's values of a head: with_1_to_8's counts");
  with_1_to_8(d / 32, [&]<int R>() {
    launch(qk_norm_rope_kernel<R, C>, grid, kQkWarps * 32, 0, ctx.stream, q.f32(), wq, q_heads, kp, wk, k_heads,
           ctx.step.positions, rows, d, half, span, eps, freqs, kv);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace

bool qk_norm_rope(const Context& ctx, const Tensor& q, const Tensor& q_norm, const Tensor& k, const Tensor& k_norm,
                  int head_dim, float eps, const RopeConfig& cfg, const StepPlan& plan) {
  if (!qk_kernel_fits(q, q_norm, k, k_norm, head_dim, cfg, plan)) return false;
  check_step(ctx, plan);
  launch_qk_norm_rope(ctx, q, q_norm, k, k_norm, head_dim, eps, cfg, KvDest<float>{});
  return true;
}

bool qk_norm_rope_kv_write(const Context& ctx, const Tensor& q, const Tensor& q_norm, const Tensor& k,
                           const Tensor& k_norm, const Tensor& v, int head_dim, float eps, const RopeConfig& cfg,
                           const KvLayerView& cache, const StepPlan& plan) {
  if (k.empty() || cache.ring_rows != 0 || !qk_kernel_fits(q, q_norm, k, k_norm, head_dim, cfg, plan)) return false;
  if (v.dtype != DType::kF32 || v.rows != k.rows || v.cols != k.cols || cache.k.cols != k.cols ||
      cache.v.cols != k.cols || cache.k.dtype != cache.v.dtype ||
      (cache.k.dtype != DType::kF32 && cache.k.dtype != DType::kBF16))
    return false;
  check_step(ctx, plan);
  auto run = [&]<typename C>() {
    const KvDest<C> kv{.k_cache = static_cast<C*>(cache.k.data), .v_cache = static_cast<C*>(cache.v.data),
                       .v = v.f32(), .row_seq = ctx.step.row_seq, .seqs = ctx.step.seqs,
                       .block_tables = ctx.step.block_tables, .block_size = ctx.step.block_size};
    launch_qk_norm_rope(ctx, q, q_norm, k, k_norm, head_dim, eps, cfg, kv);
  };
  if (cache.k.dtype == DType::kBF16) run.template operator()<__nv_bfloat16>();
  else run.template operator()<float>();
  return true;
}

void rope(const Context& ctx, const Tensor& x, int head_dim, const RopeConfig& cfg, const StepPlan& plan) {
  const int rot = cfg.rotary_dim;
  if (rot == 0) return;
  check_f32(x, "rope x");
  check_step(ctx, plan);
  KCHECK_MSG(rot % 2 == 0 && rot <= head_dim && x.cols % head_dim == 0, "rope: rotary_dim ", rot, " head_dim ",
             head_dim, " cols ", x.cols);
  KCHECK(x.rows == plan.n_rows());
  if (x.rows == 0) return;
  const int half = rot / 2;
  const int span = cfg.whole_head_pairs ? head_dim / 2 : half;  // distance between a pair's dims
  KCHECK_MSG(!cfg.whole_head_pairs || (head_dim % 2 == 0 && half <= span), "rope: whole-head pairs with rotary_dim ",
             rot, " head_dim ", head_dim);
  const int n_heads = int(x.cols / head_dim);
  const InvFreqs freqs = inv_freqs(cfg);
  const int threads = std::min(256, std::max(32, (n_heads * half + 31) / 32 * 32));
  launch(rope_kernel, unsigned(x.rows), threads, 0, ctx.stream, x.f32(), ctx.step.positions, n_heads, head_dim, half,
         span, freqs);
  CUDA_CHECK_LAUNCH();
}

}  // namespace kestrel::cuda
