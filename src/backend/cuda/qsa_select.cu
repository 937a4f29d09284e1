// qsa_select: the QSA (Qwen4-Exp sparse attention) indexer. Three kernels:
// 1. qsa_key_write_kernel stores the step's raw indexer keys in the paged index-key cache.
// 2. qsa_score_kernel, one warp per (row, complete block b of the row's sequence): the block's
//    `ratio` raw keys mean-pooled (double sums), RMS-normed with k_norm, rotated at the block's
//    first position, then score = sum over the row's indexer heads of relu(q_h . k_b) / sqrt(d),
//    dot products in double: the CPU oracle's arithmetic, step by step.
//    The grid covers a bucket of key blocks (kMinKeyBlocks, then powers of two) at least the
//    step's largest count; warps past their row's count exit. A graph recorded with it holds for
//    positions up to the bucket's (GraphGuard::limit_positions).
// 3. qsa_pick_kernel, one block per row: the budget / ratio best blocks (ties to the lower block).
//    The threshold (the keep-th largest score) is found bit by bit over the scores' order-preserving
//    64-bit keys (64 counting passes, no sort), then the chosen blocks are written in ascending
//    block order with a block-wide scan, then the incomplete tail [blocks * ratio, p], then -1.
//    ops.h leaves the order of a row's positions free; the CPU lists the blocks best first.
// Every row's selection depends on its own query and its sequence's keys only.
#include "backend/cuda/device_util.cuh"

namespace kestrel::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kMaxHeadDim = 256;
constexpr int kPickThreads = 256;
constexpr int64_t kMinKeyBlocks = 16;  // the smallest bucket of key blocks a launch covers

__device__ __forceinline__ int64_t paged_row(const int32_t* block_tables, const SeqStep& s, int block_size,
                                             int64_t pos) {
  const int32_t block = block_tables[s.table_begin + pos / block_size];
  return int64_t(block) * block_size + pos % block_size;
}

// grid: T blocks; index_k row of positions[r] = k[r].
__global__ void qsa_key_write_kernel(float* __restrict__ index_k,   // [n_blocks * block_size, d]
                                     const float* __restrict__ k,   // [T, d]
                                     const int32_t* __restrict__ positions, const int32_t* __restrict__ row_seq,
                                     const SeqStep* __restrict__ seqs, const int32_t* __restrict__ block_tables,
                                     int block_size, int d) {
  pdl_begin();
  const int64_t r = blockIdx.x;
  const int64_t row = paged_row(block_tables, seqs[row_seq[r]], block_size, positions[r]);
  for (int i = threadIdx.x; i < d; i += blockDim.x) index_k[row * d + i] = k[r * d + i];
}

struct RopeArgs {
  int half;  // rotating pairs (rotary_dim / 2; 0 = no rotation)
  int span;  // distance between a pair's dims
  float inv_freq[kMaxHeadDim / 2];  // rope_inv_freq of each pair, formed on the host like the CPU's
};

// grid: (T, ceil(max_blocks / kWarps)); warp w of block (r, y) scores block b = y * kWarps + w of
// row r when b < (pos + 1) / ratio. scores: [T, max_blocks].
__global__ void qsa_score_kernel(double* __restrict__ scores, const float* __restrict__ q,  // [T, n_heads * d]
                                 const float* __restrict__ index_k,  // [n_blocks * block_size, d]
                                 const float* __restrict__ k_norm,   // [d]
                                 const int32_t* __restrict__ positions, const int32_t* __restrict__ row_seq,
                                 const SeqStep* __restrict__ seqs, const int32_t* __restrict__ block_tables,
                                 int block_size, int n_heads, int d, int ratio, float eps, RopeArgs rope,
                                 int64_t max_blocks) {
  pdl_begin();
  __shared__ float pooled_all[kWarps][kMaxHeadDim];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t r = blockIdx.x;
  const int64_t b = int64_t(blockIdx.y) * kWarps + warp;
  const int64_t pos = positions[r];
  if (b >= (pos + 1) / ratio) return;
  const SeqStep s = seqs[row_seq[r]];
  float* v = pooled_all[warp];
  // mean of the block's raw keys, then RMSNorm with the k_norm weight
  double ss = 0.0;
  for (int i = lane; i < d; i += 32) {
    double acc = 0.0;
    for (int j = 0; j < ratio; ++j) acc += double(index_k[paged_row(block_tables, s, block_size, b * ratio + j) * d + i]);
    const float pv = float(acc / double(ratio));
    v[i] = pv;
    ss += double(pv) * double(pv);
  }
  ss = warp_sum(ss);
  const float inv = rms_scale(ss, d, eps);
  for (int i = lane; i < d; i += 32) v[i] = __fmul_rn(__fmul_rn(v[i], inv), k_norm[i]);
  __syncwarp();
  // RoPE at the block's first position (each pair belongs to one lane)
  const float fpos = float(b * ratio);
  for (int i = lane; i < rope.half; i += 32) {
    const float angle = fpos * rope.inv_freq[i];
    const float cs = float(cos(double(angle))), sn = float(sin(double(angle)));
    const float a = v[i], c = v[i + rope.span];
    v[i] = __fsub_rn(__fmul_rn(a, cs), __fmul_rn(c, sn));
    v[i + rope.span] = __fadd_rn(__fmul_rn(c, cs), __fmul_rn(a, sn));
  }
  __syncwarp();
  double score = 0.0;
  for (int h = 0; h < n_heads; ++h) {
    const float* qh = q + (r * n_heads + h) * int64_t(d);
    double dot = 0.0;
    for (int i = lane; i < d; i += 32) dot += double(qh[i]) * double(v[i]);
    dot = warp_sum(dot);
    score += dot > 0.0 ? dot : 0.0;
  }
  if (lane == 0) scores[r * max_blocks + b] = score * (1.0 / sqrt(double(d)));
}

// A double's bits as an unsigned key with the same order.
__device__ __forceinline__ uint64_t order_key(double x) {
  const uint64_t u = uint64_t(__double_as_longlong(x));
  return (u >> 63) ? ~u : (u | 0x8000000000000000ull);
}

// Exclusive prefix sum of v over the block (blockDim.x a multiple of 32); *total = the sum.
__device__ int block_exclusive_scan(int v, int* total) {
  __shared__ int warp_sums[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  int inc = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int t = __shfl_up_sync(kFullMask, inc, o);
    if (lane >= o) inc += t;
  }
  __syncthreads();  // warp_sums may still be read by a previous call
  if (lane == 31) warp_sums[warp] = inc;
  __syncthreads();
  int before = 0, sum = 0;
  for (int w = 0; w < n_warps; ++w) {
    if (w < warp) before += warp_sums[w];
    sum += warp_sums[w];
  }
  *total = sum;
  return before + inc - v;
}

// grid: T blocks of kPickThreads. select row: chosen blocks' positions (ascending), the tail, -1.
__global__ void qsa_pick_kernel(int32_t* __restrict__ select,       // [T, cols]
                                const double* __restrict__ scores,  // [T, max_blocks]
                                const int32_t* __restrict__ positions, int64_t max_blocks, int keep, int ratio,
                                int cols) {
  pdl_begin();
  const int64_t r = blockIdx.x;
  const int64_t pos = positions[r];
  const int n = int((pos + 1) / ratio);  // complete blocks
  const double* sc = scores + r * max_blocks;
  int32_t* out = select + r * cols;
  const bool all = n <= keep;
  uint64_t tau = 0;
  int need_eq = 0;
  if (!all) {
    // tau = the keep-th largest key: the largest t with count(key >= t) >= keep, bit by bit
    for (int bit = 63; bit >= 0; --bit) {
      const uint64_t cand = tau | (uint64_t(1) << bit);
      int cnt = 0;
      for (int b = threadIdx.x; b < n; b += blockDim.x) cnt += order_key(sc[b]) >= cand;
      if (block_sum(cnt) >= keep) tau = cand;
    }
    int gt = 0;
    for (int b = threadIdx.x; b < n; b += blockDim.x) gt += order_key(sc[b]) > tau;
    need_eq = keep - block_sum(gt);  // blocks scoring exactly tau to take, the lowest first
  }
  int base = 0, eq_before = 0;
  for (int chunk = 0; chunk < n; chunk += blockDim.x) {
    const int b = chunk + threadIdx.x;
    const uint64_t key = b < n ? order_key(sc[b]) : 0;
    const bool is_gt = b < n && (all || key > tau);
    const bool is_eq = b < n && !all && key == tau;
    int n_eq = 0, n_sel = 0;
    const int eq_rank = eq_before + block_exclusive_scan(is_eq ? 1 : 0, &n_eq);
    const bool chosen = is_gt || (is_eq && eq_rank < need_eq);
    const int idx = base + block_exclusive_scan(chosen ? 1 : 0, &n_sel);
    if (chosen) {
      for (int j = 0; j < ratio; ++j) out[idx * ratio + j] = b * ratio + j;
    }
    base += n_sel;
    eq_before += n_eq;
  }
  // the incomplete tail, then padding
  const int64_t tail_begin = int64_t(n) * ratio;
  const int written = base * ratio;
  for (int64_t t = tail_begin + threadIdx.x; t <= pos; t += blockDim.x) out[written + (t - tail_begin)] = int32_t(t);
  const int used = written + int(pos + 1 - tail_begin);
  for (int c = used + threadIdx.x; c < cols; c += blockDim.x) out[c] = -1;
}

}  // namespace

void qsa_select(const Context& ctx, const Tensor& select, const Tensor& q, const Tensor& k, const Tensor& k_norm,
                const KvLayerView& cache, const QsaParams& p, const StepPlan& plan) {
  check_step(ctx, plan);
  check_f32(q, "qsa_select q");
  check_f32(k, "qsa_select k");
  check_f32(k_norm, "qsa_select k_norm");
  check_f32(cache.index_k, "qsa_select index keys");
  const int d = p.head_dim, ratio = p.ratio;
  KCHECK_MSG(ratio > 0 && p.budget > 0 && p.budget % ratio == 0 && p.n_heads > 0, "qsa_select: budget ", p.budget,
             " ratio ", ratio, " heads ", p.n_heads);
  KCHECK_MSG(select.dtype == DType::kI32 && select.device == Device::kCuda && select.rows == q.rows &&
                 select.cols == p.budget + ratio - 1,
             "qsa_select: select must be I32 [", q.rows, ", ", p.budget + ratio - 1, "] on the device");
  KCHECK_MSG(q.cols == int64_t(p.n_heads) * d && k.cols == d && cache.index_k.cols == d && k_norm.numel() == d,
             "qsa_select: q cols ", q.cols, " k cols ", k.cols, " index cols ", cache.index_k.cols, " for ", p.n_heads,
             " heads of ", d);
  KCHECK_MSG(d > 0 && d <= kMaxHeadDim, "qsa_select: indexer head_dim ", d, " (the CUDA kernel takes up to ",
             kMaxHeadDim, ")");
  const int rot = p.rope.rotary_dim, half = rot / 2;
  const int span = p.rope.whole_head_pairs ? d / 2 : half;
  KCHECK_MSG(rot % 2 == 0 && rot <= d && half <= span, "qsa_select: rotary_dim ", rot, " for head_dim ", d);
  KCHECK(q.rows == plan.n_rows() && k.rows == q.rows && cache.ring_rows == 0);
  int64_t max_blocks = 0;
  for (int64_t r = 0; r < q.rows; ++r) {
    const SeqStep& s = plan.seqs[size_t(plan.row_seq[size_t(r)])];
    const int64_t pos = plan.positions[size_t(r)];
    KCHECK(pos < int64_t(s.n_blocks) * plan.block_size);
    max_blocks = std::max<int64_t>(max_blocks, (pos + 1) / ratio);
  }
  if (q.rows == 0) return;
  // The launches cover key blocks up to a bucket of the step's count (at least kMinKeyBlocks, then
  // powers of two): the kernels read each row's own count from its position, so the bits do not
  // depend on the bucket, and a recorded step replays every later step up to the bucket's end.
  int64_t cap = kMinKeyBlocks, most = kMinKeyBlocks;
  while (cap < max_blocks) cap *= 2;
  while (ceil_div(most * 2, kWarps) <= 65535) most *= 2;
  KCHECK_MSG(cap <= most, "qsa_select: ", max_blocks, " blocks of keys (the CUDA kernel takes up to ", most, ")");
  // (pos + 1) / ratio <= cap for every pos <= (cap + 1) * ratio - 2
  ctx.guard->limit_positions(int32_t(std::min<int64_t>((cap + 1) * ratio - 2, INT32_MAX)));
  max_blocks = cap;
  launch(qsa_key_write_kernel, unsigned(k.rows), 128, 0, ctx.stream, cache.index_k.f32(), k.f32(), ctx.step.positions,
         ctx.step.row_seq, ctx.step.seqs, ctx.step.block_tables, ctx.step.block_size, d);
  CUDA_CHECK_LAUNCH();
  auto* scores = static_cast<double*>(ctx.scratch->get(kSlotQsaScores, size_t(q.rows * max_blocks) * 8));
  {
    RopeArgs rope{.half = half, .span = span, .inv_freq = {}};
    const int freq_dim = p.rope.freq_dim > 0 ? p.rope.freq_dim : std::max(rot, 1);
    for (int i = 0; i < half; ++i) rope.inv_freq[i] = rope_inv_freq(p.rope.theta, i, freq_dim);
    launch(qsa_score_kernel, dim3(unsigned(q.rows), unsigned(ceil_div(max_blocks, kWarps))), kWarps * 32, 0, ctx.stream,
           scores, q.f32(), cache.index_k.f32(), k_norm.f32(), ctx.step.positions, ctx.step.row_seq, ctx.step.seqs,
           ctx.step.block_tables, ctx.step.block_size, p.n_heads, d, ratio, p.eps, rope, max_blocks);
    CUDA_CHECK_LAUNCH();
  }
  launch(qsa_pick_kernel, unsigned(q.rows), kPickThreads, 0, ctx.stream, select.as<int32_t>(), scores,
         ctx.step.positions, max_blocks, p.budget / ratio, ratio, int(select.cols));
  CUDA_CHECK_LAUNCH();
}

}  // namespace kestrel::cuda
