// attention_prefill: the tiled (flash) attention kernel for steps with long prefill chunks, on
// the write-first paged path of attention.cu (the step's k/v already sit in the cache).
//
// Rows. A block owns kRows = 64 packed rows: the query heads of one KV head (a GQA group of G
// heads) for 64 / G consecutive new tokens of one sequence, token-major (row r is token r / G,
// head kvh * G + r % G). Every key tile the block loads then serves all G heads, and the rows of
// a tile span few positions, so little of a causal tile is masked away. Its 4 warps own 16 rows
// each. Groups of more than 64 heads take the split-KV kernel (attention_prefill_applies).
//
// Keys. First kv_copy_kernel copies the keys each sequence attends (every KV head) from the paged
// cache (F32, or BF16) into BF16 terms, contiguous per sequence (groups of sequences within a
// budget). The keys a row attends are cut into segments of kSegKeys positions on an absolute
// grid; a block handles one segment (grid z: KV head x segment slot), walking it in key tiles of kBc positions
// (64, or 32 for head_dim 256 and for the split precisions, to fit two stages in shared memory)
// streamed from the copy by cp.async, the next tile's copy in flight while the current one is
// computed. Segments fill the GPU when a chunk has few rows and a long past. Each block writes its rows' partial results (unnormalized O, the
// running max m and sum l) to scratch; fold_kernel combines a row's segments in increasing order
// (skipping empty ones) and normalizes.
//
// Products. S = Q K^T and O += P V run on the tensor cores (mma.sync m16n8k16, BF16 in, F32
// accumulate), operands staged by ldmatrix; O, m and l stay in registers. The softmax runs in F32
// in the log2 domain (scores times scale * log2 e, exp2). Precision, by the matmul precision
// (attention_prefill_applies): with kBf16 each operand is one BF16 term (unit roundoff 2^-9); with
// the multi-term precisions (kBf16x3, the default, and kBf16x2) each operand is split into
// hi = bf16(x) and lo = bf16(x - hi) and a product is a_lo b_hi + a_hi b_lo + a_hi b_hi: ~2^-16
// relative per product, three times the tensor-core work. kExact keeps the F32 split-KV kernel of
// attention.cu.
//
// Invariance. A key tile that masks all of a row's keys leaves that row's m, l and O bit-identical
// (p = 0, rescale factor exactly 1); rows never mix in the mma; segments and key tiles sit on an
// absolute grid; the fold runs over a row's non-empty segments in order. So a row's result
// depends only on its position, its q and the cache, not on which rows share its tile or step:
// prefill split anywhere among steps that take this kernel gives bit-identical rows.
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/attention_prefill.h"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/mma.cuh"
#include "ops/attention_prefill_limits.h"

namespace kestrel::cuda {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kRows = 64;          // packed (token, head) rows per block
constexpr int kWarps = 4;          // 16 rows each
using attention_prefill::kCopyBudget;
using attention_prefill::kMinRows;
using attention_prefill::kPartialBudget;
using attention_prefill::kSegKeys;
std::atomic<size_t> g_partial_budget{kPartialBudget};  // set_attention_prefill_budgets
std::atomic<size_t> g_copy_budget{kCopyBudget};
constexpr float kLog2e = 1.4426950408889634f;

// Shared memory for head size HD, each BF16 operand once (SPLIT false) or as a hi/lo pair. Row
// stride HD + 8 elements: 16 bytes past a multiple of 128, so ldmatrix's 8 row reads hit distinct
// banks.
// K and V tiles are double-buffered (stage st at k + st * stage): the next tile's copy runs
// during the current tile's products.
template <int HD, bool SPLIT>
struct Layout {
  static constexpr int bc = (SPLIT || HD == 256) ? 32 : 64;  // keys per key tile
  static constexpr int terms = SPLIT ? 2 : 1;
  static constexpr int ld = HD + 8;
  static constexpr size_t q_term = size_t(kRows) * ld * sizeof(bf16);
  static constexpr size_t kv_term = size_t(bc) * ld * sizeof(bf16);
  static constexpr size_t q = 0;
  static constexpr size_t k = q + terms * q_term;  // stage 0: K terms, then V terms
  static constexpr size_t stage = 2 * terms * kv_term;
  static constexpr size_t pos = k + 2 * stage;
  static constexpr size_t bytes = pos + kRows * sizeof(int);
  // blocks an SM holds (the register budget follows): split head_dim 256 needs 198 KB
  static constexpr int blocks_per_sm = bytes <= 113 * 1024 ? 2 : 1;
};
static_assert(Layout<256, true>::bytes <= 227 * 1024, "split head_dim 256 must fit one SM's shared memory");
static_assert(Layout<256, false>::bytes <= 113 * 1024, "head_dim 256 should leave room for two blocks an SM");
static_assert(Layout<128, true>::bytes <= 113 * 1024, "split head_dim 128 should leave room for two blocks an SM");
static_assert(kSegKeys % 64 == 0, "segments hold whole key tiles");

// Stores 4 floats as BF16 at hi (8-byte aligned), and with SPLIT their remainders x - bf16(x),
// rounded to BF16, at lo: hi + lo carries ~16 significant bits of x.
template <bool SPLIT>
__device__ __forceinline__ void store_terms(bf16* hi, bf16* lo, float4 x) {
  const __nv_bfloat162 a = __floats2bfloat162_rn(x.x, x.y), b = __floats2bfloat162_rn(x.z, x.w);
  reinterpret_cast<__nv_bfloat162*>(hi)[0] = a;
  reinterpret_cast<__nv_bfloat162*>(hi)[1] = b;
  if constexpr (SPLIT) {
    const float2 fa = __bfloat1622float2(a), fb = __bfloat1622float2(b);
    reinterpret_cast<__nv_bfloat162*>(lo)[0] = __floats2bfloat162_rn(x.x - fa.x, x.y - fa.y);
    reinterpret_cast<__nv_bfloat162*>(lo)[1] = __floats2bfloat162_rn(x.z - fb.x, x.w - fb.y);
  }
}

// Four consecutive cache elements (16-byte aligned F32, 8-byte aligned BF16) as floats.
__device__ __forceinline__ float4 load4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ float4 load4(const bf16* p) {
  const uint2 u = *reinterpret_cast<const uint2*>(p);
  const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.x));
  const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.y));
  return make_float4(a.x, a.y, b.x, b.y);
}

// d += a b over the terms: with SPLIT, a_lo b_hi + a_hi b_lo + a_hi b_hi (the small terms first;
// the missing a_lo b_lo and the split's remainders are ~2^-16 relative).
template <bool SPLIT>
__device__ __forceinline__ void mma_terms(float (&d)[4], const uint32_t (&a_hi)[4], const uint32_t (&a_lo)[4],
                                          uint32_t bh0, uint32_t bh1, uint32_t bl0, uint32_t bl1) {
  if constexpr (SPLIT) {
    mma16816(d, a_lo, bh0, bh1);
    mma16816(d, a_hi, bl0, bl1);
  }
  mma16816(d, a_hi, bh0, bh1);
}

// Splits p into BF16 hi (and with SPLIT lo = bf16(p - hi)) packed pairs; returns hi + lo of both.
template <bool SPLIT>
__device__ __forceinline__ float split_pair(float p0, float p1, uint32_t& hi, uint32_t& lo) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(p0, p1);
  hi = *reinterpret_cast<const uint32_t*>(&h);
  const float2 fh = __bfloat1622float2(h);
  float used = fh.x + fh.y;
  if constexpr (SPLIT) {
    const __nv_bfloat162 l = __floats2bfloat162_rn(p0 - fh.x, p1 - fh.y);
    lo = *reinterpret_cast<const uint32_t*>(&l);
    const float2 fl = __bfloat1622float2(l);
    used += fl.x + fl.y;
  } else {
    lo = 0;
  }
  return used;
}

// Where a sequence's attended keys [first, first + n) sit in the BF16 copy: row base + (key - first).
struct KeyRange {
  int64_t base;
  int32_t first, n;
};

// The BF16 copy of the keys and values a group of sequences attends, as planes [term][K, V][n_kv]
// [keys][HD]: plane (t, w) at kv + ((t * 2 + w) * n_kv) * keys * HD.
struct KvCopy {
  bf16* kv;
  const KeyRange* ranges;  // [the group's sequences]
  int64_t keys;            // rows per plane
  int n_kv;
  __device__ __forceinline__ bf16* row(int t, int w, int kvh, int64_t r, int hd) const {
    return kv + ((int64_t(t * 2 + w) * n_kv + kvh) * keys + r) * hd;
  }
};

// grid: (ceil(max keys / 8), the group's sequences); block: 256. Converts 8 keys of a sequence's
// range (every KV head) from the paged cache (F32, or BF16: then its lo terms are zero) into the
// copy's BF16 terms.
template <bool SPLIT, typename C>
__global__ void kv_copy_kernel(KvCopy c, const C* __restrict__ kc, const C* __restrict__ vc,
                               const SeqStep* __restrict__ seqs, const int32_t* __restrict__ block_tables,
                               int block_size, int hd) {
  pdl_begin();
  const KeyRange rg = c.ranges[blockIdx.y];
  const SeqStep s = seqs[blockIdx.y];
  const int width = c.n_kv * hd, vec = width / 4;
  for (int i = threadIdx.x; i < 8 * vec; i += blockDim.x) {
    const int kr = int(blockIdx.x) * 8 + i / vec;
    if (kr >= rg.n) break;
    const int col = (i % vec) * 4, kvh = col / hd, d = col % hd;
    const int j = rg.first + kr;
    const int64_t cache_row = int64_t(block_tables[s.table_begin + j / block_size]) * block_size + j % block_size;
    const float4 kx = load4(kc + cache_row * width + col);
    const float4 vx = load4(vc + cache_row * width + col);
    const int64_t r = rg.base + kr;
    store_terms<SPLIT>(c.row(0, 0, kvh, r, hd) + d, SPLIT ? c.row(1, 0, kvh, r, hd) + d : nullptr, kx);
    store_terms<SPLIT>(c.row(0, 1, kvh, r, hd) + d, SPLIT ? c.row(1, 1, kvh, r, hd) + d : nullptr, vx);
  }
}

struct PrefillArgs {
  float* part_o;   // [slots, T, n_heads, HD] unnormalized outputs
  float* part_ml;  // [slots, T, n_heads, 2] running max (log2 domain) and sum; sum 0: no keys
  const float* q;  // [T, n_heads * HD]
  KvCopy kv;
  const int32_t* positions;
  const SeqStep* seqs;  // the group's first sequence
  int n_heads, group, n_slots, slot0;
  int64_t T;
  float scale_log2;  // scale * log2(e)
  int window;
};

// grid: (token tiles, n_seqs, n_kv * n_slots); block: kWarps warps; dynamic smem Layout::bytes.
template <int HD, bool SPLIT>
__global__ void __launch_bounds__(kWarps * 32, Layout<HD, SPLIT>::blocks_per_sm) flash_prefill_kernel(const PrefillArgs a) {
  pdl_begin();
  using L = Layout<HD, SPLIT>;
  constexpr int kBc = L::bc, kLd = L::ld, kT = L::terms;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* qs = reinterpret_cast<bf16*>(smem + L::q);  // term t at + t * kRows * kLd
  int* rpos = reinterpret_cast<int*>(smem + L::pos);  // row positions, -1 for rows past the tile's

  const SeqStep s = a.seqs[blockIdx.y];
  const int G = a.group, tpt = kRows / G;  // heads per KV head, tokens per tile
  const int t0 = int(blockIdx.x) * tpt;
  if (t0 >= s.n_tokens) return;
  const int n_rows = min(tpt, s.n_tokens - t0) * G;
  const int kvh = int(blockIdx.z) / a.n_slots, zl = int(blockIdx.z) % a.n_slots;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t q_width = int64_t(a.n_heads) * HD;
  const KeyRange range = a.kv.ranges[blockIdx.y];
  const int64_t r0 = int64_t(s.row_begin) + t0;  // the tile's first step row

  for (int r = tid; r < kRows; r += kWarps * 32) rpos[r] = r < n_rows ? a.positions[r0 + r / G] : -1;
  constexpr int kVec = HD / 4;  // float4s per row
  for (int i = tid; i < kRows * kVec; i += kWarps * 32) {
    const int r = i / kVec, c = (i % kVec) * 4;
    float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
    if (r < n_rows)
      x = *reinterpret_cast<const float4*>(a.q + (r0 + r / G) * q_width + int64_t(kvh * G + r % G) * HD + c);
    store_terms<SPLIT>(qs + r * kLd + c, qs + (kT - 1) * kRows * kLd + r * kLd + c, x);
  }
  __syncthreads();

  // The tile's key range and each warp's (to skip key tiles that mask all of its rows).
  int lo = INT32_MAX, hi = -1, wlo = INT32_MAX, whi = -1;
  for (int r = 0; r < n_rows; ++r) {
    const int pos = rpos[r], f = int(first_key(pos, a.window));
    lo = min(lo, f);
    hi = max(hi, pos);
    if (r / 16 == warp) {
      wlo = min(wlo, f);
      whi = max(whi, pos);
    }
  }
  // This block's segment, and where its rows' partials go.
  const int seg_begin = (lo / kSegKeys + a.slot0 + zl) * kSegKeys, seg_last = seg_begin + kSegKeys - 1;
  const int g = lane >> 2, t = lane & 3;  // mma fragment coordinates: row g (and g + 8), column pair 2t
  const int wrow = warp * 16;
  int row_pos[2], row_first[2];
  for (int i = 0; i < 2; ++i) {
    row_pos[i] = rpos[wrow + g + 8 * i];
    row_first[i] = row_pos[i] >= 0 ? int(first_key(row_pos[i], a.window)) : INT32_MAX;
  }
  auto partial_index = [&](int r) {  // (slot, step row, head) of packed row r
    return (int64_t(zl) * a.T + r0 + r / G) * a.n_heads + kvh * G + r % G;
  };

  float o[HD / 8][4];
#pragma unroll
  for (int n = 0; n < HD / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  const int k_first = max(lo, seg_begin), k_last = min(hi, seg_last);
  const int jt0 = (k_first / kBc) * kBc, n_tiles = k_first <= k_last ? (k_last - jt0) / kBc + 1 : 0;
  // Stage st's K (w = 0) or V (w = 1) term t.
  auto tile = [&](int st, int w, int t) {
    return reinterpret_cast<bf16*>(smem + L::k + st * L::stage) + (w * kT + t) * kBc * kLd;
  };
  // Copies key tile jt into stage st (rows outside [k_first, k_last]: zeros, never read from the
  // copy), as one commit group.
  auto load_tile = [&](int jt, int st) {
    constexpr int kChunks = HD / 8;  // 16-byte pieces per row
#pragma unroll 4
    for (int i = tid; i < kBc * kChunks; i += kWarps * 32) {
      const int r = i / kChunks, c = (i % kChunks) * 8, j = jt + r;
      const bool ok = j >= k_first && j <= k_last;
      const int64_t row = range.base + (ok ? j - range.first : 0);
#pragma unroll
      for (int w = 0; w < 2; ++w)
#pragma unroll
        for (int t = 0; t < kT; ++t) cp_async16(tile(st, w, t) + r * kLd + c, a.kv.row(t, w, kvh, row, HD) + c, ok);
    }
    cp_async_commit();
  };

  if (n_tiles > 0) load_tile(jt0, 0);
  for (int it = 0; it < n_tiles; ++it) {
    const int jt = jt0 + it * kBc, st = it & 1;
    if (it + 1 < n_tiles) {  // the next tile into the other stage (free: the loop's last barrier)
      load_tile(jt + kBc, st ^ 1);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // this tile is in shared memory for every warp
    if (whi < jt || wlo > jt + kBc - 1) {  // every row of this warp masks the whole tile
      __syncthreads();
      continue;
    }
    const bf16* ks = tile(st, 0, 0);
    const bf16* vs = tile(st, 1, 0);

    // S = Q K^T: the warp's 16 rows x kBc keys, n-tile n holds keys jt + 8n ...
    float sc[kBc / 8][4];
#pragma unroll
    for (int n = 0; n < kBc / 8; ++n) sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.0f;
#pragma unroll 2
    for (int kk = 0; kk < HD / 16; ++kk) {
      uint32_t qa[kT][4];
      const int qoff = (wrow + (lane & 15)) * kLd + kk * 16 + (lane >> 4) * 8;
#pragma unroll
      for (int tt = 0; tt < kT; ++tt) ldsm_x4<false>(qa[tt], qs + tt * kRows * kLd + qoff);
#pragma unroll
      for (int np = 0; np < kBc / 16; ++np) {
        const int koff = (np * 16 + (lane & 7) + (lane >> 4) * 8) * kLd + kk * 16 + ((lane >> 3) & 1) * 8;
        uint32_t kh[4], kl[4];
        ldsm_x4<false>(kh, ks + koff);
        if constexpr (SPLIT) ldsm_x4<false>(kl, ks + kBc * kLd + koff);
        else kl[0] = kl[1] = kl[2] = kl[3] = 0;
        mma_terms<SPLIT>(sc[2 * np], qa[0], qa[kT - 1], kh[0], kh[1], kl[0], kl[1]);
        mma_terms<SPLIT>(sc[2 * np + 1], qa[0], qa[kT - 1], kh[2], kh[3], kl[2], kl[3]);
      }
    }

    // Online softmax for rows g (i = 0) and g + 8 (i = 1); a quad of lanes shares a row.
    float corr[2], used[2] = {0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float mx = -INFINITY;
#pragma unroll
      for (int n = 0; n < kBc / 8; ++n)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int j = jt + 8 * n + 2 * t + e;
          const bool ok = j >= row_first[i] && j <= row_pos[i];
          const float x = ok ? sc[n][2 * i + e] * a.scale_log2 : -INFINITY;
          sc[n][2 * i + e] = x;
          mx = fmaxf(mx, x);
        }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[i], mx);
      // exactly 1 when the max holds (a fully masked tile leaves the row bit-identical)
      corr[i] = m_new == -INFINITY ? 1.0f : exp2f(m[i] - m_new);
      m[i] = m_new;
#pragma unroll
      for (int n = 0; n < kBc / 8; ++n)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float x = sc[n][2 * i + e];
          sc[n][2 * i + e] = x == -INFINITY ? 0.0f : exp2f(x - m_new);
        }
    }
    // P as A fragments (the accumulator layout of two n-tiles is the A layout of one k-step).
    uint32_t ph[kBc / 16][4], pl[kBc / 16][4];
#pragma unroll
    for (int kk = 0; kk < kBc / 16; ++kk) {
      used[0] += split_pair<SPLIT>(sc[2 * kk][0], sc[2 * kk][1], ph[kk][0], pl[kk][0]);
      used[1] += split_pair<SPLIT>(sc[2 * kk][2], sc[2 * kk][3], ph[kk][1], pl[kk][1]);
      used[0] += split_pair<SPLIT>(sc[2 * kk + 1][0], sc[2 * kk + 1][1], ph[kk][2], pl[kk][2]);
      used[1] += split_pair<SPLIT>(sc[2 * kk + 1][2], sc[2 * kk + 1][3], ph[kk][3], pl[kk][3]);
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) l[i] = l[i] * corr[i] + used[i];  // this lane's share of the row sum
#pragma unroll
    for (int n = 0; n < HD / 8; ++n) {
      o[n][0] *= corr[0];
      o[n][1] *= corr[0];
      o[n][2] *= corr[1];
      o[n][3] *= corr[1];
    }

    // O += P V: d-tile n holds output columns 8n ...
#pragma unroll
    for (int kk = 0; kk < kBc / 16; ++kk) {
#pragma unroll
      for (int dp = 0; dp < HD / 16; ++dp) {
        const int voff = (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * kLd + dp * 16 + (lane >> 4) * 8;
        uint32_t vh[4], vl[4];
        ldsm_x4<true>(vh, vs + voff);
        if constexpr (SPLIT) ldsm_x4<true>(vl, vs + kBc * kLd + voff);
        else vl[0] = vl[1] = vl[2] = vl[3] = 0;
        mma_terms<SPLIT>(o[2 * dp], ph[kk], pl[kk], vh[0], vh[1], vl[0], vl[1]);
        mma_terms<SPLIT>(o[2 * dp + 1], ph[kk], pl[kk], vh[2], vh[3], vl[2], vl[3]);
      }
    }
    __syncthreads();  // every warp is done with stage st before the next iteration refills it
  }

  // The quad's shares of each row sum, then the partials of the warp's valid rows.
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = wrow + g + 8 * i;
    if (row_pos[i] < 0) continue;
    const int64_t pi = partial_index(r);
    if (t == 0) reinterpret_cast<float2*>(a.part_ml)[pi] = make_float2(m[i], l[i]);
    if (l[i] == 0.0f) continue;  // no keys of this row in the segment: the fold skips it
    float* po = a.part_o + pi * HD;
#pragma unroll
    for (int n = 0; n < HD / 8; ++n)
      *reinterpret_cast<float2*>(po + 8 * n + 2 * t) = make_float2(o[n][2 * i], o[n][2 * i + 1]);
  }
}

// Folds slots [0, n_slots) of each (row, head) into the running state (max M and sum L in
// state_ml, unnormalized O in out) in slot order, skipping empty ones; `first` starts the state,
// `last` normalizes into out. The fold's arithmetic is the same however the slots are split over
// launches. grid: (rows from row0, n_heads); block: 64 threads.
__global__ void fold_kernel(float* __restrict__ out, float* __restrict__ state_ml, const float* __restrict__ part_o,
                            const float* __restrict__ part_ml, int64_t T, int64_t row0, int n_heads, int hd,
                            int n_slots, bool first, bool last) {
  pdl_begin();
  const int64_t rh = (row0 + blockIdx.x) * n_heads + blockIdx.y;
  float* o = out + rh * hd;
  float M = first ? -INFINITY : state_ml[2 * rh], Lsum = first ? 0.0f : state_ml[2 * rh + 1];
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float acc = first ? 0.0f : o[d], m_run = M;
    for (int z = 0; z < n_slots; ++z) {
      const float2 ml = reinterpret_cast<const float2*>(part_ml)[int64_t(z) * T * n_heads + rh];
      if (ml.y == 0.0f) continue;
      const float m_new = fmaxf(m_run, ml.x);
      acc = acc * exp2f(m_run - m_new) + part_o[(int64_t(z) * T * n_heads + rh) * hd + d] * exp2f(ml.x - m_new);
      m_run = m_new;
    }
    o[d] = acc;
  }
  for (int z = 0; z < n_slots; ++z) {
    const float2 ml = reinterpret_cast<const float2*>(part_ml)[int64_t(z) * T * n_heads + rh];
    if (ml.y == 0.0f) continue;
    const float m_new = fmaxf(M, ml.x);
    Lsum = Lsum * exp2f(M - m_new) + ml.y * exp2f(ml.x - m_new);
    M = m_new;
  }
  if (last) {  // each thread normalizes the columns it folded
    const float inv = 1.0f / Lsum;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) o[d] *= inv;
  } else if (threadIdx.x == 0) {
    state_ml[2 * rh] = M;
    state_ml[2 * rh + 1] = Lsum;
  }
}

// The sequences [s0, s1) of the step (rows [row0, row1)): their attended keys copied to BF16,
// the tiled kernel over their rows in launches of up to per_launch segment slots, each folded.
template <int HD, bool SPLIT>
void run_group(const Context& ctx, const Tensor& out, const Tensor& q, const KvLayerView& cache,
               const AttentionParams& p, const StepPlan& plan, size_t s0, size_t s1,
               const std::vector<KeyRange>& ranges) {
  using L = Layout<HD, SPLIT>;
  const int G = p.n_heads / p.n_kv_heads, n_kv = p.n_kv_heads;
  const int64_t T = plan.n_rows();
  const int64_t row0 = plan.seqs[s0].row_begin, row1 = plan.seqs[s1 - 1].row_begin + plan.seqs[s1 - 1].n_tokens;
  // Token tiles and segment slots: a tile's keys lie within its sequence's range, so the range's
  // segment count bounds every tile's.
  int32_t max_tokens = 0, n_slots = 1, max_keys = 0;
  int64_t keys = 0;
  for (size_t i = s0; i < s1; ++i) {
    const KeyRange& r = ranges[i];
    max_tokens = std::max(max_tokens, plan.seqs[i].n_tokens);
    max_keys = std::max(max_keys, r.n);
    n_slots = std::max(n_slots, (r.first + r.n - 1) / kSegKeys - r.first / kSegKeys + 1);
    keys += r.n;
  }
  std::vector<KeyRange> group(ranges.begin() + int64_t(s0), ranges.begin() + int64_t(s1));
  for (KeyRange& r : group) r.base -= ranges[s0].base;
  const auto* ranges_dev =
      static_cast<const KeyRange*>(ctx.upload_scratch(kSlotAttnKeys, group.data(), group.size() * sizeof(KeyRange)));
  const size_t copy_bytes = size_t(L::terms) * 2 * size_t(n_kv) * size_t(keys) * HD * sizeof(bf16);
  const KvCopy kv{.kv = static_cast<bf16*>(ctx.scratch->get(kSlotAttnBf16, copy_bytes)),
                  .ranges = ranges_dev,
                  .keys = keys,
                  .n_kv = n_kv};
  dispatch_kv_cache(cache.k, cache.v, "attention_prefill", [&]<typename C>() {
    launch(kv_copy_kernel<SPLIT, C>, dim3(unsigned(ceil_div(max_keys, 8)), unsigned(s1 - s0)), 256, 0, ctx.stream, kv,
           static_cast<const C*>(cache.k.data), static_cast<const C*>(cache.v.data), ctx.step.seqs + s0,
           ctx.step.block_tables, ctx.step.block_size, HD);
    CUDA_CHECK_LAUNCH();
  });

  // Slots per launch: the partial results of one launch within the budget (at least one slot),
  // and KV heads x slots within the grid's z limit.
  const size_t slot_bytes = size_t(T) * size_t(p.n_heads) * size_t(HD + 2) * sizeof(float);
  int per_launch = int(std::clamp<size_t>(g_partial_budget.load() / slot_bytes, 1, size_t(n_slots)));
  per_launch = std::max(1, std::min(per_launch, 65535 / n_kv));
  const size_t o_floats = size_t(per_launch) * size_t(T) * size_t(p.n_heads) * HD;
  const size_t ml_floats = size_t(per_launch) * size_t(T) * size_t(p.n_heads) * 2;
  const size_t state_floats = n_slots > per_launch ? size_t(T) * size_t(p.n_heads) * 2 : 0;
  float* base =
      static_cast<float*>(ctx.scratch->get(kSlotAttnPartial, (o_floats + ml_floats + state_floats) * sizeof(float)));
  PrefillArgs a{.part_o = base,
                .part_ml = base + o_floats,
                .q = q.f32(),
                .kv = kv,
                .positions = ctx.step.positions,
                .seqs = ctx.step.seqs + s0,
                .n_heads = p.n_heads,
                .group = G,
                .n_slots = 0,
                .slot0 = 0,
                .T = T,
                .scale_log2 = p.scale * kLog2e,
                .window = p.window};
  float* state = base + o_floats + ml_floats;
  for (int slot0 = 0; slot0 < n_slots; slot0 += per_launch) {
    a.slot0 = slot0;
    a.n_slots = std::min(per_launch, n_slots - slot0);
    dim3 grid(unsigned(ceil_div(max_tokens, kRows / G)), unsigned(s1 - s0), unsigned(n_kv * a.n_slots));
    launch(flash_prefill_kernel<HD, SPLIT>, grid, kWarps * 32, L::bytes, ctx.stream, a);
    CUDA_CHECK_LAUNCH();
    launch(fold_kernel, dim3(unsigned(row1 - row0), unsigned(p.n_heads)), 64, 0, ctx.stream, out.f32(), state, a.part_o,
           a.part_ml, T, row0, p.n_heads, HD, a.n_slots, slot0 == 0, slot0 + a.n_slots >= n_slots);
    CUDA_CHECK_LAUNCH();
  }
}

template <int HD, bool SPLIT>
void launch_for(const Context& ctx, const Tensor& out, const Tensor& q, const KvLayerView& cache,
                const AttentionParams& p, const StepPlan& plan) {
  static const bool configured = [] {
    CUDA_CHECK(cudaFuncSetAttribute(flash_prefill_kernel<HD, SPLIT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(Layout<HD, SPLIT>::bytes)));
    return true;
  }();
  (void)configured;
  // Each sequence's attended keys: [first key of its smallest position, its largest position].
  std::vector<KeyRange> ranges(plan.seqs.size());
  int64_t base = 0;
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    const SeqStep& s = plan.seqs[i];
    int32_t lo_pos = INT32_MAX, hi_pos = -1;
    for (int32_t r = s.row_begin; r < s.row_begin + s.n_tokens; ++r) {
      lo_pos = std::min(lo_pos, plan.positions[size_t(r)]);
      hi_pos = std::max(hi_pos, plan.positions[size_t(r)]);
    }
    const int32_t first = int32_t(first_key(lo_pos, p.window));
    ranges[i] = KeyRange{.base = base, .first = first, .n = hi_pos - first + 1};
    base += ranges[i].n;
  }
  // Groups of consecutive sequences whose BF16 copy fits kCopyBudget (a sequence larger than that
  // alone); a row's results do not depend on the grouping.
  const size_t key_bytes = size_t(Layout<HD, SPLIT>::terms) * 2 * size_t(p.n_kv_heads) * HD * sizeof(bf16);
  size_t s0 = 0;
  while (s0 < plan.seqs.size()) {
    size_t s1 = s0 + 1;
    size_t bytes = size_t(ranges[s0].n) * key_bytes;
    while (s1 < plan.seqs.size() && bytes + size_t(ranges[s1].n) * key_bytes <= g_copy_budget.load()) {
      bytes += size_t(ranges[s1].n) * key_bytes;
      ++s1;
    }
    run_group<HD, SPLIT>(ctx, out, q, cache, p, plan, s0, s1, ranges);
    s0 = s1;
  }
}

template <bool SPLIT>
void launch_for_head_dim(const Context& ctx, const Tensor& out, const Tensor& q, const KvLayerView& cache,
                         const AttentionParams& p, const StepPlan& plan) {
  switch (p.head_dim) {
    case 64: launch_for<64, SPLIT>(ctx, out, q, cache, p, plan); break;
    case 128: launch_for<128, SPLIT>(ctx, out, q, cache, p, plan); break;
    default: launch_for<256, SPLIT>(ctx, out, q, cache, p, plan); break;
  }
}

// -1: KESTREL_CUDA_TILED_ATTENTION unset, 0: off, 1: on.
int tiled_attention_env() {
  static const int forced = [] {
    const char* env = std::getenv("KESTREL_CUDA_TILED_ATTENTION");
    if (!env) return -1;
    KCHECK_MSG(std::strcmp(env, "0") == 0 || std::strcmp(env, "1") == 0,
               "KESTREL_CUDA_TILED_ATTENTION must be 0 or 1, not '", env, "'");
    return env[0] == '1' ? 1 : 0;
  }();
  return forced;
}

// The split (hi/lo) products go with the matmuls' multi-term precisions, single BF16 terms with
// kBf16; kExact keeps the F32 split-KV kernel, as it keeps the F32 GEMV for every matmul.
bool split_terms(const Context& ctx) { return ctx.matmul_precision != MatmulPrecision::kBf16; }

}  // namespace

bool attention_prefill_applies(const Context& ctx, const Tensor& q, const KvLayerView& cache,
                               const AttentionParams& p, const StepPlan& plan) {
  // Single BF16 products move the tiny fixtures' logits by ~3e-3 of their RMS and flipped a
  // near-tied MoE routing in qwen3_5_moe's 300-token prompt (kestrel parity: 0.68 > 2e-2), so at
  // the default (multi-term) precisions the products take hi/lo terms (~2^-16 relative).
  // KESTREL_CUDA_TILED_ATTENTION=0 turns the kernel off (the split-KV F32 kernel for every step).
  const int forced = tiled_attention_env();
  const bool enabled = forced >= 0 ? forced == 1 : ctx.matmul_precision != MatmulPrecision::kExact;
  if (!enabled || ctx.deterministic) return false;  // deterministic mode keeps the split-KV kernels
  if (p.head_dim != 64 && p.head_dim != 128 && p.head_dim != 256) return false;
  if (p.n_heads / p.n_kv_heads > kRows) return false;  // a GQA group must fit one tile's rows
  if (plan.seqs.size() > 65535 || p.n_kv_heads > 65535) return false;
  if (!aligned16(q.data) || !aligned16(cache.k.data) || !aligned16(cache.v.data)) return false;
  int32_t max_rows = 0;
  for (const SeqStep& s : plan.seqs) max_rows = std::max(max_rows, s.n_tokens);
  return max_rows >= kMinRows;
}

void set_attention_prefill_budgets(size_t partial_bytes, size_t copy_bytes) {
  g_partial_budget = partial_bytes ? partial_bytes : kPartialBudget;
  g_copy_budget = copy_bytes ? copy_bytes : kCopyBudget;
}

void attention_prefill(const Context& ctx, const Tensor& out, const Tensor& q, const KvLayerView& cache,
                       const AttentionParams& p, const StepPlan& plan) {
  KCHECK_MSG(attention_prefill_applies(ctx, q, cache, p, plan),
             "attention_prefill: this step (head_dim ", p.head_dim, ") is not one the tiled kernel takes");
  if (split_terms(ctx))
    launch_for_head_dim<true>(ctx, out, q, cache, p, plan);
  else
    launch_for_head_dim<false>(ctx, out, q, cache, p, plan);
}

}  // namespace kestrel::cuda
