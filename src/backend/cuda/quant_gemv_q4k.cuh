// The Q4_K GEMV (matmul_quant.cu's gemv_multi_quant_kernel, any R of 1..8 rows) on the tensor cores.
// Decode at 4.5 bits a weight needs ~3.3 TB/s of Q4_K for issue 7's goal.
//  - The weights: the copy engine (TMA) moves them into a ring of shared-memory slots per warp,
//    completion counted on an mbarrier, so a warp's loads stay in flight while it computes; for
//    one row one 2D tensor copy a slot (a super-block of each of 32 columns), for R > 1 a copy a
//    lane (the box for every R measured 353 GB/s at R = 8 with the CUDA-core arithmetic, a copy a
//    lane 347, 2026-12-03). Per-lane register loads of the 144-byte super-blocks held earlier
//    kernels at ~1.7 TB/s whatever their arithmetic.
//  - Geometry (block_gemv_geometry.h): a warp is 32 columns and a contiguous 1/P of their
//    super-blocks; P warps share the columns and their partial sums meet in shared memory at the
//    end. A ring slot holds one super-block of each of the 32 columns (column l's 144 bytes at
//    144 l) and the matching 256 activations of each row, copied too.
//  - The arithmetic: m16n8k16 BF16 mmas with F32 accumulation. A = 16 of the warp's columns by 16
//    elements of a sub-block: a quant q (0..15) ORed into 0x4300 is the BF16 128 + q, exact, two
//    a LOP3. B = the activations split into BF16 terms x = hi + lo (+ e, |e| <= 2^-16 |x|), hi and
//    lo of row r as columns 2r and 2r + 1 of an n-tile of 8 (4 rows an mma). Products are exact;
//    the bias comes out with the min. The CUDA-core arithmetic it replaced (exact subnormal
//    quants, a permute and an FMA a weight, 2026-12-01 .. 12-03) read one row at the same speed
//    (9B Q4_K_M decode 308 vs 297 t/s, within a run's spread of 4%) and 8 rows at a third of it
//    (~350 vs ~1000 GB/s: eight rows' broadcast shared loads for every four FMAs).
// Per column and row: D_b = sum over sub-block b of (128 + q) hi and of (128 + q) lo (two mmas
// each, into a zeroed accumulator); y_hi, y_lo = FMA chains of s_b D_b over the warp's
// sub-blocks in order; out = (y_hi + y_lo) - sum_b (128 s_b + m_b) X_b (X_b = the sub-block's sum
// of hi + lo, exact per element, in a fixed tree), then the P warps in order. Nothing depends on
// R or on where a column sits in a tile (an mma's element depends on its A row and B column
// only), so a row has the same bits alone or among R. Error (tests/gpu/quant_matmul_test.cc):
// |err| <= 2^-16 S' + 2^-18 S_b, S_b = sum |x| |s| (128 + q), the biased sums the tensor cores
// accumulate (S_b / S' ~ 20 for normal weights).
#pragma once

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/block_gemv_common.cuh"
#include "backend/cuda/block_gemv_geometry.h"
#include "backend/cuda/mma.cuh"
#include "backend/cuda/quant_blocks.cuh"

namespace kestrel::cuda {

namespace q4k_detail {

using namespace block_gemv;

// A quant q in bits 0..3 (and 16..19) of a word ORed with 0x4300 is the BF16 128 + q, exact: one
// LOP3 makes two weights, the bias 128 comes out with the min (y = s sum((128 + q) x) - (128 s +
// m) sum(x)).
__device__ __forceinline__ uint32_t biased_pair(uint32_t v) { return (v & 0x000F000Fu) | 0x43004300u; }

// A slot's R rows of 256 F32 activations become, in place, BF16 terms x = hi + lo + e (hi =
// bf16(x), lo = bf16(x - hi), |e| <= 2^-16 |x|), laid out for the B fragments: row r, sub-block
// b, lane quarter t: 16 bytes of hi at r 1024 + 128 b + 32 t, then 16 of lo, each the pairs
// (8t, 8t+2), (8t+1, 8t+3), (8t+4, 8t+6), (8t+5, 8t+7) of the sub-block's elements (the order
// biased_pair leaves the quants in). Lane L holds exactly those 8 elements (sub-block L / 4,
// t = L % 4), so it rewrites its own 32 bytes. sums [R][8]: each sub-block's sum of hi + lo (exact
// per element) in a fixed tree, so that the bias cancels against the same values the mma saw.
template <int R>
__device__ __forceinline__ void mma_terms(float* __restrict__ xs, float* __restrict__ sums, int lane) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
    uint4* p = reinterpret_cast<uint4*>(xs + r * q4k_gemv::kSuperElems + 8 * lane);
    const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
    const float e[8] = {a.x, a.z, a.y, a.w, b.x, b.z, b.y, b.w};  // pair order
    uint32_t hi[4], lo[4];
    float v[8];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const __nv_bfloat162 h = __floats2bfloat162_rn(e[2 * i], e[2 * i + 1]);
      const float h0 = __low2float(h), h1 = __high2float(h);
      const __nv_bfloat162 l = __floats2bfloat162_rn(__fsub_rn(e[2 * i], h0), __fsub_rn(e[2 * i + 1], h1));
      v[2 * i] = __fadd_rn(h0, __low2float(l));
      v[2 * i + 1] = __fadd_rn(h1, __high2float(l));
      hi[i] = bf16x2_bits(h);
      lo[i] = bf16x2_bits(l);
    }
    float s = __fadd_rn(__fadd_rn(__fadd_rn(v[0], v[1]), __fadd_rn(v[2], v[3])),
                        __fadd_rn(__fadd_rn(v[4], v[5]), __fadd_rn(v[6], v[7])));
    s = __fadd_rn(s, __shfl_xor_sync(0xFFFFFFFFu, s, 1));
    s = __fadd_rn(s, __shfl_xor_sync(0xFFFFFFFFu, s, 2));
    if ((lane & 3) == 0) sums[r * 8 + lane / 4] = s;
    p[0] = make_uint4(hi[0], hi[1], hi[2], hi[3]);
    p[1] = make_uint4(lo[0], lo[1], lo[2], lo[3]);
  }
}

// The eight sub-blocks' scales d sc and mins dmin m of one super-block (its 16-byte header).
__device__ __forceinline__ void scales_mins(const uint4& h, float (&s)[8], float (&m)[8]) {
  const float d = f16_bits_to_f32(uint16_t(h.x & 0xFFFF)), dmin = f16_bits_to_f32(uint16_t(h.x >> 16));
#pragma unroll
  for (int j = 0; j < 4; ++j)
#pragma unroll
    for (int b = j; b < 8; b += 4) {  // sub-blocks j and 4 + j, in the order the loop took them
      uint32_t sc, mm;
      k_scale_min_bits(h, b, sc, mm);
      s[b] = __fmul_rn(d, float(sc));
      m[b] = __fmul_rn(dmin, float(mm));
    }
}

// One slot on the tensor cores. Lane (g, t) = (lane / 4, lane % 4) owns A rows g and g + 8 of
// both tiles and, in n-tile nt, output row 4 nt + t: y [nt][tile][0, 1] are hi and lo of column
// mma_column(g), [2, 3] of mma_column(g + 8) (block_gemv_geometry.h). Per sub-block b (two mmas
// over its 32 elements into a zeroed accumulator, element order fixed): y += s_b D. stab
// [32][8]: the columns' scales, written by the caller.
template <int R>
__device__ __forceinline__ void mma_slot(const uint8_t* __restrict__ slot, const uint8_t* __restrict__ terms,
                                         const float* __restrict__ stab, int lane, float (&y)[(R + 3) / 4][2][4]) {
  constexpr int NT = (R + 3) / 4;
  const int g = lane >> 2, t = lane & 3;
  int col[2][2];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
    col[mt][0] = 16 * mt + q4k_gemv::mma_column(g);
    col[mt][1] = 16 * mt + q4k_gemv::mma_column(g + 8);
  }
  const uint8_t* bsrc[NT];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int r = min(4 * nt + (g >> 1), R - 1);
    bsrc[nt] = terms + r * 1024 + 32 * t + 16 * (g & 1);
  }
#pragma unroll
  for (int c = 0; c < 4; ++c) {  // chunk c: sub-blocks 2c (low nibbles) and 2c + 1 (high)
    uint2 w[2][2];
    float2 sc[2][2];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        w[mt][h] = *reinterpret_cast<const uint2*>(slot + col[mt][h] * q4k_gemv::kSuperBytes + 16 + 32 * c + 8 * t);
        sc[mt][h] = *reinterpret_cast<const float2*>(stab + col[mt][h] * 8 + 2 * c);
      }
#pragma unroll
    for (int hn = 0; hn < 2; ++hn) {  // sub-block 2c + hn
      const int b = 2 * c + hn, sh = 4 * hn;
      uint4 bt[NT];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) bt[nt] = *reinterpret_cast<const uint4*>(bsrc[nt] + 128 * b);
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        const uint32_t a0[4] = {biased_pair(w[mt][0].x >> sh), biased_pair(w[mt][1].x >> sh),
                                biased_pair(w[mt][0].x >> (sh + 8)), biased_pair(w[mt][1].x >> (sh + 8))};
        const uint32_t a1[4] = {biased_pair(w[mt][0].y >> sh), biased_pair(w[mt][1].y >> sh),
                                biased_pair(w[mt][0].y >> (sh + 8)), biased_pair(w[mt][1].y >> (sh + 8))};
        const float s0 = hn ? sc[mt][0].y : sc[mt][0].x, s1 = hn ? sc[mt][1].y : sc[mt][1].x;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
          mma16816(d, a0, bt[nt].x, bt[nt].y);
          mma16816(d, a1, bt[nt].z, bt[nt].w);
          y[nt][mt][0] = __fmaf_rn(s0, d[0], y[nt][mt][0]);
          y[nt][mt][1] = __fmaf_rn(s0, d[1], y[nt][mt][1]);
          y[nt][mt][2] = __fmaf_rn(s1, d[2], y[nt][mt][2]);
          y[nt][mt][3] = __fmaf_rn(s1, d[3], y[nt][mt][3]);
        }
      }
    }
  }
}

}  // namespace q4k_detail

// The work of one block (q4k_gemv::kWarps warps) for R rows: out [R, N] = x [R, K] . w^T, w
// [N, K] in Q4_K, columns [block * block_columns(K), ..). map (read for R = 1): w as 32-bit
// words [N, row_bytes / 4], boxes of 36 words by 32 rows (block_tensor_map in matmul_quant.cu); rows
// past N read as zeros, and their outputs are dropped. Calls pdl_begin() itself: the weights'
// first copies are issued before it, while the kernel before this one still runs. smem:
// q4k_gemv::smem_bytes(R) bytes of dynamic shared memory (any 16-byte alignment). K % 256 == 0;
// x 16-byte aligned. (A variant whose blocks looped over several tiles, the rings streaming from
// one into the next, measured the same, 2026-12-04.)
template <int R>
__device__ __forceinline__ void gemv_q4k_block(float* __restrict__ out, const float* __restrict__ x,
                                               const void* __restrict__ w, const CUtensorMap* map, int64_t K,
                                               int64_t N, int64_t block, uint8_t* __restrict__ smem) {
  using namespace q4k_gemv;
  using namespace q4k_detail;
  constexpr int NT = (R + 3) / 4;  // n-tiles: 4 rows' hi and lo each
  const int S = int(K / kSuperElems), P = slices(S), n = S / P, G = kWarps / P;
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
  const int g = warp / P, p = warp - g * P;  // column group, slice
  const int64_t block_col = block * 32 * G, col0 = block_col + 32 * g;  // the block's, the warp's first column
  const int64_t col = col0 + lane;  // R > 1: a tail lane copies the last column's bytes, dropped
  const uint8_t* wsrc = static_cast<const uint8_t*>(w) + size_t(col < N ? col : N - 1) * size_t(S) * kSuperBytes +
                        size_t(p) * n * kSuperBytes;
  const float* xsrc = x + int64_t(lane < R ? lane : 0) * K + int64_t(p) * n * kSuperElems;
  const WarpRing wr = warp_ring(smem, warp, lane, slot_bytes(R));
  uint8_t* const ring = wr.ring;
  uint64_t* const bar = wr.bar;
  float* const stab = wr.partial + kWarps * R * 32 + warp * 32 * 8;  // past the partial sums
  // super-block t of the warp's slice: lane 0 arms the slot's barrier with all its bytes; lanes
  // 0..R-1 copy one activation row's 256 each
  auto copy_weights = [&](int t) {
    uint8_t* slot = ring + (t % kStages) * slot_bytes(R);
    if (lane == 0) mbar_arrive_expect(bar + t % kStages, uint32_t(kSlotX + R * kSuperElems * 4));
    if constexpr (R == 1) {
      if (lane == 0) tensor_copy_2d(slot, map, (p * n + t) * (kSuperBytes / 4), int(col0), bar + t % kStages);
    } else {
      bulk_copy(slot + lane * kSuperBytes, wsrc + size_t(t) * kSuperBytes, kSuperBytes, bar + t % kStages);
    }
  };
  auto copy_activations = [&](int t) {
    uint8_t* slot = ring + (t % kStages) * slot_bytes(R);
    if (lane < R)
      bulk_copy(slot + kSlotX + lane * kSuperElems * 4, xsrc + int64_t(t) * kSuperElems, kSuperElems * 4,
                bar + t % kStages);
  };
  const int first = n < kStages ? n : kStages;
  for (int t = 0; t < first; ++t) copy_weights(t);
  pdl_begin();  // the activations are the kernel before's output
  for (int t = 0; t < first; ++t) copy_activations(t);
  float y[NT][2][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int i = 0; i < 4; ++i) y[nt][mt][i] = 0.0f;
  float mins[R];  // lane l: sum over sub-blocks of (128 s + m) X, column l
#pragma unroll
  for (int r = 0; r < R; ++r) mins[r] = 0.0f;
#pragma unroll 1
  for (int t = 0; t < n; ++t) {
    uint8_t* slot = ring + (t % kStages) * slot_bytes(R);
    mbar_wait(bar + t % kStages, uint32_t(t / kStages) & 1u);
    float* sums = reinterpret_cast<float*>(slot + slot_sums(R));
    mma_terms<R>(reinterpret_cast<float*>(slot + kSlotX), sums, lane);
    float s[8], m[8];
    scales_mins(*reinterpret_cast<const uint4*>(slot + lane * kSuperBytes), s, m);
    reinterpret_cast<float4*>(stab + lane * 8)[0] = make_float4(s[0], s[1], s[2], s[3]);
    reinterpret_cast<float4*>(stab + lane * 8)[1] = make_float4(s[4], s[5], s[6], s[7]);
    __syncwarp();
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int b = 0; b < 8; ++b) mins[r] = __fmaf_rn(__fmaf_rn(128.0f, s[b], m[b]), sums[r * 8 + b], mins[r]);
    mma_slot<R>(slot, slot + kSlotX, stab, lane, y);
    fence_proxy_async();  // the terms written in place, before the copy engine's next writes
    __syncwarp();         // every lane is done with the slot and the scales
    if (t + kStages < n) {
      copy_weights(t + kStages);
      copy_activations(t + kStages);
    }
  }
  // y's hi and lo per (row, column), then each column's lane takes out its mins
  float* const part = wr.partial + warp * R * 32;
  const int qg = lane >> 2, qt = lane & 3;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int r = 4 * nt + qt;
    if (r < R) {
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        part[r * 32 + 16 * mt + mma_column(qg)] = __fadd_rn(y[nt][mt][0], y[nt][mt][1]);
        part[r * 32 + 16 * mt + mma_column(qg + 8)] = __fadd_rn(y[nt][mt][2], y[nt][mt][3]);
      }
    }
  }
  __syncwarp();
#pragma unroll
  for (int r = 0; r < R; ++r) part[r * 32 + lane] = __fsub_rn(part[r * 32 + lane], mins[r]);
  reduce_slices<R, 32>(wr.partial, out, block_col, N, G, P);
}

}  // namespace kestrel::cuda
