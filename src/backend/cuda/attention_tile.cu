// The tiled split-KV decode attention for a head_dim of 256 or 512 (attention_tile_kernel), on
// attention.cu's grid and partial results (attention_split.cuh); attention.cu calls it through
// launch_attention_tiles and merges the splits.
#include "backend/cuda/attention_tile.h"

#include "backend/cuda/attention_split.cuh"
#include "backend/cuda/device_util.cuh"

namespace kestrel::cuda {
namespace {

using namespace split_kv;

// attention_tile_kernel: attention.cu's attention_kernel's work (same grid, splits and partial results) for a
// head_dim of 256 or 512, which every Qwen3.5 / Qwen3-Next / Gemma 4 attention layer has. The
// per-key kernel reduces each (key, head) dot product across the warp's lanes, and at 180
// registers two of its blocks fill a multiprocessor: Nsight Compute found it latency-bound at a
// third of an instruction a cycle, 45 us for a 9B layer at 8192 keys whose 67 MB of F32 keys and
// values take 16 us to read. Here the block's 4 warps walk the split 16 keys (a tile) at a time:
//  - the tile's K and V rows are copied to shared memory (cp.async; 3 stages, 2 when a stage is
//    64 KB), so the loads do not wait on the arithmetic; each thread reads the block-table entry
//    of its next copy a tile ahead;
//  - QK^T: 8 threads a key, each a dot over every eighth 16-byte chunk of the row for the 4 heads
//    (q staged in shared memory, read as broadcasts), then a 3-step xor tree over the 8;
//  - the online softmax moves once a tile (16 lanes a head: the tile's max, its p, their sum);
//  - P V: a thread owns HD / 128 consecutive dims of the 4 heads and adds the tile's 16 keys in
//    order (keys past the split: p = 0 over zero-filled rows).
// Measured (docs/benchmarks.md, tenth session): a 9B layer at 8192 keys 45.7 -> 36.8 us (F32
// cache), 36.4 -> 30.1 us (BF16). Two blocks of F32 heads fit a multiprocessor and Nsight Compute
// still finds the kernel latency-bound (0.28 instructions a cycle a scheduler, 2.5 TB/s with the
// L2 flushed); 8 warps and 2 stages a block (three blocks a multiprocessor) measured slower
// (38.4 / 35.3 us).
// Order of a row's sums: fixed by its split's key range alone (tiles from its first key), so the
// deterministic mode's per-row splits keep a row's bits whatever else is in the step.
constexpr int kTileKeys = 16;
constexpr int kTileThreads = 128;
constexpr int kKeyThreads = kTileThreads / kTileKeys;  // threads sharing one key's row: 8
static_assert(kKeyThreads == 8 && kHeads == 4);

template <typename C, int HD>
struct TileLayout {
  static constexpr int kChunkElems = 16 / int(sizeof(C));  // elements of one 16-byte chunk
  static constexpr int kChunks = HD / kChunkElems;          // chunks of a K or V row
  static constexpr int kChunksPerThread = kChunks / kKeyThreads;  // a key's threads share its row
  static constexpr int kDims = HD / kTileThreads;           // P V: dims a thread owns
  static constexpr size_t kTileBytes = size_t(kTileKeys) * HD * sizeof(C);  // K or V of one tile
  static constexpr int kStages = 2 * kTileBytes > 32768 ? 2 : 3;  // a 64 KB stage (F32, HD 512): 2 of them
  static constexpr size_t kKvBytes = size_t(kStages) * 2 * kTileBytes;
  static constexpr size_t kQBytes = size_t(kHeads) * HD * sizeof(float);
  // then scores and p ([kTileKeys] float4 each: the 4 heads), the tile's rescale per head, and
  // the final (max, sum) per head
  static constexpr size_t kBytes = kKvBytes + kQBytes + 2 * kTileKeys * sizeof(float4) + 3 * kHeads * sizeof(float);
  static_assert(HD % (kKeyThreads * kChunkElems) == 0 && HD % kTileThreads == 0);
};

// The 16-byte chunk of C elements at p as floats (4 of F32, 8 of BF16).
__device__ __forceinline__ void chunk_floats(const float* p, float (&o)[4]) {
  const float4 v = *reinterpret_cast<const float4*>(p);
  o[0] = v.x, o[1] = v.y, o[2] = v.z, o[3] = v.w;
}
__device__ __forceinline__ void chunk_floats(const __nv_bfloat16* p, float (&o)[8]) {
  const uint4 v = *reinterpret_cast<const uint4*>(p);
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    o[2 * i] = __uint_as_float(w[i] << 16);
    o[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}
// N (2 or 4) consecutive C elements at p as floats.
template <int N>
__device__ __forceinline__ void dims_floats(const float* p, float (&o)[N]) {
  if constexpr (N == 2) {
    const float2 v = *reinterpret_cast<const float2*>(p);
    o[0] = v.x, o[1] = v.y;
  } else {
    const float4 v = *reinterpret_cast<const float4*>(p);
    o[0] = v.x, o[1] = v.y, o[2] = v.z, o[3] = v.w;
  }
}
template <int N>
__device__ __forceinline__ void dims_floats(const __nv_bfloat16* p, float (&o)[N]) {
  uint32_t w[N / 2];
  if constexpr (N == 2) {
    w[0] = *reinterpret_cast<const uint32_t*>(p);
  } else {
    const uint2 v = *reinterpret_cast<const uint2*>(p);
    w[0] = v.x, w[1] = v.y;
  }
#pragma unroll
  for (int i = 0; i < N / 2; ++i) {
    o[2 * i] = __uint_as_float(w[i] << 16);
    o[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

template <typename C, int HD>
__global__ void __launch_bounds__(kTileThreads)
    attention_tile_kernel(float* __restrict__ out, const float* __restrict__ q, const C* __restrict__ kc,
                          const C* __restrict__ vc, const int32_t* __restrict__ positions,
                          const int32_t* __restrict__ row_seq, const SeqStep* __restrict__ seqs,
                          const int32_t* __restrict__ block_tables, int block_size, int n_heads, int group,
                          float scale, int window, int64_t row0, bool per_row_splits,
                          const int32_t* __restrict__ max_position, float* __restrict__ part) {
  pdl_begin();
  using L = TileLayout<C, HD>;
  constexpr int S = L::kStages, CE = L::kChunkElems;
  extern __shared__ __align__(16) unsigned char tile_smem[];
  C* const kv = reinterpret_cast<C*>(tile_smem);  // [S][K, V][kTileKeys][HD]
  float* const qs = reinterpret_cast<float*>(tile_smem + L::kKvBytes);  // [kHeads][HD]
  float4* const ss = reinterpret_cast<float4*>(qs + kHeads * HD);      // [kTileKeys] scores
  float4* const ps = ss + kTileKeys;                                     // [kTileKeys] p
  float* const corr = reinterpret_cast<float*>(ps + kTileKeys);          // [kHeads]
  float* const fin = corr + kHeads;                                      // [kHeads] max, [kHeads] sum
  const int tid = threadIdx.x;
  SplitBlock b;
  if (!split_block(b, positions, row_seq, seqs, group, window, row0, per_row_splits, max_position)) return;
  const int64_t r = b.r, j0 = b.j0, j1 = b.j1;  // this block: keys [j0, j1] of row r
  const int kvh = b.kvh, h0 = b.h0, nh = b.nh, n_splits = b.n_splits, split = b.split;  // heads h0 .. h0 + nh - 1
  const SeqStep& s = b.s;
  const int64_t kv_width = int64_t(n_heads / group) * HD;
  for (int i = tid; i < kHeads * HD; i += kTileThreads) {
    const int g = i / HD;
    qs[i] = g < nh ? q[r * int64_t(n_heads) * HD + int64_t(h0 + g) * HD + i % HD] : 0.0f;
  }
  const int n_keys = j1 >= j0 ? int(j1 - j0 + 1) : 0;
  const int n_tiles = (n_keys + kTileKeys - 1) / kTileKeys;
  const int key = tid / kKeyThreads, slice = tid % kKeyThreads;  // copies and QK^T: 8 threads a key
  // The cache row of this thread's key in tile t, or -1 past the split. The loop reads it a tile
  // before the copy that needs it, so the block-table load is not on the copy's path.
  auto row_of = [&](int t) -> int64_t {
    const int64_t j = j0 + int64_t(t) * kTileKeys + key;
    return t < n_tiles && j <= j1 ? cache_row(block_tables, s, block_size, j) : -1;
  };
  // tile t's K and V rows into stage t % S; keys past the split are zero-filled (no load)
  auto issue = [&](int t, int64_t row) {
    if (t >= n_tiles) return;
    C* const kst = kv + size_t(t % S) * 2 * kTileKeys * HD;
    C* const vst = kst + kTileKeys * HD;
    const bool ok = row >= 0;
    const C* ksrc = kc + (ok ? row : 0) * kv_width + int64_t(kvh) * HD;
    const C* vsrc = vc + (ok ? row : 0) * kv_width + int64_t(kvh) * HD;
#pragma unroll
    for (int i = 0; i < L::kChunksPerThread; ++i) {
      const int e = (slice + kKeyThreads * i) * CE;
      cp_async16(kst + key * HD + e, ksrc + e, ok);
      cp_async16(vst + key * HD + e, vsrc + e, ok);
    }
  };
  {
    int64_t rows[S - 1];
#pragma unroll
    for (int t = 0; t < S - 1; ++t) rows[t] = row_of(t);
#pragma unroll
    for (int t = 0; t < S - 1; ++t) {
      issue(t, rows[t]);
      cp_async_commit();
    }
  }
  int64_t next_row = row_of(S - 1);
  float m = -INFINITY, l = 0.0f;  // softmax threads (tid < 64): head tid / 16
  float acc[kHeads][L::kDims];
#pragma unroll
  for (int g = 0; g < kHeads; ++g)
#pragma unroll
    for (int d = 0; d < L::kDims; ++d) acc[g][d] = 0.0f;
  const int d0 = tid * L::kDims;  // P V: this thread's dims
  for (int t = 0; t < n_tiles; ++t) {
    cp_async_wait<S - 2>();  // this thread's copies of tile t have landed
    __syncthreads();         // everyone's; and the stage tile t - 1 used is free
    issue(t + S - 1, next_row);
    cp_async_commit();
    next_row = row_of(t + S);
    const C* const kt = kv + size_t(t % S) * 2 * kTileKeys * HD;
    const C* const vt = kt + kTileKeys * HD;
    {  // QK^T: key `key`, chunks slice, slice + 8, ..
      float dot[kHeads] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int i = 0; i < L::kChunksPerThread; ++i) {
        const int e = (slice + kKeyThreads * i) * CE;
        float kf[CE];
        chunk_floats(kt + key * HD + e, kf);
#pragma unroll
        for (int g = 0; g < kHeads; ++g) {
#pragma unroll
          for (int c4 = 0; c4 < CE; c4 += 4) {
            const float4 qv = *reinterpret_cast<const float4*>(qs + g * HD + e + c4);
            dot[g] = fmaf(qv.x, kf[c4], dot[g]);
            dot[g] = fmaf(qv.y, kf[c4 + 1], dot[g]);
            dot[g] = fmaf(qv.z, kf[c4 + 2], dot[g]);
            dot[g] = fmaf(qv.w, kf[c4 + 3], dot[g]);
          }
        }
      }
#pragma unroll
      for (int o = 1; o < kKeyThreads; o <<= 1)
#pragma unroll
        for (int g = 0; g < kHeads; ++g) dot[g] += __shfl_xor_sync(kFullMask, dot[g], o);
      if (slice == 0) ss[key] = make_float4(dot[0], dot[1], dot[2], dot[3]);
    }
    __syncthreads();
    const int valid = min(kTileKeys, n_keys - t * kTileKeys);
    if (tid < kHeads * kTileKeys) {  // softmax: head g, key j of the tile
      const int g = tid >> 4, j = tid & 15;
      const bool ok = j < valid;
      const float sc = ok ? reinterpret_cast<const float*>(&ss[j])[g] * scale : -INFINITY;
      float tmax = sc;
#pragma unroll
      for (int o = 8; o > 0; o >>= 1) tmax = fmaxf(tmax, __shfl_xor_sync(kFullMask, tmax, o));
      const float m_new = fmaxf(m, tmax);
      const float p = ok ? expf(sc - m_new) : 0.0f;
      float psum = p;
#pragma unroll
      for (int o = 8; o > 0; o >>= 1) psum += __shfl_xor_sync(kFullMask, psum, o);
      const float cr = expf(m - m_new);  // 0 on the first tile (m = -inf), 1 while the max holds
      l = l * cr + psum;
      m = m_new;
      reinterpret_cast<float*>(&ps[j])[g] = p;
      if (j == 0) corr[g] = cr;
    }
    __syncthreads();
    {  // P V
#pragma unroll
      for (int g = 0; g < kHeads; ++g) {
        const float cr = corr[g];
#pragma unroll
        for (int d = 0; d < L::kDims; ++d) acc[g][d] *= cr;
      }
#pragma unroll
      for (int j = 0; j < kTileKeys; ++j) {  // keys past the split: p = 0 and zero-filled rows
        const float4 p4 = ps[j];
        float vf[L::kDims];
        dims_floats<L::kDims>(vt + j * HD + d0, vf);
#pragma unroll
        for (int d = 0; d < L::kDims; ++d) {
          acc[0][d] = fmaf(p4.x, vf[d], acc[0][d]);
          acc[1][d] = fmaf(p4.y, vf[d], acc[1][d]);
          acc[2][d] = fmaf(p4.z, vf[d], acc[2][d]);
          acc[3][d] = fmaf(p4.w, vf[d], acc[3][d]);
        }
      }
    }
  }
  cp_async_wait<0>();  // no copy outlives the block (the issued tiles past n_tiles are none)
  if (tid < kHeads * kTileKeys && (tid & 15) == 0) {
    fin[tid >> 4] = m;
    fin[kHeads + (tid >> 4)] = l;
  }
  __syncthreads();
  for (int g = 0; g < nh; ++g) {
    const int h = h0 + g;
    const float M = fin[g], Lsum = fin[kHeads + g];
    if (n_splits == 1) {
      const float inv = 1.0f / Lsum;
      float* o = out + r * int64_t(n_heads) * HD + int64_t(h) * HD + d0;
#pragma unroll
      for (int d = 0; d < L::kDims; ++d) o[d] = acc[g][d] * inv;
      continue;
    }
    float* pp = part + ((int64_t(blockIdx.x) * n_heads + h) * int64_t(gridDim.z) + split) * (HD + 2);
    if (tid == 0) {
      pp[0] = M;  // -inf when this split holds no keys (then the sum and acc are 0)
      pp[1] = Lsum;
    }
#pragma unroll
    for (int d = 0; d < L::kDims; ++d) pp[2 + d0 + d] = acc[g][d];
  }
}

// attention_tile_kernel over `grid`, its shared memory opted into once.
template <typename C, int HD>
void launch_tiles(const Context& ctx, dim3 grid, const Tensor& out, const Tensor& q, const KvLayerView& cache,
                  const AttentionParams& p, int64_t row0, bool per_row_splits, float* part) {
  using L = TileLayout<C, HD>;
  static const bool configured = [] {
    CUDA_CHECK(cudaFuncSetAttribute(attention_tile_kernel<C, HD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(L::kBytes)));
    // all of the unified L1 as shared memory: room for the most blocks a multiprocessor
    CUDA_CHECK(cudaFuncSetAttribute(attention_tile_kernel<C, HD>, cudaFuncAttributePreferredSharedMemoryCarveout,
                                    int(cudaSharedmemCarveoutMaxShared)));
    return true;
  }();
  (void)configured;
  launch(attention_tile_kernel<C, HD>, grid, kTileThreads, L::kBytes, ctx.stream, out.f32(), q.f32(),
         static_cast<const C*>(cache.k.data), static_cast<const C*>(cache.v.data), ctx.step.positions,
         ctx.step.row_seq, ctx.step.seqs, ctx.step.block_tables, ctx.step.block_size, p.n_heads,
         p.n_heads / p.n_kv_heads, p.scale, p.window, row0, per_row_splits, ctx.step.max_position, part);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

template <typename C>
void launch_attention_tiles(const Context& ctx, dim3 grid, const Tensor& out, const Tensor& q,
                            const KvLayerView& cache, const AttentionParams& p, int64_t row0, bool per_row_splits,
                            float* part) {
  KCHECK_MSG(attention_tiles_apply(p.head_dim), "attention tiles: head_dim ", p.head_dim, " (256 or 512)");
  if (p.head_dim == 256) launch_tiles<C, 256>(ctx, grid, out, q, cache, p, row0, per_row_splits, part);
  else launch_tiles<C, 512>(ctx, grid, out, q, cache, p, row0, per_row_splits, part);
}

template void launch_attention_tiles<float>(const Context&, dim3, const Tensor&, const Tensor&, const KvLayerView&,
                                            const AttentionParams&, int64_t, bool, float*);
template void launch_attention_tiles<__nv_bfloat16>(const Context&, dim3, const Tensor&, const Tensor&,
                                                    const KvLayerView&, const AttentionParams&, int64_t, bool, float*);

}  // namespace kestrel::cuda
