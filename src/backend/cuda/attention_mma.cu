// attention_mma_kernel: split-KV decode attention on the tensor cores, for a BF16 KV cache at
// head_dim 256 (every Qwen3.5 / Qwen3.6 / Qwen3-Next attention layer with --kv-cache bf16). It does
// attention_tile_kernel's work on the same kind of grid and writes the same partial results
// (attention_split.cuh; attention.cu merges the splits), with a block serving up to 8 query heads
// of one KV head (a GQA group of 8 reads its keys and values once, not twice).
//
// Why. The CUDA-core tile kernel spends ~450 instructions a thread per 16-key tile (q re-read
// from shared memory for every chunk, 4 block barriers, shuffle trees) and Nsight Compute finds it
// latency-bound at 0.28 instructions a cycle a scheduler: 30 us for a 9B layer's 33.5 MB of BF16
// keys and values at 8192 keys, a quarter of the memory's pace. Here the products are mma.sync
// m16n8k16 (BF16 in, F32 accumulate) with the query heads as the M rows, so the per-key work is a
// few tensor instructions.
//
// Block. 4 warps, one 64-key tile at a time, tiles streamed by cp.async through 3 stages of K and
// V (64 KB each, swizzled so ldmatrix reads no bank twice). Per tile:
//  - S = Q K^T: warp w scores keys 16w .. 16w + 15 for the 8 heads; q's A fragments for the
//    whole head_dim are formed once a block and read from shared memory (in registers they cost
//    96 of them and spilled);
//  - the scores go to shared memory; after a barrier every warp runs the same online-softmax
//    update for all 64 keys (each lane a head and 16 keys, 4-lane shuffles), so all warps hold the
//    same running max, sum and P;
//  - O += P V: warp w owns output dims 64w .. 64w + 63 for the 8 heads (32 accumulators a lane).
// Precision. q and p are split into three BF16 terms each (hi = bf16(x), mid = bf16(x - hi),
// lo = bf16(x - hi - mid): ~2^-24 relative, F32's own rounding), the keys and values are BF16
// already, and the mma accumulates in F32. The 16 M rows hold hi (rows 0-7) and mid (rows 8-15)
// of the 8 heads in one mma, lo (rows 0-7) in a second into the same accumulators; a head's
// value is the sum of its two row halves. So this is the F32 kernels' arithmetic to within their
// rounding (1e-6 of them in attention_test.cc), at twice the tensor work of one term, which is
// small beside the memory time.
// Order of a row's sums: fixed by its split's key range (64-key tiles from its first key, lanes
// and mma in a fixed order), so deterministic mode's per-row splits keep a row's bits whatever
// else is in the step.
#include "backend/cuda/attention_mma.h"

#include <cstdlib>
#include <cstring>

#include "backend/cuda/attention_split.cuh"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/mma.cuh"

namespace kestrel::cuda {
namespace {

using namespace split_kv;
using bf16 = __nv_bfloat16;

constexpr int kHd = 256;
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kTileKeys = 16 * kWarps;     // 64: warp w scores keys 16w .. 16w + 15
constexpr int kStages = 3;
constexpr int kRowChunks = kHd / 8;        // 16-byte chunks of a K or V row
constexpr int kKSteps = kHd / 16;          // mma k-steps over head_dim
constexpr int kWarpDims = kHd / kWarps;    // output dims a warp owns
constexpr int kDimTiles = kWarpDims / 8;   // its mma n-tiles
constexpr int kScoreStride = kTileKeys + 8;  // a head's row of scores, padded
constexpr int kCopyKeys = kThreads / 8;    // keys one copy round covers: 8 threads a key
constexpr size_t kTileElems = size_t(kTileKeys) * kHd;
constexpr size_t kKvBytes = size_t(kStages) * 2 * kTileElems * sizeof(bf16);
constexpr size_t kScoreBytes = size_t(kMmaHeads) * kScoreStride * sizeof(float);
constexpr size_t kQBytes = size_t(kKSteps) * 32 * (sizeof(uint4) + sizeof(uint2));  // q's fragments, every lane
constexpr size_t kBytes = kKvBytes + kScoreBytes + kQBytes;
static_assert(kBytes <= 227 * 1024, "the stages must fit one multiprocessor's shared memory");
static_assert(kMmaHeads == 8 && kRowChunks % 8 == 0 && kTileKeys % kCopyKeys == 0);

// Element offset of (key, 16-byte chunk) in a [kTileKeys][kHd] tile: chunk c of a row lands in
// c ^ (key % 8), so the 8 rows one ldmatrix matrix reads (8 consecutive keys, one chunk) fall in
// 8 different bank groups.
__device__ __forceinline__ int swizzled(int key, int chunk) { return key * kHd + ((chunk ^ (key & 7)) << 3); }

// x0, x1 as three packed BF16 pairs: hi = bf16(x), mid = bf16(x - hi), lo = bf16(x - hi - mid).
// The differences are exact in F32, so hi + mid + lo is x to ~2^-24.
__device__ __forceinline__ void split3(float x0, float x1, uint32_t& hi, uint32_t& mid, uint32_t& lo) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(x0, x1);
  const float2 fh = __bfloat1622float2(h);
  const float r0 = x0 - fh.x, r1 = x1 - fh.y;
  const __nv_bfloat162 m = __floats2bfloat162_rn(r0, r1);
  const float2 fm = __bfloat1622float2(m);
  hi = bf16x2_bits(h);
  mid = bf16x2_bits(m);
  lo = bf16x2_bits(__floats2bfloat162_rn(r0 - fm.x, r1 - fm.y));
}

__global__ void __launch_bounds__(kThreads, kMmaBlocksPerSm)
    attention_mma_kernel(float* __restrict__ out, const float* __restrict__ q, const bf16* __restrict__ kc,
                         const bf16* __restrict__ vc, const int32_t* __restrict__ positions,
                         const int32_t* __restrict__ row_seq, const SeqStep* __restrict__ seqs,
                         const int32_t* __restrict__ block_tables, int block_size, int n_heads, int group,
                         float scale, int window, int64_t row0, bool per_row_splits,
                         const int32_t* __restrict__ max_position, float* __restrict__ part) {
  pdl_begin();
  extern __shared__ __align__(16) unsigned char mma_smem[];
  bf16* const kv = reinterpret_cast<bf16*>(mma_smem);                          // [S][K, V][keys][kHd]
  float* const scores = reinterpret_cast<float*>(mma_smem + kKvBytes);         // [8][kScoreStride]
  uint4* const q_hm = reinterpret_cast<uint4*>(mma_smem + kKvBytes + kScoreBytes);  // [k-step][lane] hi, mid
  uint2* const q_lo = reinterpret_cast<uint2*>(q_hm + kKSteps * 32);                // [k-step][lane] lo
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, c = lane % 4;  // fragment row (a head) and column pair
  SplitBlock b;
  if (!split_block(b, positions, row_seq, seqs, group, window, row0, per_row_splits, max_position, kMmaHeads))
    return;
  const int64_t r = b.r, j0 = b.j0, j1 = b.j1;
  const SeqStep& s = b.s;
  const int64_t kv_width = int64_t(n_heads / group) * kHd;
  const bool head_ok = g < b.nh;

  // q of head h0 + g as A fragments (rows 0-7 hi, 8-15 mid; lo in a second set) for every k-step,
  // the same in every warp: warp 0 stages them in shared memory (read after the loop's barrier)
  if (warp == 0) {
    const float* qr = q + r * int64_t(n_heads) * kHd + int64_t(b.h0 + (head_ok ? g : 0)) * kHd;
#pragma unroll 4
    for (int ks = 0; ks < kKSteps; ++ks) {
      float2 x0 = *reinterpret_cast<const float2*>(qr + 16 * ks + 2 * c);
      float2 x1 = *reinterpret_cast<const float2*>(qr + 16 * ks + 2 * c + 8);
      if (!head_ok) x0 = x1 = make_float2(0.0f, 0.0f);
      uint4 hm;
      uint2 lo;
      split3(x0.x, x0.y, hm.x, hm.y, lo.x);
      split3(x1.x, x1.y, hm.z, hm.w, lo.y);
      q_hm[ks * 32 + lane] = hm;
      q_lo[ks * 32 + lane] = lo;
    }
  }

  const int n_keys = j1 >= j0 ? int(j1 - j0 + 1) : 0;
  const int n_tiles = (n_keys + kTileKeys - 1) / kTileKeys;
  const int copy_key = tid / 8, slice = tid % 8;  // copies: 8 threads a key row, every 8th chunk
  // tile t's K and V rows into stage t % kStages; keys past the split are zero-filled (no load)
  auto issue = [&](int t) {
    if (t >= n_tiles) return;
    bf16* const kst = kv + size_t(t % kStages) * 2 * kTileElems;
    bf16* const vst = kst + kTileElems;
#pragma unroll
    for (int round = 0; round < kTileKeys / kCopyKeys; ++round) {
      const int key = copy_key + round * kCopyKeys;
      const int64_t j = j0 + int64_t(t) * kTileKeys + key;
      const bool ok = j <= j1;
      const int64_t row = ok ? cache_row(block_tables, s, block_size, j) : 0;
      const bf16* ksrc = kc + row * kv_width + int64_t(b.kvh) * kHd;
      const bf16* vsrc = vc + row * kv_width + int64_t(b.kvh) * kHd;
#pragma unroll
      for (int i = 0; i < kRowChunks / 8; ++i) {
        const int chunk = slice + 8 * i;
        cp_async16(kst + swizzled(key, chunk), ksrc + chunk * 8, ok);
        cp_async16(vst + swizzled(key, chunk), vsrc + chunk * 8, ok);
      }
    }
  };
#pragma unroll
  for (int t = 0; t < kStages - 1; ++t) {
    issue(t);
    cp_async_commit();
  }

  float m = -INFINITY, l = 0.0f;  // head g's running max and sum (the same in every warp)
  float o[kDimTiles][4];           // O[head g][dims 64 warp + 8 nt + 2c, +1]: rows g (c0, c1), g + 8 (c2, c3)
#pragma unroll
  for (int nt = 0; nt < kDimTiles; ++nt) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.0f;
  // ldmatrix lanes: matrix lane / 8, its row lane % 8
  const int mi = lane / 8, mrow = lane % 8;
  for (int t = 0; t < n_tiles; ++t) {
    cp_async_wait<kStages - 2>();  // this thread's copies of tile t have landed
    __syncthreads();               // everyone's; the stage and the scores tile t - 1 used are free
    issue(t + kStages - 1);
    cp_async_commit();
    const bf16* const kt = kv + size_t(t % kStages) * 2 * kTileElems;
    const bf16* const vt = kt + kTileElems;
    const int valid = n_keys - t * kTileKeys;  // keys of this tile in the split (> 0)
    {  // S = Q K^T for keys 16 warp .. + 15: n-tile 0 keys + 0..7, n-tile 1 keys + 8..15
      // accumulators by n-tile and k-step parity: four chains of 16 dependent mma, not two of 32
      float sc[2][2][4] = {};
      const int key = 16 * warp + (mi / 2) * 8 + mrow;
#pragma unroll
      for (int ks = 0; ks < kKSteps; ++ks) {
        uint32_t kb[4];  // b0, b1 of n-tile 0, then of n-tile 1
        ldsm_x4<false>(kb, kt + swizzled(key, 2 * ks + (mi & 1)));
        const uint4 hm = q_hm[ks * 32 + lane];
        const uint2 ql = q_lo[ks * 32 + lane];
        const uint32_t hi_mid[4] = {hm.x, hm.y, hm.z, hm.w}, lo[4] = {ql.x, 0u, ql.y, 0u};
        mma16816(sc[0][ks & 1], lo, kb[0], kb[1]);
        mma16816(sc[1][ks & 1], lo, kb[2], kb[3]);
        mma16816(sc[0][ks & 1], hi_mid, kb[0], kb[1]);
        mma16816(sc[1][ks & 1], hi_mid, kb[2], kb[3]);
      }
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        const int k0 = 16 * warp + 8 * nt + 2 * c;
        const float* ev = sc[nt][0];
        const float* od = sc[nt][1];
        const float s0 = k0 < valid ? ((ev[0] + ev[2]) + (od[0] + od[2])) * scale : -INFINITY;
        const float s1 = k0 + 1 < valid ? ((ev[1] + ev[3]) + (od[1] + od[3])) * scale : -INFINITY;
        *reinterpret_cast<float2*>(scores + g * kScoreStride + k0) = make_float2(s0, s1);
      }
    }
    __syncthreads();
    // online softmax for head g over the tile: this lane's keys 16 ks + 2c + {0, 1, 8, 9}
    uint32_t pa[4][4], pl[4][2];
    {
      float sv[4][4];
      float tmax = -INFINITY;
#pragma unroll
      for (int ks = 0; ks < 4; ++ks) {
        const float2 x0 = *reinterpret_cast<const float2*>(scores + g * kScoreStride + 16 * ks + 2 * c);
        const float2 x1 = *reinterpret_cast<const float2*>(scores + g * kScoreStride + 16 * ks + 2 * c + 8);
        sv[ks][0] = x0.x, sv[ks][1] = x0.y, sv[ks][2] = x1.x, sv[ks][3] = x1.y;
#pragma unroll
        for (int e = 0; e < 4; ++e) tmax = fmaxf(tmax, sv[ks][e]);
      }
      tmax = fmaxf(tmax, __shfl_xor_sync(kFullMask, tmax, 1));
      tmax = fmaxf(tmax, __shfl_xor_sync(kFullMask, tmax, 2));
      const float m_new = fmaxf(m, tmax);  // finite: the tile holds a valid key
      const float corr = expf(m - m_new);  // 0 on the first tile (m = -inf), 1 while the max holds
      float psum = 0.0f;
#pragma unroll
      for (int ks = 0; ks < 4; ++ks) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          sv[ks][e] = expf(sv[ks][e] - m_new);  // -inf (past the split): 0
          psum += sv[ks][e];
        }
        split3(sv[ks][0], sv[ks][1], pa[ks][0], pa[ks][1], pl[ks][0]);
        split3(sv[ks][2], sv[ks][3], pa[ks][2], pa[ks][3], pl[ks][1]);
      }
      psum += __shfl_xor_sync(kFullMask, psum, 1);
      psum += __shfl_xor_sync(kFullMask, psum, 2);
      l = l * corr + psum;
      m = m_new;
#pragma unroll
      for (int nt = 0; nt < kDimTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[nt][e] *= corr;
    }
    // O += P V over the tile's 4 k-steps of 16 keys, this warp's dims
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      const uint32_t lo[4] = {pl[ks][0], 0u, pl[ks][1], 0u};
      const int key = 16 * ks + (mi & 1) * 8 + mrow;
#pragma unroll
      for (int np = 0; np < kDimTiles / 2; ++np) {
        uint32_t vb[4];  // b0, b1 of n-tile 2np, then of 2np + 1
        ldsm_x4<true>(vb, vt + swizzled(key, kWarpDims / 8 * warp + 2 * np + mi / 2));
        mma16816(o[2 * np], lo, vb[0], vb[1]);
        mma16816(o[2 * np + 1], lo, vb[2], vb[3]);
        mma16816(o[2 * np], pa[ks], vb[0], vb[1]);
        mma16816(o[2 * np + 1], pa[ks], vb[2], vb[3]);
      }
    }
  }
  cp_async_wait<0>();  // no copy outlives the block (the issued tiles past n_tiles are none)
  if (!head_ok) return;
  const int h = b.h0 + g;
  if (b.n_splits == 1) {
    const float inv = 1.0f / l;
    float* orow = out + r * int64_t(n_heads) * kHd + int64_t(h) * kHd;
#pragma unroll
    for (int nt = 0; nt < kDimTiles; ++nt)
      *reinterpret_cast<float2*>(orow + kWarpDims * warp + 8 * nt + 2 * c) =
          make_float2((o[nt][0] + o[nt][2]) * inv, (o[nt][1] + o[nt][3]) * inv);
    return;
  }
  float* pp = part + ((int64_t(blockIdx.x) * n_heads + h) * int64_t(gridDim.z) + b.split) * (kHd + 2);
  if (warp == 0 && c == 0) {
    pp[0] = m;  // -inf when this split holds no keys (then the sum and O are 0)
    pp[1] = l;
  }
#pragma unroll
  for (int nt = 0; nt < kDimTiles; ++nt) {
    const int d = kWarpDims * warp + 8 * nt + 2 * c;
    pp[2 + d] = o[nt][0] + o[nt][2];
    pp[3 + d] = o[nt][1] + o[nt][3];
  }
}

// KESTREL_CUDA_MMA_DECODE: unset or 1 on, 0 off (the tile kernel for every BF16 decode).
bool mma_decode_env() {
  static const bool on = [] {
    const char* env = std::getenv("KESTREL_CUDA_MMA_DECODE");
    if (!env) return true;
    KCHECK_MSG(std::strcmp(env, "0") == 0 || std::strcmp(env, "1") == 0,
               "KESTREL_CUDA_MMA_DECODE must be 0 or 1, not '", env, "'");
    return env[0] == '1';
  }();
  return on;
}

}  // namespace

bool attention_mma_applies(const Context& ctx, DType cache_dtype, int64_t head_dim) {
  return cache_dtype == DType::kBF16 && head_dim == kHd && ctx.matmul_precision != MatmulPrecision::kExact &&
         mma_decode_env();
}

void launch_attention_mma(const Context& ctx, dim3 grid, const Tensor& out, const Tensor& q,
                          const KvLayerView& cache, const AttentionParams& p, int64_t row0, bool per_row_splits,
                          float* part) {
  KCHECK_MSG(p.head_dim == kHd && cache.k.dtype == DType::kBF16, "attention mma: head_dim ", p.head_dim,
             " over a ", dtype_name(cache.k.dtype), " cache (the kernel takes head_dim 256 over BF16)");
  static const bool configured = [] {
    CUDA_CHECK(
        cudaFuncSetAttribute(attention_mma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kBytes)));
    return true;
  }();
  (void)configured;
  launch(attention_mma_kernel, grid, kThreads, kBytes, ctx.stream, out.f32(), q.f32(),
         static_cast<const bf16*>(cache.k.data), static_cast<const bf16*>(cache.v.data), ctx.step.positions,
         ctx.step.row_seq, ctx.step.seqs, ctx.step.block_tables, ctx.step.block_size, p.n_heads,
         p.n_heads / p.n_kv_heads, p.scale, p.window, row0, per_row_splits, ctx.step.max_position, part);
  CUDA_CHECK_LAUNCH();
}

}  // namespace kestrel::cuda
