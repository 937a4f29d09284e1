// attention: paged-KV causal softmax attention with GQA and an optional sliding window.
// 1. kv_write_kernel writes the step's k/v rows into each sequence's cache blocks.
// 2. attention_kernel: one block per (row, head), 4 warps splitting the row's key positions
//    [max(0, pos - window + 1), pos], each warp keeping an online softmax, merged at the end.
//    A simple correct kernel for prefill and decode alike (split-KV decode and a tiled prefill
//    kernel are the next steps, see docs/cuda.md).
#include "backend/cuda/device_util.cuh"

namespace kestrel::cuda {
namespace {

constexpr int kWarps = 4;

__device__ __forceinline__ int64_t cache_row(const int32_t* block_tables, const SeqStep& s, int block_size,
                                             int64_t pos) {
  const int32_t block = block_tables[s.table_begin + pos / block_size];
  return int64_t(block) * block_size + pos % block_size;
}

// grid: T blocks; copies k[r], v[r] (kv_width floats) into the cache row of position positions[r].
__global__ void kv_write_kernel(float* __restrict__ kc, float* __restrict__ vc,  // [n_blocks * bs, kv_width]
                                const float* __restrict__ k, const float* __restrict__ v,  // [T, kv_width]
                                const int32_t* __restrict__ positions, const int32_t* __restrict__ row_seq,
                                const SeqStep* __restrict__ seqs, const int32_t* __restrict__ block_tables,
                                int block_size, int64_t kv_width) {
  const int64_t r = blockIdx.x;
  const SeqStep s = seqs[row_seq[r]];
  const int64_t row = cache_row(block_tables, s, block_size, positions[r]);
  for (int64_t i = threadIdx.x; i < kv_width; i += blockDim.x) {
    kc[row * kv_width + i] = k[r * kv_width + i];
    vc[row * kv_width + i] = v[r * kv_width + i];
  }
}

// grid: (T, n_heads); block: kWarps warps. DPL = head dims per lane (head_dim <= 32 * DPL).
template <int DPL>
__global__ void attention_kernel(float* __restrict__ out,  // [T, n_heads * hd]
                                 const float* __restrict__ q,   // [T, n_heads * hd]
                                 const float* __restrict__ kc, const float* __restrict__ vc,  // cache rows
                                 const int32_t* __restrict__ positions, const int32_t* __restrict__ row_seq,
                                 const SeqStep* __restrict__ seqs, const int32_t* __restrict__ block_tables,
                                 int block_size, int n_heads, int group, int hd, float scale, int window) {
  extern __shared__ float smem[];
  float* qs = smem;                        // [hd]
  float* accs = qs + hd;                   // [kWarps, hd]
  float* ms = accs + kWarps * hd;          // [kWarps]
  float* ls = ms + kWarps;                 // [kWarps]
  const int64_t r = blockIdx.x;
  const int h = blockIdx.y, kvh = h / group;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t kv_width = int64_t(n_heads / group) * hd;
  const SeqStep s = seqs[row_seq[r]];
  const int64_t pos = positions[r];
  const int64_t first = (window > 0 && pos - window + 1 > 0) ? pos - window + 1 : 0;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) qs[d] = q[r * int64_t(n_heads) * hd + int64_t(h) * hd + d];
  __syncthreads();
  float qv[DPL], acc[DPL];
#pragma unroll
  for (int i = 0; i < DPL; ++i) {
    const int d = i * 32 + lane;
    qv[i] = d < hd ? qs[d] : 0.0f;
    acc[i] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int64_t j = first + warp; j <= pos; j += kWarps) {
    const int64_t row = cache_row(block_tables, s, block_size, j);
    const float* kr = kc + row * kv_width + int64_t(kvh) * hd;
    const float* vr = vc + row * kv_width + int64_t(kvh) * hd;
    float dot = 0.0f;
#pragma unroll
    for (int i = 0; i < DPL; ++i) {
      const int d = i * 32 + lane;
      if (d < hd) dot += qv[i] * kr[d];
    }
    const float score = warp_sum(dot) * scale;
    const float m_new = fmaxf(m, score);
    const float corr = expf(m - m_new);  // 0 on the first key (m = -inf)
    const float p = expf(score - m_new);
    l = l * corr + p;
#pragma unroll
    for (int i = 0; i < DPL; ++i) {
      const int d = i * 32 + lane;
      acc[i] = acc[i] * corr + (d < hd ? p * vr[d] : 0.0f);
    }
    m = m_new;
  }
#pragma unroll
  for (int i = 0; i < DPL; ++i) {
    const int d = i * 32 + lane;
    if (d < hd) accs[warp * hd + d] = acc[i];
  }
  if (lane == 0) {
    ms[warp] = m;
    ls[warp] = l;
  }
  __syncthreads();
  float M = -INFINITY;
  for (int w = 0; w < kWarps; ++w) M = fmaxf(M, ms[w]);
  float L = 0.0f;
  float f[kWarps];
  for (int w = 0; w < kWarps; ++w) {
    f[w] = ms[w] == -INFINITY ? 0.0f : expf(ms[w] - M);
    L += ls[w] * f[w];
  }
  const float inv = 1.0f / L;
  float* o = out + r * int64_t(n_heads) * hd + int64_t(h) * hd;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float v = 0.0f;
    for (int w = 0; w < kWarps; ++w) v += accs[w * hd + d] * f[w];
    o[d] = v * inv;
  }
}

template <int DPL>
void launch_attention(const Context& ctx, const Tensor& out, const Tensor& q, const KvLayerView& cache,
                      const AttentionParams& p) {
  const size_t smem = size_t(p.head_dim + kWarps * p.head_dim + 2 * kWarps) * sizeof(float);
  dim3 grid(unsigned(q.rows), unsigned(p.n_heads));
  attention_kernel<DPL><<<grid, kWarps * 32, smem, ctx.stream>>>(
      out.f32(), q.f32(), cache.k.f32(), cache.v.f32(), ctx.step.positions, ctx.step.row_seq, ctx.step.seqs,
      ctx.step.block_tables, ctx.step.block_size, p.n_heads, p.n_heads / p.n_kv_heads, p.head_dim, p.scale, p.window);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void attention(const Context& ctx, const Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v,
               const KvLayerView& cache, const AttentionParams& p, const StepPlan& plan) {
  check_step(ctx, plan);
  for (const Tensor* t : {&out, &q, &k, &v, &cache.k, &cache.v}) check_f32(*t, "attention tensor");
  const int hd = p.head_dim;
  const int64_t kv_width = int64_t(p.n_kv_heads) * hd;
  KCHECK_MSG(p.n_heads > 0 && p.n_kv_heads > 0 && p.n_heads % p.n_kv_heads == 0, "attention: ", p.n_heads,
             " heads over ", p.n_kv_heads, " kv heads");
  KCHECK_MSG(q.cols == int64_t(p.n_heads) * hd && k.cols == kv_width && v.cols == kv_width, "attention: q cols ",
             q.cols, " k cols ", k.cols, " v cols ", v.cols, " for ", p.n_heads, "/", p.n_kv_heads, " heads of ", hd);
  KCHECK(cache.k.cols == kv_width && cache.v.cols == kv_width && out.cols == q.cols && out.rows == q.rows);
  KCHECK(q.rows == plan.n_rows() && k.rows == q.rows && v.rows == q.rows);
  KCHECK_MSG(hd > 0 && hd <= 512, "attention: head_dim ", hd, " (the CUDA kernel takes up to 512)");
  for (int64_t r = 0; r < q.rows; ++r) {
    const SeqStep& s = plan.seqs[size_t(plan.row_seq[size_t(r)])];
    KCHECK(plan.positions[size_t(r)] < int64_t(s.n_blocks) * plan.block_size);
  }
  if (q.rows == 0) return;
  kv_write_kernel<<<unsigned(k.rows), 128, 0, ctx.stream>>>(cache.k.f32(), cache.v.f32(), k.f32(), v.f32(),
                                                            ctx.step.positions, ctx.step.row_seq, ctx.step.seqs,
                                                            ctx.step.block_tables, ctx.step.block_size, kv_width);
  CUDA_CHECK_LAUNCH();
  if (hd <= 32) launch_attention<1>(ctx, out, q, cache, p);
  else if (hd <= 64) launch_attention<2>(ctx, out, q, cache, p);
  else if (hd <= 128) launch_attention<4>(ctx, out, q, cache, p);
  else if (hd <= 256) launch_attention<8>(ctx, out, q, cache, p);
  else launch_attention<16>(ctx, out, q, cache, p);
}

}  // namespace kestrel::cuda
