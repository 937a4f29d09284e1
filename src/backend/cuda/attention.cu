// attention: paged-KV causal softmax attention with GQA and an optional sliding window.
// The cache holds F32 or BF16 elements (C; Ops::set_kv_cache_bf16). With BF16 every key and value
// a row attends is taken at BF16, the step's own as well (as_cached), as the CPU oracle does.
// 1. kv_write_kernel (shared with the general path below) writes the step's k/v rows into each
//    sequence's cache blocks (under Ops::norm_rope_attention, rope.cu's qk_norm_rope_kernel
//    writes them as it norms and rotates k, and the combine kernel below applies the gate).
// 2. attention_kernel: one block per (row, KV head, split), serving up to 4 query heads of that
//    KV head's GQA group (each K/V row it loads feeds them all). The row's key positions
//    [max(0, pos - window + 1), pos] are cut into n_splits contiguous ranges (split-KV: decode
//    rows get enough blocks to fill the GPU); in a block 4 warps interleave over the range a few
//    keys at a time, each keeping an online softmax per head, merged in shared memory. With one split the block writes the
//    output; with several it writes (max, sum, unnormalized acc) and attention_combine_kernel
//    merges the splits. With a head_dim of 256 or 512, attention_tile_kernel (attention_tile.cu)
//    does this kernel's work on the same grid (16-key tiles staged in shared memory, docs/cuda.md);
//    the split partition both follow is attention_split.cuh's. Over a BF16 cache at head_dim 256,
//    attention_mma_kernel (attention_mma.cu) does it on the tensor cores, a block serving up to 8
//    query heads, one block a multiprocessor (attention_mma_applies). A step with a
//    sequence of 64 or more new rows takes the tiled
//    tensor-core kernel of attention_prefill.cu instead (hi/lo BF16 products at the default
//    precision, F32 softmax; not with kExact or --deterministic: attention_prefill_applies);
//    otherwise this kernel runs all rows.
// The general path (attention_ext_kernel) covers what that write-first order cannot: a sliding
// window's ring cache (the step's own positions may be more than the ring holds), attention over
// KV another layer wrote (write_kv = false, or no k/v at all) and a per-row selection of positions
// (QSA). It reads each position from the step's k/v when the step holds it (position >= n_past)
// and from the cache otherwise, as the CPU oracle does, and writes the step's k/v afterwards
// (kv_write_kernel: paged, or only the last ring_rows positions of each sequence for a ring).
// Its softmax, split-KV partition and combine are the first kernel's (one block per query head,
// one key at a time a warp).
// The split count is chosen per step from the step's rows and longest row (step_splits), so a
// row's bits depend on its batch. The host sizes the grid from the row count alone (split_cap);
// the kernels compute the count on the device from the plan's max_position, and a row's surplus
// split blocks exit — so every launch size is fixed by the step's shape and a recorded CUDA graph
// replays any step of that shape. Deterministic mode instead gives each row det_splits(its own
// key count) splits, so a row computes the same alone or batched; the grid is sized on the host
// for the step's largest count (graphs are not used in that mode).
#include <algorithm>

#include <type_traits>

#include "backend/cuda/attention_mma.h"
#include "backend/cuda/attention_prefill.h"
#include "backend/cuda/attention_split.cuh"
#include "backend/cuda/attention_tile.h"
#include "backend/cuda/device_util.cuh"

namespace kestrel::cuda {
namespace {

using namespace split_kv;

constexpr int kWarps = 4;
constexpr size_t kDetPartialBytes = size_t(64) << 20;  // deterministic mode: split results per launch

// A lane's DPL values of one K or V row. F32: dims i * 32 + lane. BF16: with DPL even, pairs of
// dims (i / 2) * 64 + 2 * lane + i % 2 loaded 4 bytes at a time and kept packed (half the
// registers: a warp keeps twice the keys in flight), which needs an even head_dim; DPL = 1: dim lane.
template <typename C, int DPL>
struct KvFrag;
template <int DPL>
struct KvFrag<float, DPL> {
  float x[DPL];
  static __device__ __forceinline__ int dim(int i, int lane) { return i * 32 + lane; }
  __device__ __forceinline__ void load(const float* __restrict__ row, int lane, int hd, bool ok) {
#pragma unroll
    for (int i = 0; i < DPL; ++i) x[i] = ok && dim(i, lane) < hd ? row[dim(i, lane)] : 0.0f;
  }
  __device__ __forceinline__ float get(int i) const { return x[i]; }
};
template <int DPL>
struct KvFrag<__nv_bfloat16, DPL> {
  static constexpr bool kPairs = DPL % 2 == 0;
  uint32_t x[kPairs ? DPL / 2 : DPL];  // BF16 bits: two a word (pairs), or one in the low half
  static __device__ __forceinline__ int dim(int i, int lane) {
    return kPairs ? (i / 2) * 64 + 2 * lane + (i & 1) : i * 32 + lane;
  }
  __device__ __forceinline__ void load(const __nv_bfloat16* __restrict__ row, int lane, int hd, bool ok) {
    if constexpr (kPairs) {
#pragma unroll
      for (int p = 0; p < DPL / 2; ++p) {
        const int d = p * 64 + 2 * lane;
        x[p] = ok && d < hd ? *reinterpret_cast<const uint32_t*>(row + d) : 0u;
      }
    } else {
#pragma unroll
      for (int i = 0; i < DPL; ++i)
        x[i] = ok && dim(i, lane) < hd ? uint32_t(__bfloat16_as_ushort(row[dim(i, lane)])) : 0u;
    }
  }
  __device__ __forceinline__ float get(int i) const {
    if constexpr (kPairs) return __uint_as_float((i & 1) ? x[i / 2] & 0xffff0000u : x[i / 2] << 16);
    else return __uint_as_float(x[i] << 16);
  }
};

// The warp-wide sums of N values at once (N a power of two, at most 32), N - 1 + log2(32 / N)
// shuffles instead of 5 N: at the step of offset o (16, 8, ..., 32 / N) a lane keeps the half of
// its values its lane bit o selects and adds the other lane's copy of that half; then the lanes
// that hold the same value add theirs. Returns the sum of value lane / (32 / N), which the lanes
// [i (32 / N), (i + 1) (32 / N)) hold for value i.
// One step of butterfly_sums: kHalf values kept, exchanged at lane offset 32 kHalf / N.
template <int N, int kHalf>
__device__ __forceinline__ void butterfly_step(float (&x)[N], int lane) {
  if constexpr (kHalf >= 1) {
    constexpr int o = 32 * kHalf / N;
    const bool upper = (lane & o) != 0;
#pragma unroll
    for (int i = 0; i < kHalf; ++i) {
      const float lo = x[i], hi = x[i + kHalf];
      x[i] = (upper ? hi : lo) + __shfl_xor_sync(kFullMask, upper ? lo : hi, o);
    }
    butterfly_step<N, kHalf / 2>(x, lane);
  }
}
template <int N>
__device__ __forceinline__ float butterfly_sums(float (&x)[N], int lane) {
  static_assert(N >= 1 && N <= 32 && (N & (N - 1)) == 0);
  butterfly_step<N, N / 2>(x, lane);
  float v = x[0];
#pragma unroll
  for (int o = 16 / N; o >= 1; o /= 2) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

// grid: (rows, n_kv_heads * head groups, max_splits) for rows [row0, row0 + rows); block: kWarps
// warps. A block serves up to kHeads query heads of one KV head (a GQA group, in pieces of kHeads),
// so each K/V row it loads feeds all of them. DPL = head dims per lane (head_dim <= 32 * DPL). A
// row has step_splits(*max_position) splits, or det_splits(its keys) when per_row_splits
// (deterministic mode); surplus split blocks exit. part (more than one split): [rows, n_heads,
// max_splits, hd + 2] = (max, sum, acc[hd]) per head and split.
template <int DPL, typename C, bool kFull>
__global__ void attention_kernel(float* __restrict__ out,  // [T, n_heads * hd]
                                 const float* __restrict__ q,   // [T, n_heads * hd]
                                 const C* __restrict__ kc, const C* __restrict__ vc,  // cache rows
                                 const int32_t* __restrict__ positions, const int32_t* __restrict__ row_seq,
                                 const SeqStep* __restrict__ seqs, const int32_t* __restrict__ block_tables,
                                 int block_size, int n_heads, int group, int hd, float scale, int window,
                                 int64_t row0, bool per_row_splits, const int32_t* __restrict__ max_position,
                                 float* __restrict__ part) {
  pdl_begin();
  extern __shared__ float smem[];
  float* accs = smem;                             // [kWarps, kHeads, hd]
  float* ms = accs + kWarps * kHeads * hd;        // [kWarps, kHeads]
  float* ls = ms + kWarps * kHeads;               // [kWarps, kHeads]
  SplitBlock b;
  if (!split_block(b, positions, row_seq, seqs, group, window, row0, per_row_splits, max_position)) return;
  const int64_t r = b.r, j0 = b.j0, j1 = b.j1;  // this block: keys [j0, j1] of row r
  const int kvh = b.kvh, h0 = b.h0, nh = b.nh, n_splits = b.n_splits, split = b.split;  // heads h0 .. h0 + nh - 1
  const SeqStep& s = b.s;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t kv_width = int64_t(n_heads / group) * hd;
  using Frag = KvFrag<C, DPL>;
  float qv[kHeads][DPL], acc[kHeads][DPL], m[kHeads], l[kHeads];
#pragma unroll
  for (int g = 0; g < kHeads; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int i = 0; i < DPL; ++i) {
      const int d = Frag::dim(i, lane);
      qv[g][i] = g < nh && d < hd ? q[r * int64_t(n_heads) * hd + int64_t(h0 + g) * hd + d] : 0.0f;
      acc[g][i] = 0.0f;
    }
  }
  // A warp takes kU consecutive keys at a time: their K and V rows are loaded together, then
  // scored for each head, and each head's running max and rescale move once per group. The next
  // group's rows are loaded while this one is computed (two register stages).
  constexpr int kU = DPL <= 4 ? 4 : DPL == 8 ? (sizeof(C) == 2 ? 4 : 2) : 1;  // within 255 registers, no spills
  const int64_t stride = int64_t(kWarps) * kU;
  auto load_group = [&](int64_t jb, Frag (&kf)[kU], Frag (&vf)[kU]) {
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const bool ok = jb + u <= j1;
      const int64_t row = ok ? cache_row(block_tables, s, block_size, jb + u) : 0;
      kf[u].load(kc + row * kv_width + int64_t(kvh) * hd, lane, hd, ok);
      vf[u].load(vc + row * kv_width + int64_t(kvh) * hd, lane, hd, ok);
    }
  };
  // kFull (every block serves kHeads heads: the GQA group a multiple of kHeads): the heads' dot
  // products and shuffles carry no early exit between them, so they interleave
  auto attend_group = [&](int64_t jb, const Frag (&kf)[kU], const Frag (&vf)[kU]) {
    // every (head, key) dot of the group reduced across the warp at once (butterfly_sums), then
    // each score broadcast from the lanes that hold it
    constexpr int N = kHeads * kU;
    float x[N];
#pragma unroll
    for (int g = 0; g < kHeads; ++g) {
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        float dot = 0.0f;
#pragma unroll
        for (int i = 0; i < DPL; ++i) dot += qv[g][i] * kf[u].get(i);
        x[g * kU + u] = dot;  // heads past nh have q = 0: their dots are 0 and unused
      }
    }
    const float mine = butterfly_sums<N>(x, lane);
#pragma unroll
    for (int g = 0; g < kHeads; ++g) {
      if (!kFull && g >= nh) break;
      float score[kU];
      float m_new = m[g];
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        score[u] = __shfl_sync(kFullMask, mine, (g * kU + u) * (32 / N)) * scale;
        if (jb + u <= j1) m_new = fmaxf(m_new, score[u]);
      }
      const float corr = expf(m[g] - m_new);  // 0 on the first group (m = -inf), 1 while the max holds
      l[g] *= corr;
#pragma unroll
      for (int i = 0; i < DPL; ++i) acc[g][i] *= corr;
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        if (jb + u > j1) break;
        const float p = expf(score[u] - m_new);
        l[g] += p;
#pragma unroll
        for (int i = 0; i < DPL; ++i) acc[g][i] += p * vf[u].get(i);
      }
      m[g] = m_new;
    }
  };

  Frag ka[kU], va[kU], kb[kU], vb[kU];
  int64_t jb = j0 + int64_t(warp) * kU;
  if (jb <= j1) load_group(jb, ka, va);
  for (; jb <= j1; jb += 2 * stride) {
    if (jb + stride <= j1) load_group(jb + stride, kb, vb);
    attend_group(jb, ka, va);
    if (jb + stride > j1) break;
    if (jb + 2 * stride <= j1) load_group(jb + 2 * stride, ka, va);
    attend_group(jb + stride, kb, vb);
  }
#pragma unroll
  for (int g = 0; g < kHeads; ++g) {
#pragma unroll
    for (int i = 0; i < DPL; ++i) {
      const int d = Frag::dim(i, lane);
      if (d < hd) accs[(warp * kHeads + g) * hd + d] = acc[g][i];
    }
    if (lane == 0) {
      ms[warp * kHeads + g] = m[g];
      ls[warp * kHeads + g] = l[g];
    }
  }
  __syncthreads();
  for (int g = 0; g < nh; ++g) {
    const int h = h0 + g;
    float M = -INFINITY;
    for (int w = 0; w < kWarps; ++w) M = fmaxf(M, ms[w * kHeads + g]);
    float L = 0.0f;
    float f[kWarps];
    for (int w = 0; w < kWarps; ++w) {
      f[w] = ms[w * kHeads + g] == -INFINITY ? 0.0f : expf(ms[w * kHeads + g] - M);
      L += ls[w * kHeads + g] * f[w];
    }
    if (n_splits == 1) {
      const float inv = 1.0f / L;
      float* o = out + r * int64_t(n_heads) * hd + int64_t(h) * hd;
      for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float v = 0.0f;
        for (int w = 0; w < kWarps; ++w) v += accs[(w * kHeads + g) * hd + d] * f[w];
        o[d] = v * inv;
      }
      continue;
    }
    float* pp = part + ((int64_t(blockIdx.x) * n_heads + h) * int64_t(gridDim.z) + split) * (hd + 2);
    if (threadIdx.x == 0) {
      pp[0] = M;  // -inf when this split holds no keys (then L = 0 and acc = 0)
      pp[1] = L;
    }
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
      float v = 0.0f;
      for (int w = 0; w < kWarps; ++w) v += accs[(w * kHeads + g) * hd + d] * f[w];
      pp[2 + d] = v;
    }
  }
}

// grid: (rows, n_heads, ceil(hd / kCombineDims)) for rows [row0, row0 + rows); block:
// kCombineDims threads, one output dim each. Merges a row's partial results of attention_kernel
// or attention_ext_kernel (its n_splits as there: per row, from max_position, or max_splits when
// max_position is null; a row of one split was written by the first kernel). Every block of a
// head derives the same max and sum from the splits' (max, sum) in the same order; a thread's
// dim then sums its splits in split order, 16 loads in flight (one block per head and a serial
// walk over the splits were latency-bound: 21 us for a 9B layer's 16 heads x 64 splits).
// With a gate ([T, n_heads * hd], Ops::norm_rope_attention) the output is then multiplied by
// sigmoid(gate) as mul_sigmoid_kernel does (the same bits), also for a row of one split, whose
// output the first kernel wrote.
constexpr int kCombineDims = 64;
__global__ void attention_combine_kernel(float* __restrict__ out,         // [T, n_heads * hd]
                                         const float* __restrict__ part,  // [rows, n_heads, max_splits, hd + 2]
                                         const int32_t* __restrict__ positions,  // [T]
                                         int n_heads, int hd, int max_splits, int window, int64_t row0,
                                         bool per_row_splits, const int32_t* __restrict__ max_position,
                                         const float* __restrict__ gate) {
  pdl_begin();
  const int64_t r = row0 + blockIdx.x;
  const int h = blockIdx.y;
  const int64_t pos = positions[r];
  const int n_splits = row_splits(pos, window, per_row_splits, max_position, max_splits);
  const int64_t o = r * int64_t(n_heads) * hd + int64_t(h) * hd + int(blockIdx.z) * kCombineDims + int(threadIdx.x);
  if (n_splits == 1) {
    if (gate && int(blockIdx.z) * kCombineDims + int(threadIdx.x) < hd) out[o] *= sigmoidf(gate[o]);
    return;
  }
  const float* pp = part + (int64_t(blockIdx.x) * n_heads + h) * int64_t(max_splits) * (hd + 2);
  __shared__ float sm[kMaxSplits], sl[kMaxSplits], se[kMaxSplits];
  for (int s = threadIdx.x; s < n_splits; s += blockDim.x) {
    sm[s] = pp[s * (hd + 2)];
    sl[s] = pp[s * (hd + 2) + 1];
  }
  __syncthreads();
  float M = -INFINITY;
  for (int s = 0; s < n_splits; ++s) M = fmaxf(M, sm[s]);
  for (int s = threadIdx.x; s < n_splits; s += blockDim.x) se[s] = sm[s] != -INFINITY ? expf(sm[s] - M) : 0.0f;
  __syncthreads();
  float L = 0.0f;
  for (int s = 0; s < n_splits; ++s)
    if (sm[s] != -INFINITY) L += sl[s] * se[s];
  const float inv = 1.0f / L;
  const int d = int(blockIdx.z) * kCombineDims + int(threadIdx.x);
  if (d >= hd) return;
  float v = 0.0f;
#pragma unroll 16
  for (int s = 0; s < n_splits; ++s)
    if (sm[s] != -INFINITY) v += pp[s * (hd + 2) + 2 + d] * se[s];
  float x = v * inv;
  if (gate) x *= sigmoidf(gate[o]);
  out[o] = x;
}

// Rows [row0, row0 + rows) with up to max_splits splits each (step_splits, or det_splits per row
// when per_row_splits). C: the cache's element type. mma: attention_mma_kernel (pieces of
// kMmaHeads heads), else the tile or per-key kernel (pieces of kHeads). gate (or null): the
// combine kernel multiplies the output by its sigmoid, and runs for that alone at one split.
template <int DPL, typename C>
void launch_attention(const Context& ctx, const Tensor& out, const Tensor& q, const KvLayerView& cache,
                      const AttentionParams& p, int64_t row0, int64_t rows, int max_splits, bool per_row_splits,
                      bool mma, const float* gate) {
  // head_dim <= 512: at most 4 * 4 * 514 floats, within the 48 KB a launch gets without opting in
  static_assert(kWarps * kHeads * (512 + 2) * sizeof(float) <= 48 * 1024);
  const size_t smem = size_t(kWarps) * kHeads * size_t(p.head_dim + 2) * sizeof(float);
  float* part = nullptr;
  if (max_splits > 1) {
    const size_t n = size_t(rows) * p.n_heads * max_splits * (p.head_dim + 2);
    part = static_cast<float*>(ctx.scratch->get(kSlotAttnPartial, n * sizeof(float)));
  }
  const int group = p.n_heads / p.n_kv_heads;
  dim3 grid(unsigned(rows), unsigned(p.n_kv_heads * head_pieces(group, mma ? kMmaHeads : kHeads)),
            unsigned(max_splits));
  if (mma) {
    launch_attention_mma(ctx, grid, out, q, cache, p, row0, per_row_splits, part);
  } else if (attention_tiles_apply(p.head_dim)) {
    launch_attention_tiles<C>(ctx, grid, out, q, cache, p, row0, per_row_splits, part);
  } else {
    const bool full = (p.n_heads / p.n_kv_heads) % kHeads == 0;
    launch((full ? attention_kernel<DPL, C, true> : attention_kernel<DPL, C, false>), grid, kWarps * 32, smem,
           ctx.stream, out.f32(), q.f32(), static_cast<const C*>(cache.k.data), static_cast<const C*>(cache.v.data),
           ctx.step.positions, ctx.step.row_seq, ctx.step.seqs, ctx.step.block_tables, ctx.step.block_size,
           p.n_heads, p.n_heads / p.n_kv_heads, p.head_dim, p.scale, p.window, row0, per_row_splits,
           ctx.step.max_position, part);
    CUDA_CHECK_LAUNCH();
  }
  if (max_splits > 1 || gate) {
    launch(attention_combine_kernel,
           dim3(unsigned(rows), unsigned(p.n_heads), unsigned(ceil_div(p.head_dim, kCombineDims))), kCombineDims, 0,
           ctx.stream, out.f32(), part, ctx.step.positions, p.n_heads, p.head_dim, max_splits, p.window, row0,
           per_row_splits, ctx.step.max_position, gate);
    CUDA_CHECK_LAUNCH();
  }
}

// The most splits a row of this step may take (the grid's depth): enough blocks to cover the GPU
// with blocks_per_sm blocks a multiprocessor (2 for the CUDA-core kernels: eight measured slower
// on the H200, a 9B row at 8192 keys 80 -> 87 us a layer; 1 for attention_mma_kernel, whose
// shared memory fills one). The count itself, up to this, follows the keys (step_splits on the
// device). per_row: the blocks a row and split take.
int split_cap(const StepPlan& plan, int64_t per_row, int blocks_per_sm = 2) {
  const int64_t blocks = int64_t(plan.n_rows()) * per_row;
  const int64_t want = (blocks_per_sm * int64_t(sm_count()) + blocks - 1) / blocks;
  return int(std::clamp<int64_t>(want, 1, kMaxSplits));
}

// Every row of the step: one launch with step_splits' count, or in deterministic mode each row
// with det_splits of its own keys.
template <int DPL, typename C>
void run_attention(const Context& ctx, const Tensor& out, const Tensor& q, const KvLayerView& cache,
                   const AttentionParams& p, const StepPlan& plan, const float* gate) {
  const int64_t T = q.rows;
  const bool mma = std::is_same_v<C, __nv_bfloat16> && attention_mma_applies(ctx, DType::kBF16, p.head_dim);
  if (!ctx.deterministic) {
    // blocks a row and split take: a block per kHeads (kMmaHeads) of each KV head's GQA group
    const int64_t per_row = int64_t(p.n_kv_heads) * head_pieces(p.n_heads / p.n_kv_heads, mma ? kMmaHeads : kHeads);
    launch_attention<DPL, C>(ctx, out, q, cache, p, 0, T, split_cap(plan, per_row, mma ? kMmaBlocksPerSm : 2),
                             false, mma, gate);
    return;
  }
  // Deterministic: each row det_splits(its keys), computed on the device. A launch's grid depth
  // is det_depth of its rows' most, so the bits do not depend on it, and a step graph recorded
  // with it holds while every row's keys fit that depth (limit_positions). Consecutive rows share
  // a launch while their split results fit kDetPartialBytes (a long prefill chunk would
  // otherwise need gigabytes).
  const size_t per_split_bytes = size_t(p.n_heads) * size_t(p.head_dim + 2) * sizeof(float);
  for (int64_t r0 = 0; r0 < T;) {
    int64_t r1 = r0;
    int depth = 1;
    while (r1 < T) {
      const int64_t pos = plan.positions[size_t(r1)];
      const int d = std::max(depth, det_depth(det_splits(pos - first_key(pos, p.window) + 1)));
      if (r1 > r0 && size_t(r1 - r0 + 1) * size_t(d) * per_split_bytes > kDetPartialBytes) break;
      depth = d;
      ++r1;
    }
    // keys = pos - first_key + 1 <= depth * kDetKeysPerSplit holds for every position with a
    // window that short, else for positions below depth * kDetKeysPerSplit
    if (depth < kMaxSplits && !(p.window > 0 && p.window <= depth * kDetKeysPerSplit))
      ctx.guard->limit_positions(int32_t(depth * kDetKeysPerSplit - 1));
    launch_attention<DPL, C>(ctx, out, q, cache, p, r0, r1 - r0, depth, true, mma, gate);
    r0 = r1;
  }
}

// ---- the general path: ring caches, KV written by another layer, per-row selections ----

// Row of the cache tensors holding position `pos` of sequence `s`: its ring row (ring_rows > 0:
// one ring per state slot) or its paged block's row.
__device__ __forceinline__ int64_t cache_row_ext(const int32_t* block_tables, const SeqStep& s, int block_size,
                                                 int ring_rows, int64_t pos) {
  if (ring_rows > 0) return int64_t(s.state_slot) * ring_rows + pos % ring_rows;
  return cache_row(block_tables, s, block_size, pos);
}

// grid: T blocks; copies k[r], v[r] to the cache row of positions[r], paged (both paths) or in a
// ring, which keeps only each sequence's last ring_rows positions of the step (earlier rows would
// be overwritten anyway).
template <typename C>
__global__ void kv_write_kernel(C* __restrict__ kc, C* __restrict__ vc,  // cache rows [*, kv_width]
                                const float* __restrict__ k, const float* __restrict__ v,  // [T, kv_width]
                                const int32_t* __restrict__ positions, const int32_t* __restrict__ row_seq,
                                const SeqStep* __restrict__ seqs, const int32_t* __restrict__ block_tables,
                                int block_size, int ring_rows, int64_t kv_width) {
  pdl_begin();
  const int64_t r = blockIdx.x;
  const SeqStep s = seqs[row_seq[r]];
  if (ring_rows > 0 && int64_t(s.row_begin) + s.n_tokens - r > ring_rows) return;
  const int64_t row = cache_row_ext(block_tables, s, block_size, ring_rows, positions[r]);
  for (int64_t i = threadIdx.x; i < kv_width; i += blockDim.x) {
    kc[row * kv_width + i] = to_cache<C>(k[r * kv_width + i]);
    vc[row * kv_width + i] = to_cache<C>(v[r * kv_width + i]);
  }
}

// grid: (T, n_heads, n_splits); block: kWarps warps; as attention_kernel, except for where keys
// come from. A row's keys: positions [first, pos] (first = pos - window + 1 with a window), or
// the row's select entries (-1 = unused). Position j is this step's k/v row (ks, vs non-null and
// j >= n_past; taken as_cached<C>, as the cache will hold it) or the cache's (ring or paged).
// Splits: step_splits(*max_position) when given (surplus blocks exit), else the grid's depth.
template <int DPL, typename C>
__global__ void attention_ext_kernel(float* __restrict__ out,  // [T, n_heads * hd]
                                     const float* __restrict__ q,   // [T, n_heads * hd]
                                     const C* __restrict__ kc, const C* __restrict__ vc,  // cache rows
                                     const float* __restrict__ ks, const float* __restrict__ vs,  // [T, kv_width] or null
                                     const int32_t* __restrict__ select,  // [T, sel_cols] or null
                                     int sel_cols, const int32_t* __restrict__ positions,
                                     const int32_t* __restrict__ row_seq, const SeqStep* __restrict__ seqs,
                                     const int32_t* __restrict__ block_tables, int block_size, int ring_rows,
                                     int n_heads, int group, int hd, float scale, int window,
                                     const int32_t* __restrict__ max_position, float* __restrict__ part) {
  pdl_begin();
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
  const int32_t* sel = select ? select + r * sel_cols : nullptr;
  const int64_t first = first_key(pos, window);
  const int64_t n_keys = sel ? sel_cols : pos - first + 1;
  const int n_splits = row_splits(pos, window, false, max_position, int(gridDim.z));
  const int split = blockIdx.z;
  if (split >= n_splits) return;  // the whole block: a surplus split of this step
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
  const int64_t per_split = (n_keys + n_splits - 1) / n_splits;
  const int64_t z0 = split * per_split;
  const int64_t z1 = z0 + per_split < n_keys ? z0 + per_split : n_keys;  // exclusive
  for (int64_t z = z0 + warp; z < z1; z += kWarps) {
    const int64_t j = sel ? int64_t(sel[z]) : first + z;
    if (j < 0 || j > pos) continue;  // an unused select entry (qsa_select never lists a later position)
    float kx[DPL], vx[DPL];
    if (ks && j >= s.n_past) {
      const int64_t at = (s.row_begin + (j - s.n_past)) * kv_width + int64_t(kvh) * hd;
#pragma unroll
      for (int i = 0; i < DPL; ++i) {
        const int d = i * 32 + lane;
        kx[i] = d < hd ? as_cached<C>(ks[at + d]) : 0.0f;
        vx[i] = d < hd ? as_cached<C>(vs[at + d]) : 0.0f;
      }
    } else {
      const int64_t at = cache_row_ext(block_tables, s, block_size, ring_rows, j) * kv_width + int64_t(kvh) * hd;
#pragma unroll
      for (int i = 0; i < DPL; ++i) {
        const int d = i * 32 + lane;
        kx[i] = d < hd ? to_f32(kc[at + d]) : 0.0f;
        vx[i] = d < hd ? to_f32(vc[at + d]) : 0.0f;
      }
    }
    float dot = 0.0f;
#pragma unroll
    for (int i = 0; i < DPL; ++i) {
      const int d = i * 32 + lane;
      if (d < hd) dot += qv[i] * kx[i];
    }
    const float score = warp_sum(dot) * scale;
    const float m_new = fmaxf(m, score);
    const float corr = expf(m - m_new);  // 0 on the first key (m = -inf)
    const float p = expf(score - m_new);
    l = l * corr + p;
#pragma unroll
    for (int i = 0; i < DPL; ++i) {
      const int d = i * 32 + lane;
      acc[i] = acc[i] * corr + (d < hd ? p * vx[i] : 0.0f);
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
  if (n_splits == 1) {
    const float inv = 1.0f / L;
    float* o = out + r * int64_t(n_heads) * hd + int64_t(h) * hd;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
      float v = 0.0f;
      for (int w = 0; w < kWarps; ++w) v += accs[w * hd + d] * f[w];
      o[d] = v * inv;
    }
    return;
  }
  float* pp = part + ((r * n_heads + h) * int64_t(gridDim.z) + split) * (hd + 2);
  if (threadIdx.x == 0) {
    pp[0] = M;  // -inf when this split holds no keys (then L = 0 and acc = 0)
    pp[1] = L;
  }
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float v = 0.0f;
    for (int w = 0; w < kWarps; ++w) v += accs[w * hd + d] * f[w];
    pp[2 + d] = v;
  }
}

template <int DPL, typename C>
void launch_attention_ext(const Context& ctx, const Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v,
                          const KvLayerView& cache, const AttentionParams& p, int n_splits,
                          const int32_t* max_position) {
  const size_t smem = size_t(p.head_dim + kWarps * p.head_dim + 2 * kWarps) * sizeof(float);
  float* part = nullptr;
  if (n_splits > 1) {
    const size_t n = size_t(q.rows) * p.n_heads * n_splits * (p.head_dim + 2);
    part = static_cast<float*>(ctx.scratch->get(kSlotAttnPartial, n * sizeof(float)));
  }
  const bool step_kv = !k.empty();
  dim3 grid(unsigned(q.rows), unsigned(p.n_heads), unsigned(n_splits));
  launch(attention_ext_kernel<DPL, C>, grid, kWarps * 32, smem, ctx.stream, out.f32(), q.f32(),
         static_cast<const C*>(cache.k.data), static_cast<const C*>(cache.v.data), step_kv ? k.f32() : nullptr,
         step_kv ? v.f32() : nullptr, p.select.empty() ? nullptr : p.select.as<const int32_t>(), int(p.select.cols),
         ctx.step.positions, ctx.step.row_seq, ctx.step.seqs, ctx.step.block_tables, ctx.step.block_size,
         cache.ring_rows, p.n_heads, p.n_heads / p.n_kv_heads, p.head_dim, p.scale, p.window, max_position, part);
  CUDA_CHECK_LAUNCH();
  if (n_splits > 1) {
    launch(attention_combine_kernel,
           dim3(unsigned(q.rows), unsigned(p.n_heads), unsigned(ceil_div(p.head_dim, kCombineDims))), kCombineDims, 0,
           ctx.stream, out.f32(), part, ctx.step.positions, p.n_heads, p.head_dim, n_splits, p.window, 0, false,
           max_position, nullptr);
    CUDA_CHECK_LAUNCH();
  }
}

// Checks that every row's cache row exists: a ring for the sequence's slot, or blocks covering
// its position.
void check_cache_rows(const KvLayerView& cache, const StepPlan& plan) {
  for (int64_t r = 0; r < plan.n_rows(); ++r) {
    const SeqStep& s = plan.seqs[size_t(plan.row_seq[size_t(r)])];
    if (cache.ring_rows > 0) {
      KCHECK_MSG(s.state_slot >= 0 && (int64_t(s.state_slot) + 1) * cache.ring_rows <= cache.k.rows,
                 "attention: state slot ", s.state_slot, " has no ring in a cache of ", cache.k.rows, " rows");
    } else {
      KCHECK(plan.positions[size_t(r)] < int64_t(s.n_blocks) * plan.block_size);
    }
  }
}

void launch_kv_write(const Context& ctx, const KvLayerView& cache, const Tensor& k, const Tensor& v) {
  if (k.rows == 0) return;
  dispatch_kv_cache(cache.k, cache.v, "kv_write", [&]<typename C>() {
    launch(kv_write_kernel<C>, unsigned(k.rows), 128, 0, ctx.stream, static_cast<C*>(cache.k.data),
           static_cast<C*>(cache.v.data), k.f32(), v.f32(), ctx.step.positions, ctx.step.row_seq, ctx.step.seqs,
           ctx.step.block_tables, ctx.step.block_size, cache.ring_rows, k.cols);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

void kv_write(const Context& ctx, const KvLayerView& cache, const Tensor& k, const Tensor& v, const StepPlan& plan) {
  check_step(ctx, plan);
  for (const Tensor* t : {&k, &v}) check_f32(*t, "kv_write tensor");
  check_kv_cache(cache.k, cache.v, "kv_write");
  const int64_t width = k.cols;
  KCHECK_MSG(v.cols == width && cache.k.cols == width && cache.v.cols == width && k.rows == plan.n_rows() &&
                 v.rows == k.rows,
             "kv_write: k [", k.rows, ", ", k.cols, "] v [", v.rows, ", ", v.cols, "] into a cache of width ",
             cache.k.cols, " for ", plan.n_rows(), " rows");
  check_cache_rows(cache, plan);
  launch_kv_write(ctx, cache, k, v);
}

namespace {

// attention's checks of its arguments.
void check_attention(const Context& ctx, const Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v,
                     const KvLayerView& cache, const AttentionParams& p, const StepPlan& plan) {
  check_step(ctx, plan);
  const bool step_kv = !k.empty();  // empty k/v: every position comes from the cache
  KCHECK_MSG(k.empty() == v.empty(), "attention: k and v must both be given or both be empty");
  for (const Tensor* t : {&out, &q}) check_f32(*t, "attention tensor");
  check_kv_cache(cache.k, cache.v, "attention");
  if (step_kv) {
    check_f32(k, "attention k");
    check_f32(v, "attention v");
  }
  const int hd = p.head_dim;
  const int64_t kv_width = int64_t(p.n_kv_heads) * hd;
  KCHECK_MSG(p.n_heads > 0 && p.n_kv_heads > 0 && p.n_heads % p.n_kv_heads == 0, "attention: ", p.n_heads,
             " heads over ", p.n_kv_heads, " kv heads");
  KCHECK_MSG(q.cols == int64_t(p.n_heads) * hd && (!step_kv || (k.cols == kv_width && v.cols == kv_width)),
             "attention: q cols ", q.cols, " k cols ", k.cols, " v cols ", v.cols, " for ", p.n_heads, "/",
             p.n_kv_heads, " heads of ", hd);
  KCHECK(cache.k.cols == kv_width && cache.v.cols == kv_width && out.cols == q.cols && out.rows == q.rows);
  KCHECK(q.rows == plan.n_rows() && (!step_kv || (k.rows == q.rows && v.rows == q.rows)));
  KCHECK_MSG(hd > 0 && hd <= 512, "attention: head_dim ", hd, " (the CUDA kernel takes up to 512)");
  KCHECK_MSG(cache.k.dtype != DType::kBF16 || hd % 2 == 0, "attention: a BF16 KV cache needs an even head_dim, got ",
             hd, " (use --kv-cache f32)");
  KCHECK_MSG(cache.ring_rows == 0 || (p.window > 0 && p.window <= cache.ring_rows && p.select.empty()),
             "attention: a ring cache of ", cache.ring_rows, " rows needs a window of at most that (window ",
             p.window, ") and no selection");
  KCHECK_MSG(p.select.empty() || (p.select.dtype == DType::kI32 && p.select.rows == q.rows &&
                                  p.select.device == Device::kCuda && p.select.cols > 0),
             "attention: select must be I32 [", q.rows, ", S] on the device");
  check_cache_rows(cache, plan);
}

// The Qwen-line path after the step's k/v are in the cache: attend over the cache alone; then,
// with a gate, out *= sigmoid(gate) (in the combine kernel, or mul_sigmoid after the prefill one).
void attend_cache(const Context& ctx, const Tensor& out, const Tensor& q, const KvLayerView& cache,
                  const AttentionParams& p, const StepPlan& plan, const Tensor& gate) {
  const int hd = p.head_dim;
  const float* g = gate.empty() ? nullptr : gate.f32();
  dispatch_kv_cache(cache.k, cache.v, "attention", [&]<typename C>() {
    if (attention_prefill_applies(ctx, q, cache, p, plan)) {  // a long prefill chunk: the tiled kernel
      attention_prefill(ctx, out, q, cache, p, plan);
      if (g) mul_sigmoid(ctx, out, gate);
      return;
    }
    if (hd <= 32) run_attention<1, C>(ctx, out, q, cache, p, plan, g);
    else if (hd <= 64) run_attention<2, C>(ctx, out, q, cache, p, plan, g);
    else if (hd <= 128) run_attention<4, C>(ctx, out, q, cache, p, plan, g);
    else if (hd <= 256) run_attention<8, C>(ctx, out, q, cache, p, plan, g);
    else run_attention<16, C>(ctx, out, q, cache, p, plan, g);
  });
}

}  // namespace

void attention(const Context& ctx, const Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v,
               const KvLayerView& cache, const AttentionParams& p, const StepPlan& plan) {
  check_attention(ctx, out, q, k, v, cache, p, plan);
  const bool step_kv = !k.empty();
  const int hd = p.head_dim;
  if (q.rows == 0) return;
  if (cache.ring_rows == 0 && p.select.empty() && p.write_kv && step_kv) {
    // The Qwen-line path: write the step's k/v first, then attend over the cache alone.
    launch_kv_write(ctx, cache, k, v);  // paged (ring_rows 0): every row written
    attend_cache(ctx, out, q, cache, p, plan, Tensor{});
    return;
  }
  // The general path: the step's own positions from k/v, the past from the cache; write after.
  // Deterministic mode runs it unsplit: each row's sums then run in one fixed order, alone or
  // batched (no split-KV for these layers in that mode).
  // Without a selection the count follows the step's longest row (step_splits on the device, up
  // to split_cap); a selection's key count is its width, known here.
  int n_splits = 1;
  const int32_t* max_position = nullptr;
  if (!ctx.deterministic && p.select.empty()) {
    n_splits = split_cap(plan, p.n_heads);  // a block per query head
    max_position = ctx.step.max_position;
  } else if (!ctx.deterministic) {
    n_splits = step_splits(p.select.cols - 1, 0, split_cap(plan, p.n_heads));  // sel_cols keys
  }
  dispatch_kv_cache(cache.k, cache.v, "attention", [&]<typename C>() {
    if (hd <= 32) launch_attention_ext<1, C>(ctx, out, q, k, v, cache, p, n_splits, max_position);
    else if (hd <= 64) launch_attention_ext<2, C>(ctx, out, q, k, v, cache, p, n_splits, max_position);
    else if (hd <= 128) launch_attention_ext<4, C>(ctx, out, q, k, v, cache, p, n_splits, max_position);
    else if (hd <= 256) launch_attention_ext<8, C>(ctx, out, q, k, v, cache, p, n_splits, max_position);
    else launch_attention_ext<16, C>(ctx, out, q, k, v, cache, p, n_splits, max_position);
  });
  if (step_kv && p.write_kv) launch_kv_write(ctx, cache, k, v);
}

bool norm_rope_attention(const Context& ctx, const Tensor& out, const Tensor& q, const Tensor& q_norm,
                         const Tensor& k, const Tensor& k_norm, const Tensor& v, const Tensor& gate, float eps,
                         const RopeConfig& rope, const KvLayerView& cache, const AttentionParams& p,
                         const StepPlan& plan) {
  if (k.empty() || cache.ring_rows != 0 || !p.select.empty() || !p.write_kv) return false;
  check_attention(ctx, out, q, k, v, cache, p, plan);
  if (!gate.empty()) {
    check_f32(gate, "norm_rope_attention gate");
    KCHECK_MSG(gate.rows == out.rows && gate.cols == out.cols, "norm_rope_attention: gate [", gate.rows, ", ",
               gate.cols, "] for an output of [", out.rows, ", ", out.cols, "]");
  }
  if (!qk_norm_rope_kv_write(ctx, q, q_norm, k, k_norm, v, p.head_dim, eps, rope, cache, plan)) return false;
  if (q.rows > 0) attend_cache(ctx, out, q, cache, p, plan, gate);
  return true;
}

}  // namespace kestrel::cuda
