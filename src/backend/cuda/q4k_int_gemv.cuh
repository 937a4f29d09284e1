// The integer-dot Q4_K, Q8_0 and Q6_K GEMVs over the kQ4_K_T32, kQ8_0_T32 and kQ6_K_T32 layouts
// (block_gemv_geometry.h, q4k_int), the block code gemv_multi_quant_kernel runs for such a matrix
// (any R of 1..8 rows), and the device helpers GpuBench.Q4kIntGemv's measurement kernels share
// (q4k_int_bench.cu).
//  - Activations: each 32 values x become x^ = s (a + b / 128 + c / 16384), s a power of two with
//    max |x| / s in [32, 64), a, b, c integers in [-64, 64], every step exact in F32, so
//    |x - x^| <= 2^-20 max |x| of the 32. The split runs on FMAs alone (q4k_int::split_value: no
//    conversion instruction, which sm_90 runs at an eighth of the FMA's rate; at 8 rows every
//    block splits all of x, so its cost is the 8-row kernel's pace). For one row each warp splits
//    its slice of x into shared memory after its wait; for R > 1 the four lanes of a B column
//    split its 32 values of a sub-block in registers as they go.
//  - Q4_K: a sub-block's Q = sum q (16384 a + 128 b + c) is an exact 32-bit integer (|Q| < 2^29):
//    three dp4a chains for one row (a lane a column), three s8 mmas m16n8k32 for R > 1 (A = 16
//    columns' quants, B = the rows' terms). Per sub-block, in order: y += (d sc s / 16384)
//    float(Q), then y -= (dmin m) sum(x^).
//  - Q8_0: a block's three term sums the same way (|sum q a| <= 2^18), Q = 16384 A + 128 B + C
//    formed in 64 bits and rounded once to F32 (q8_sum); y += (d s / 16384) Q per block, in
//    order. One row walks half super-blocks (the scales chunk and 8 quant chunks, the Q4_K
//    super-block's 9 chunks), so the two formats share the loads' shape.
//  - Q6_K: each quant becomes the s8 byte 4 (q - 32) (q4k_int::q6_quarter: two shifts and two
//    logic steps a word of 4), so a 16-value sub-block's sums over the three terms give Q =
//    sum (q - 32)(16384 a + 128 b + c) exactly (q6_sum, |Q| < 2^30): dp4a chains for one row,
//    s8 mmas m16n8k16 for R > 1 (a sub-block is 16 values, each its own scale). Per sub-block, in
//    order: y += (d sc s / 16384) float(Q). One row walks half super-blocks (the scales chunk, 4 ql
//    chunks, 2 qh chunks and d: 114 bytes a lane).
//  - The warps' partial sums meet in shared memory in warp order. Nothing depends on R: a row
//    has the same bits alone or among R.
//  - Error: |y - w.x| <= 2^-20 sum_b max|x_b| sum_b |d sc q| plus the F32 epilogue's roundings
//    (QuantGpuTest.MatmulQ4KT32, MatmulQ8T32 and MatmulQ6KT32; Q4_K measured <= 2e-7 of S' plus
//    that term).
//  - NX, the terms of x (every function below that takes it): 3 as above, or 2 at
//    --matmul-precision bf16, whose products are BF16's anyway (unit roundoff 2^-9): x^ = s (a + b /
//    128), |x - x^| <= 2^-13 max |x| of the 32, two dp4a chains (or mmas) instead of three and a
//    third less of the split activations to store and read; the unit is then s / 128 and Q = sum
//    q (128 a + b). The same digits a, b as with three (q4k_int::split_value2). A row's bits still
//    do not depend on R; they differ between the two (QuantGpuTest.MatmulT32TwoTerms).
#pragma once

#include "backend/cuda/block_gemv_geometry.h"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/quant_blocks.cuh"

namespace kestrel::cuda {

// The formats of the integer-dot GEMV (kIntSuperBytes below).
enum class IntFormat { kQ4, kQ8, kQ6 };

namespace q4k_int_detail {

using q4k_int::kChunks;
using q4k_int::kGroup;
using q4k_int::kSuperElems;

// The low bytes of a, b, c, d as one word (byte 0 from a).
__device__ __forceinline__ uint32_t pack4(uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  return __byte_perm(__byte_perm(a, b, 0x0040u), __byte_perm(c, d, 0x0040u), 0x5410u);
}

// The exponent e of a sub-block's largest magnitude m (m = f 2^e, f in [0.5, 1); m = 0: 0), at
// least -100: below 2^-100 every term is 0 (an error under 2^-100). The scale is s = 2^(e - 6).
__device__ __forceinline__ int split_exponent(float m) {
  int e = 0;
  frexpf(m, &e);
  return max(e, -100);
}

// The exponent of the unit of NX terms, s / 128^(NX - 1) = 2^(e - 6 - 7 (NX - 1)), less e's.
template <int NX>
constexpr int kUnitExp = -6 - 7 * (NX - 1);
// Value i of x's split into NX terms under inv: its digits into a[i], b[i] (and c[i]); returns
// rint(u 128^(NX - 1)), u = x inv, its share of the sub-block's sum.
template <int NX>
__device__ __forceinline__ int32_t split_digits(float x, float inv, uint32_t& a, uint32_t& b, uint32_t& c) {
  static_assert(NX == 2 || NX == 3, "x is split into 2 or 3 terms");
  if constexpr (NX == 3) return q4k_int::split_value(x, inv, a, b, c);
  else return q4k_int::split_value2(x, inv, a, b);
}
// A sub-block's Q from its NX term sums s (|s| <= 2^18 for a 32-value block of s8 quants), exact.
template <int NX>
__device__ __forceinline__ int term_sum(const int (&s)[3]) {
  return NX == 3 ? s[0] * 16384 + s[1] * 128 + s[2] : s[0] * 128 + s[1];
}

// Lanes 8j .. 8j + 7 of a warp hold the 32 elements of one sub-block, 4 consecutive a lane (v).
// Writes the lane's NX term words (t2 not with two); lane 8j writes the sub-block's unit and sum.
template <int NX>
__device__ __forceinline__ void split_quad(const float4 v, int lane, uint32_t* t0, uint32_t* t1, uint32_t* t2,
                                           float* unit, float* sum) {
  float m = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
  m = fmaxf(m, __shfl_xor_sync(kFullMask, m, 1));
  m = fmaxf(m, __shfl_xor_sync(kFullMask, m, 2));
  m = fmaxf(m, __shfl_xor_sync(kFullMask, m, 4));
  const int e = split_exponent(m);
  const float inv = __int_as_float((127 + 6 - e) << 23);  // 1 / s, s = 2^(e - 6)
  const float xs[4] = {v.x, v.y, v.z, v.w};
  uint32_t a[4], b[4], c[4];
  int q = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) q += split_digits<NX>(xs[i], inv, a[i], b[i], c[i]);
  q += __shfl_xor_sync(kFullMask, q, 1);
  q += __shfl_xor_sync(kFullMask, q, 2);
  q += __shfl_xor_sync(kFullMask, q, 4);
  *t0 = pack4(a[0], a[1], a[2], a[3]);
  *t1 = pack4(b[0], b[1], b[2], b[3]);
  if constexpr (NX == 3) *t2 = pack4(c[0], c[1], c[2], c[3]);
  if ((lane & 7) == 0) {
    const float u = __int_as_float((127 + e + kUnitExp<NX>) << 23);  // s / 16384 (two terms: s / 128)
    *unit = u;
    *sum = __fmul_rn(u, float(q));
  }
}

// The rows kernel's split on the fly: the 4 lanes 4g .. 4g + 3 hold one sub-block's 32 values of
// a row, 8 a lane (v0: the values of B fragment word 0, v1: of word 1). The same terms, unit and
// sum as split_quad (the max and the integer sum do not depend on how the values are spread);
// w[0 .. NX - 1].
template <int NX>
__device__ __forceinline__ void split8(const float4 v0, const float4 v1, uint32_t (&w)[3][2], float& unit,
                                       float& sum) {
  const float xs[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
  float m = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) m = fmaxf(m, fabsf(xs[i]));
  m = fmaxf(m, __shfl_xor_sync(kFullMask, m, 1));
  m = fmaxf(m, __shfl_xor_sync(kFullMask, m, 2));
  const int e = split_exponent(m);
  const float inv = __int_as_float((127 + 6 - e) << 23);
  uint32_t a[8], b[8], c[8];
  int q = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) q += split_digits<NX>(xs[i], inv, a[i], b[i], c[i]);
  q += __shfl_xor_sync(kFullMask, q, 1);
  q += __shfl_xor_sync(kFullMask, q, 2);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    w[0][h] = pack4(a[4 * h], a[4 * h + 1], a[4 * h + 2], a[4 * h + 3]);
    w[1][h] = pack4(b[4 * h], b[4 * h + 1], b[4 * h + 2], b[4 * h + 3]);
    if constexpr (NX == 3) w[2][h] = pack4(c[4 * h], c[4 * h + 1], c[4 * h + 2], c[4 * h + 3]);
  }
  unit = __int_as_float((127 + e + kUnitExp<NX>) << 23);
  sum = __fmul_rn(unit, float(q));
}

// Sub-block b's scale d sc and min dmin m from a super-block's 16-byte header (k_scale_min_bits);
// b is a compile-time constant where it is called.
__device__ __forceinline__ void scale_min(const uint4& h, int b, float& s, float& mn) {
  const float d = f16_bits_to_f32(uint16_t(h.x & 0xFFFF)), dmin = f16_bits_to_f32(uint16_t(h.x >> 16));
  uint32_t sc, mm;
  k_scale_min_bits(h, b, sc, mm);
  // sc, mm < 64 as floats by the magic number (quant_blocks.cuh), not by I2F: the same values
  s = __fmul_rn(d, __fsub_rn(__uint_as_float(0x4B000000u | sc), kMagic));
  mn = __fmul_rn(dmin, __fsub_rn(__uint_as_float(0x4B000000u | mm), kMagic));
}

// The 4 words of x's terms 0 .. NX - 1 at word e of t0, t1, t2 (t2 not read with two).
template <int NX>
__device__ __forceinline__ void term_words(const uint32_t* __restrict__ t0, const uint32_t* __restrict__ t1,
                                           const uint32_t* __restrict__ t2, int e, uint4 (&xt)[3]) {
  xt[0] = *reinterpret_cast<const uint4*>(t0 + e);
  xt[1] = *reinterpret_cast<const uint4*>(t1 + e);
  if constexpr (NX == 3) xt[2] = *reinterpret_cast<const uint4*>(t2 + e);
}

// One super-block of the lane's column: c = its 9 chunks, terms at the super-block's first
// element (words), unit / sum at its first sub-block.
template <int NX>
__device__ __forceinline__ float super_block(const uint4 (&c)[kChunks], const uint32_t* __restrict__ t0,
                                             const uint32_t* __restrict__ t1, const uint32_t* __restrict__ t2,
                                             const float* __restrict__ unit, const float* __restrict__ sum, float y) {
  const uint4 h = c[0];
#pragma unroll
  for (int q = 0; q < 4; ++q) {  // Q4_K chunk q: sub-blocks 2q (low nibbles), 2q + 1 (high)
    int lo[3] = {0, 0, 0}, hi[3] = {0, 0, 0};
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const uint4 w4 = c[1 + 2 * q + half];
      const int e = (64 * q + 16 * half) / 4;  // word of the low nibbles' first element
      uint4 xl[3], xh[3];
      term_words<NX>(t0, t1, t2, e, xl);
      term_words<NX>(t0, t1, t2, e + 8, xh);
      const uint32_t ws[4] = {w4.x, w4.y, w4.z, w4.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int l = int(ws[i] & 0x0F0F0F0Fu), u = int((ws[i] >> 4) & 0x0F0F0F0Fu);
#pragma unroll
        for (int t = 0; t < NX; ++t) {
          const uint32_t* xw = reinterpret_cast<const uint32_t*>(&xl[t]);
          const uint32_t* xv = reinterpret_cast<const uint32_t*>(&xh[t]);
          lo[t] = __dp4a(l, int(xw[i]), lo[t]);
          hi[t] = __dp4a(u, int(xv[i]), hi[t]);
        }
      }
    }
    const int ql = term_sum<NX>(lo), qh = term_sum<NX>(hi);
    float s[2], mn[2];
    scale_min(h, 2 * q, s[0], mn[0]);
    scale_min(h, 2 * q + 1, s[1], mn[1]);
    y = __fmaf_rn(__fmul_rn(s[0], unit[2 * q]), float(ql), y);
    y = __fmaf_rn(-mn[0], sum[2 * q], y);
    y = __fmaf_rn(__fmul_rn(s[1], unit[2 * q + 1]), float(qh), y);
    y = __fmaf_rn(-mn[1], sum[2 * q + 1], y);
  }
  return y;
}

// A warp's split of its slice of one row of x (n super-blocks from x) into shared memory: 3 n 64
// words of terms (m0, m1, m2; m2 unwritten with two), then n 8 units (mu) and n 8 sums (ms); 128
// values an iteration.
template <int NX>
__device__ __forceinline__ void split_slice(const float* __restrict__ x, int n, int lane, uint32_t* m0, uint32_t* m1,
                                            uint32_t* m2, float* mu, float* ms) {
  for (int it = 0; it < 2 * n; ++it) {
    const float4 v = *reinterpret_cast<const float4*>(x + 128 * it + 4 * lane);
    const int wi = 32 * it + lane;
    split_quad<NX>(v, lane, m0 + wi, m1 + wi, m2 + wi, mu + 4 * it + lane / 8, ms + 4 * it + lane / 8);
  }
  __syncwarp();
}

// A Q8_0 block's Q = sum q (16384 a + 128 b + c) from its three exact term sums (|A| <= 32 128 64
// = 2^18, so 16384 A needs 64 bits), rounded once to F32.
// With two terms, Q = 128 A + B (|Q| < 2^26), likewise rounded once.
template <int NX>
__device__ __forceinline__ float q8_sum(int A, int B, int C) {
  if constexpr (NX == 2) return __int2float_rn(A * 128 + B);
  else return __ll2float_rn(static_cast<long long>(A) * 16384 + (B * 128 + C));
}

// The d of block i (0..7) of a Q8_0 super-block: 16-bit word i of its scales chunk c.
__device__ __forceinline__ float q8_scale(const uint4& c, int i) {
  const uint32_t word = (i & 4) ? ((i & 2) ? c.w : c.z) : ((i & 2) ? c.y : c.x);
  return f16_bits_to_f32(uint16_t((i & 1) ? word >> 16 : word & 0xFFFF));
}

// Half h of a Q8_0 super-block of the lane's column: c[0] its scales chunk, c[1 + j] quant chunk
// 1 + 8 h + j; terms at the half's first element (words), units at its first block.
template <int NX>
__device__ __forceinline__ float q8_half(const uint4 (&c)[kChunks], int h, const uint32_t* __restrict__ t0,
                                         const uint32_t* __restrict__ t1, const uint32_t* __restrict__ t2,
                                         const float* __restrict__ unit, float y) {
#pragma unroll
  for (int b = 0; b < 4; ++b) {  // block 4 h + b
    int acc[3] = {0, 0, 0};
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const uint4 w4 = c[1 + 2 * b + half];
      const int e = 8 * b + 4 * half;
      uint4 xt[3];
      term_words<NX>(t0, t1, t2, e, xt);
      const uint32_t ws[4] = {w4.x, w4.y, w4.z, w4.w};
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int t = 0; t < NX; ++t)
          acc[t] = __dp4a(int(ws[i]), int(reinterpret_cast<const uint32_t*>(&xt[t])[i]), acc[t]);
    }
    y = __fmaf_rn(__fmul_rn(q8_scale(c[0], 4 * h + b), unit[b]), q8_sum<NX>(acc[0], acc[1], acc[2]), y);
  }
  return y;
}

// A Q6_K sub-block's Q from its term sums over the bytes 4 (q - 32) (q4k_int::q6_sum); with two
// terms 32 A + B / 4, exact as well.
template <int NX>
__device__ __forceinline__ int q6_sum(int A, int B, int C) {
  return NX == 3 ? q4k_int::q6_sum(A, B, C) : A * 32 + (B >> 2);
}

// d += a b, a 16x32 (row-major) and b 32x8 (column-major) s8 fragment, exact s32 sums. Lane l, g =
// l / 4, c = l % 4: a0 = A[g][4c .. 4c+3], a1 = A[g+8][4c ..], a2 = A[g][16+4c ..], a3 = A[g+8][16+4c
// ..]; b0 = B[4c .. 4c+3][g], b1 = B[16+4c ..][g]; d0, d1 = D[g][2c, 2c+1], d2, d3 = D[g+8][..].
__device__ __forceinline__ void mma_s8(int (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The rows kernels' loads of one super-block tile tp (w columns, chunks cstride = 16 w bytes
// apart): the headers of the lane's columns g, g + 8 of both m-tiles, and (rows_words) word c of
// the quant chunks 1 + 2q and 2 + 2q of each; columns past w read as zeros.
__device__ __forceinline__ void rows_headers(const uint8_t* __restrict__ tp, int g, int w, uint4 (&hdr)[2][2]) {
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int col = 16 * mt + g + 8 * hh;
      hdr[mt][hh] = col < w ? __ldcs(reinterpret_cast<const uint4*>(tp + col * 16)) : make_uint4(0, 0, 0, 0);
    }
}
// Word c of chunk j of column col of a super-block tile tp (chunks cstride bytes apart); 0 past
// the group's w columns.
__device__ __forceinline__ uint32_t tile_word(const uint8_t* __restrict__ tp, int64_t cstride, int j, int col, int c,
                                              int w) {
  return col < w ? __ldcs(reinterpret_cast<const unsigned int*>(tp + j * cstride + col * 16) + c) : 0u;
}
__device__ __forceinline__ void rows_words(const uint8_t* __restrict__ tp, int64_t cstride, int q, int g, int c, int w,
                                           uint32_t (&wd)[2][2][2]) {
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh)
#pragma unroll
      for (int h = 0; h < 2; ++h) wd[mt][hh][h] = tile_word(tp, cstride, 1 + 2 * q + h, 16 * mt + g + 8 * hh, c, w);
}

// The rows kernels' split on the fly of one sub-block: v = B column g's 32 values (x row g), 8 a
// lane; xw its words for the mmas, u and sm the units and sums of the lane's output rows ra, rb.
template <int NX>
__device__ __forceinline__ void split_rows(const float* __restrict__ v, int ra, int rb, uint32_t (&xw)[3][2],
                                           float (&u)[2], float (&sm)[2]) {
  float unit, sum;
  split8<NX>(*reinterpret_cast<const float4*>(v), *reinterpret_cast<const float4*>(v + 16), xw, unit, sum);
  u[0] = __shfl_sync(kFullMask, unit, 4 * ra);
  u[1] = __shfl_sync(kFullMask, unit, 4 * rb);
  sm[0] = __shfl_sync(kFullMask, sum, 4 * ra);
  sm[1] = __shfl_sync(kFullMask, sum, 4 * rb);
}

// Sub-block b of a super-block (hi: the high nibbles of its quant chunks) for the warp's two
// m-tiles of 16 columns: wd [m-tile][column g, g + 8][chunk]: word c of the sub-block's two
// chunks, hdr their headers, xw the rows' terms; y [m-tile][D fragment] += its scaled Q and min.
template <int NX>
__device__ __forceinline__ void rows_sub_block(const uint32_t (&wd)[2][2][2], const uint4 (&hdr)[2][2], int hi, int b,
                                               const uint32_t (&xw)[3][2], const float (&u)[2], const float (&sm)[2],
                                               float (&y)[2][4]) {
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
    uint32_t a[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t v = wd[mt][i & 1][i >> 1];
      a[i] = hi ? (v >> 4) & 0x0F0F0F0Fu : v & 0x0F0F0F0Fu;
    }
    int d[3][4] = {};
#pragma unroll
    for (int tm = 0; tm < NX; ++tm) mma_s8(d[tm], a, xw[tm][0], xw[tm][1]);
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float sc, mn;
      scale_min(hdr[mt][hh], b, sc, mn);
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int j = 2 * hh + i;
        const int Q = term_sum<NX>({d[0][j], d[1][j], d[2][j]});
        y[mt][j] = __fmaf_rn(__fmul_rn(sc, u[i]), float(Q), y[mt][j]);
        y[mt][j] = __fmaf_rn(-mn, sm[i], y[mt][j]);
      }
    }
  }
}

// Block b of a Q8_0 super-block for the warp's two m-tiles of 16 columns: wd [m-tile][column g,
// g + 8][chunk]: word c of the block's two quant chunks, hdr the columns' scales chunks, xw the
// rows' terms; y [m-tile][D fragment] += d u Q, Q rounded as q8_sum (the one-row path's values).
template <int NX>
__device__ __forceinline__ void rows_block_q8(const uint32_t (&wd)[2][2][2], const uint4 (&hdr)[2][2], int b,
                                              const uint32_t (&xw)[3][2], const float (&u)[2], float (&y)[2][4]) {
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
    uint32_t a[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) a[i] = wd[mt][i & 1][i >> 1];
    int d[3][4] = {};
#pragma unroll
    for (int tm = 0; tm < NX; ++tm) mma_s8(d[tm], a, xw[tm][0], xw[tm][1]);
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const float sc = q8_scale(hdr[mt][hh], b);
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int j = 2 * hh + i;
        y[mt][j] = __fmaf_rn(__fmul_rn(sc, u[i]), q8_sum<NX>(d[0][j], d[1][j], d[2][j]), y[mt][j]);
      }
    }
  }
}

// The scale of sub-block j (0 .. 15) of a Q6_K super-block from its scales chunk c: the s8 scale
// as a float by the magic number (its byte xor 0x80 is scale + 128), not by I2F.
__device__ __forceinline__ float q6_scale(const uint4& c, int j) {
  const uint32_t word = (j & 8) ? ((j & 4) ? c.w : c.z) : ((j & 4) ? c.y : c.x);
  const uint32_t bits = __byte_perm(word, 0x4B000000u, 0x7540u | uint32_t(j & 3)) ^ 0x80u;
  return __fsub_rn(__uint_as_float(bits), 8388736.0f);  // 2^23 + 128
}

// The F16 bits of the d of column col of a Q6_K super-block tile tp (chunks cstride bytes apart:
// the d's follow its 13 chunks, 2 bytes a column); 0 past the group's w columns. (Bits, so that a
// load issued ahead of its use is not converted, and waited for, where it is issued.)
__device__ __forceinline__ uint32_t q6_tile_d(const uint8_t* __restrict__ tp, int64_t cstride, int col, int w) {
  const auto* d = reinterpret_cast<const unsigned short*>(tp + q4k_int::kQ6Chunks * cstride) + col;
  return col < w ? uint32_t(__ldcs(d)) : 0u;
}

// Half h of a Q6_K super-block of the lane's column: c[0] its scales chunk, c[1 .. 4] ql chunks
// 4h .. 4h + 3, c[5], c[6] qh chunks 8 + 2h, 9 + 2h, c[7].x its d; terms at the half's first
// element (words), units at its first 32 values. Sub-blocks 8h + j in order, j = 2r + p: quarter
// r, l-words 4p .. 4p + 3.
template <int NX>
__device__ __forceinline__ float q6_half(const uint4 (&c)[kChunks], int h, const uint32_t* __restrict__ t0,
                                         const uint32_t* __restrict__ t1, const uint32_t* __restrict__ t2,
                                         const float* __restrict__ unit, float y) {
  const float d = f16_bits_to_f32(uint16_t(c[7].x & 0xFFFF));
#pragma unroll
  for (int r = 0; r < 4; ++r)
#pragma unroll
    for (int p = 0; p < 2; ++p) {
      const uint4 ql4 = c[1 + 2 * (r & 1) + p], qh4 = c[5 + p];
      const int e = 8 * r + 4 * p;
      uint4 xt[3];
      term_words<NX>(t0, t1, t2, e, xt);
      const uint32_t ql[4] = {ql4.x, ql4.y, ql4.z, ql4.w}, qh[4] = {qh4.x, qh4.y, qh4.z, qh4.w};
      int acc[3] = {0, 0, 0};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int q = int(q4k_int::q6_quarter(ql[i], qh[i], r));
#pragma unroll
        for (int t = 0; t < NX; ++t) acc[t] = __dp4a(q, int(reinterpret_cast<const uint32_t*>(&xt[t])[i]), acc[t]);
      }
      const float sc = __fmul_rn(__fmul_rn(d, q6_scale(c[0], 8 * h + 2 * r + p)), unit[r]);
      y = __fmaf_rn(sc, float(q6_sum<NX>(acc[0], acc[1], acc[2])), y);
    }
  return y;
}

// d += a b on the s8 mma m16n8k16: a 16x16 (row-major), b 16x8 (column-major), exact s32 sums.
// Lane l, g = l / 4, c = l % 4: a0 = A[g][4c .. 4c+3], a1 = A[g+8][4c ..]; b0 = B[4c .. 4c+3][g];
// d as mma_s8's.
__device__ __forceinline__ void mma_s8_k16(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t b0) {
  asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a0), "r"(a1), "r"(b0));
}

// Sub-block 8h + 2r + p of a Q6_K super-block for the warp's two m-tiles of 16 columns: wd
// [m-tile][column g, g + 8][ql at l, ql at 32 + l, qh]: word c of half h's chunks for l-words
// 4p .. 4p + 3, hdr the columns' scales chunks, dv their d's, xw the rows' terms of the quarter's 32
// values (word p: this sub-block's 16); y [m-tile][D fragment] += d sc u Q (the one-row path's
// values).
template <int NX>
__device__ __forceinline__ void rows_sub_block_q6(const uint32_t (&wd)[2][2][3], const uint4 (&hdr)[2][2],
                                                  const float (&dv)[2][2], int h, int r, int p,
                                                  const uint32_t (&xw)[3][2], const float (&u)[2], float (&y)[2][4]) {
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
    const uint32_t a0 = q4k_int::q6_quarter(wd[mt][0][r & 1], wd[mt][0][2], r);
    const uint32_t a1 = q4k_int::q6_quarter(wd[mt][1][r & 1], wd[mt][1][2], r);
    int d[3][4] = {};
#pragma unroll
    for (int tm = 0; tm < NX; ++tm) mma_s8_k16(d[tm], a0, a1, xw[tm][p]);
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const float ds = __fmul_rn(dv[mt][hh], q6_scale(hdr[mt][hh], 8 * h + 2 * r + p));
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int j = 2 * hh + i;
        y[mt][j] = __fmaf_rn(__fmul_rn(ds, u[i]), float(q6_sum<NX>(d[0][j], d[1][j], d[2][j])), y[mt][j]);
      }
    }
  }
}


// y of NT n-tiles (n-tile nt: rows 8 nt .. 8 nt + 7) into the partial sums of slice v (partial
// [slice][col][row], rows `stride` apart; rows from R on are not written), then zeros.
template <int NT>
__device__ __forceinline__ void flush_rows(float (&y)[NT][2][4], float* __restrict__ partial, int v, int R, int stride,
                                           int g, int c) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int col = 16 * mt + g + 8 * (j >> 1), row = 8 * nt + 2 * c + (j & 1);
        if (row < R) partial[(v * kGroup + col) * stride + row] = y[nt][mt][j];
        y[nt][mt][j] = 0.0f;
      }
}

// A warp's walk over its n super-blocks of a group's T32 tile (gbase; wg columns, chunks cstride
// and super-blocks sstride bytes apart) for the rows of NT n-tiles of 8: act(nt, e, xw, u, sm)
// gives n-tile nt's B fragment words for 32-value unit e of the walk (8 a super-block) and the
// units and sums of the lane's output rows; y[nt] takes each sub-block's scaled sums in order.
// With two slices (kTwoSlices) at_mid() runs before super-block mid, where the second begins.
// The weights are read once for all NT n-tiles, and each n-tile's sums are those of a walk alone.
template <IntFormat F, int NT, bool kTwoSlices, int NX, typename Act, typename AtMid>
__device__ __forceinline__ void int_rows_walk(const uint8_t* __restrict__ gbase, int64_t cstride, int64_t sstride,
                                              int wg, int n, int mid, int g, int c, Act&& act, AtMid&& at_mid,
                                              float (&y)[NT][2][4]) {
  constexpr bool kQ8 = F == IntFormat::kQ8, kQ6 = F == IntFormat::kQ6;
  // sub(xw, u, sm, y[nt]) for each n-tile's activations of unit e
  auto tiles = [&](int e, auto&& sub) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      uint32_t xw[3][2];
      float u[2], sm[2];
      act(nt, e, xw, u, sm);
      sub(xw, u, sm, y[nt]);
    }
  };
  for (int t = 0; t < n; ++t) {
    if constexpr (kTwoSlices) {
      if (t == mid) at_mid();
    }
    const uint8_t* tp = gbase + t * sstride;
    uint4 hdr[2][2];  // [m-tile][column g, g + 8]: Q4_K headers, Q8_0 and Q6_K scales chunks
    if constexpr (kQ6) {
      rows_headers(tp + 12 * cstride, g, wg, hdr);
      float dv[2][2];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh)
          dv[mt][hh] = f16_bits_to_f32(uint16_t(q6_tile_d(tp, cstride, 16 * mt + g + 8 * hh, wg)));
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        uint32_t wd[2][2][2][3];  // [l-words 4p ..][m-tile][column g, g + 8][ql at l, ql at 32 + l, qh]: word c
#pragma unroll
        for (int pp = 0; pp < 2; ++pp)
#pragma unroll
          for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int hh = 0; hh < 2; ++hh)
#pragma unroll
              for (int k = 0; k < 3; ++k)
                wd[pp][mt][hh][k] =
                    tile_word(tp, cstride, k < 2 ? 4 * h + 2 * k + pp : 8 + 2 * h + pp, 16 * mt + g + 8 * hh, c, wg);
#pragma unroll
        for (int r = 0; r < 4; ++r)
          tiles(8 * t + 4 * h + r, [&](const auto& xw, const auto& u, const auto&, auto& yt) {
#pragma unroll
            for (int pp = 0; pp < 2; ++pp) rows_sub_block_q6<NX>(wd[pp], hdr, dv, h, r, pp, xw, u, yt);
          });
      }
    } else {
      rows_headers(tp, g, wg, hdr);
      if constexpr (kQ8) {
#pragma unroll
        for (int bk = 0; bk < 8; ++bk) {
          uint32_t wd[2][2][2];  // [m-tile][column g, g + 8][chunk 1 + 2 bk, 2 + 2 bk]: word c
          rows_words(tp, cstride, bk, g, c, wg, wd);
          tiles(8 * t + bk, [&](const auto& xw, const auto& u, const auto&, auto& yt) {
            rows_block_q8<NX>(wd, hdr, bk, xw, u, yt);
          });
        }
      } else {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          uint32_t wd[2][2][2];  // [m-tile][column g, g + 8][chunk 1 + 2q, 2 + 2q]: word c
          rows_words(tp, cstride, q, g, c, wg, wd);
#pragma unroll
          for (int hi = 0; hi < 2; ++hi)
            tiles(8 * t + 2 * q + hi, [&](const auto& xw, const auto& u, const auto& sm, auto& yt) {
              rows_sub_block<NX>(wd, hdr, hi, 2 * q + hi, xw, u, sm, yt);
            });
        }
      }
    }
  }
}

}  // namespace q4k_int_detail

// The integer-dot formats' T32 layouts' super-block bytes a row and the one-row kernel's units
// (Q4_K: a super-block, its 9 chunks; Q8_0: half a super-block, its scales chunk and 8 quant
// chunks; Q6_K: half a super-block, its scales chunk, 4 ql chunks, 2 qh chunks and its d).
template <IntFormat F>
constexpr int kIntSuperBytes = F == IntFormat::kQ4 ? q4k_int::kSuperBytes
                               : F == IntFormat::kQ8 ? 16 * q4k_int::kQ8Chunks
                                                     : q4k_int::kQ6SuperBytes;
template <IntFormat F>
constexpr int kIntUnitsPerSuper = F == IntFormat::kQ4 ? 1 : 2;

// The work of one block of P warps for R rows: out [R, N] (row stride N) = x [R, K] . w^T, w [N, K]
// in the T32 layout of format F (kQ4_K_T32, kQ8_0_T32, kQ6_K_T32), the columns of group `group`
// (32, or the last group's w). The group's V = q4k_int::group_slices(N, S, wide_groups) slices of
// super-blocks each have their own sum, and the V sums are added in order, so a row's bits depend
// on neither P nor R. V is P, or with kTwoSlices 2P (a 16-slice matrix in an 8-warp block: R > 1,
// or other formats in the launch; the launch's kernel knows whether any of its matrices has 16):
// warp p takes slices p V / P .. (p + 1) V / P - 1, contiguous super-blocks, and with two its sum
// restarts at the second. Without kTwoSlices the code is what it was before 16 slices: with the
// restart inside every walk, an 8-slice 12288 x 4096 Q4_K launch measured 1910 GB/s on an H100
// against 2087-2108 before.
// NX: x's terms (2 at --matmul-precision bf16, else 3). Calls pdl_begin() itself: one row's first
// weights are loaded before it. smem:
// q4k_int::smem_bytes(R, K, P) bytes. K % 256 == 0; x 16-byte aligned.
template <int R, IntFormat F, int P, bool kTwoSlices, int NX>
__device__ __forceinline__ void gemv_int_block(float* __restrict__ out, const float* __restrict__ x,
                                               const void* __restrict__ w, int64_t K, int64_t N, int64_t group,
                                               uint8_t* __restrict__ smem, int64_t wide_groups) {
  using namespace q4k_int_detail;
  static_assert(!kTwoSlices || P == q4k_int::kWarps, "two slices a warp are an 8-warp block's");
  constexpr bool kQ8 = F == IntFormat::kQ8, kQ6 = F == IntFormat::kQ6;
  const int64_t S = K / kSuperElems, g0 = group * kGroup;
  const int V = kTwoSlices ? q4k_int::group_slices(N, S, wide_groups) : P;
  const int per = kTwoSlices ? V / P : 1;  // the warp's slices: v0, and v0 + 1 if per is 2
  const int wg = int(N - g0 < kGroup ? N - g0 : kGroup);  // the group's columns
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
  const int v0 = warp * per;
  const int first = q4k_int::slice_first(S, v0, V), n = q4k_int::slice_first(S, v0 + per, V) - first;
  const int mid = q4k_int::slice_first(S, v0 + 1, V) - first;  // where slice v0 ends (n if per is 1)
  // bytes between chunks, between super-blocks
  const int64_t cstride = int64_t(wg) * 16, sstride = kIntSuperBytes<F> * int64_t(wg);
  const uint8_t* gbase = static_cast<const uint8_t*>(w) + g0 * S * kIntSuperBytes<F> + first * sstride;
  const int64_t k0 = int64_t(first) * kSuperElems;
  float* partial = reinterpret_cast<float*>(smem + (R == 1 ? size_t(P) * q4k_int::split_bytes(S, P) : 0));
  // s (slice 0's sum) plus slices 1 .. V - 1's, partial[at(q)], in order (unrolled)
  auto add_slices = [&](float s, auto at) {
    if (kTwoSlices && V == q4k_int::kWideSlices) {  // else V is P
#pragma unroll
      for (int q = 1; q < q4k_int::kWideSlices; ++q) s = __fadd_rn(s, partial[at(q)]);
    } else {
#pragma unroll
      for (int q = 1; q < P; ++q) s = __fadd_rn(s, partial[at(q)]);
    }
    return s;
  };
  if constexpr (R == 1) {
    const bool live = lane < wg;
    const uint8_t* p = gbase + lane * 16;
    // unit t: Q4_K super-block t (its 9 chunks); Q8_0 half t % 2 of super-block t / 2 (its scales
    // chunk and quant chunks 1 + 8 (t % 2) .. 8 + 8 (t % 2)); Q6_K half h = t % 2 of super-block
    // t / 2 (c[0] its scales chunk 12, c[1 .. 4] ql chunks 4h .., c[5 .. 6] qh chunks 8 + 2h ..,
    // c[7].x its d)
    auto load = [&](uint4 (&c)[kChunks], int t) {
      const uint8_t* sp = p + (kIntUnitsPerSuper<F> == 2 ? t >> 1 : t) * sstride;
      if constexpr (kQ6) {
        const int h = t & 1;
#pragma unroll
        for (int j = 0; j < 7; ++j) {
          const int chunk = j == 0 ? 12 : j < 5 ? 4 * h + j - 1 : 8 + 2 * h + j - 5;
          c[j] = live ? __ldcs(reinterpret_cast<const uint4*>(sp + chunk * cstride)) : make_uint4(0, 0, 0, 0);
        }
        c[7].x = q6_tile_d(sp - lane * 16, cstride, lane, wg);
      } else {
        const int skip = kQ8 ? 8 * (t & 1) : 0;
#pragma unroll
        for (int j = 0; j < kChunks; ++j)
          c[j] = live ? __ldcs(reinterpret_cast<const uint4*>(sp + (j == 0 ? 0 : j + skip) * cstride))
                      : make_uint4(0, 0, 0, 0);
      }
    };
    uint4 a[kChunks], b[kChunks];
    if (n > 0) load(a, 0);  // the weights do not depend on the kernel before
    pdl_begin();
    uint32_t* m0 = reinterpret_cast<uint32_t*>(smem + size_t(warp) * q4k_int::split_bytes(S, P));
    uint32_t* m1 = m0 + n * 64;
    uint32_t* m2 = m1 + n * 64;
    float* mu = reinterpret_cast<float*>(m2 + n * 64);
    float* ms = mu + n * 8;
    split_slice<NX>(x + k0, n, lane, m0, m1, m2, mu, ms);
    const int units = kIntUnitsPerSuper<F> * n, mid_unit = kIntUnitsPerSuper<F> * mid;
    auto dot = [&](const uint4(&c)[kChunks], int t, float acc) {
      if constexpr (kQ8) return q8_half<NX>(c, t & 1, m0 + 32 * t, m1 + 32 * t, m2 + 32 * t, mu + 4 * t, acc);
      else if constexpr (kQ6) return q6_half<NX>(c, t & 1, m0 + 32 * t, m1 + 32 * t, m2 + 32 * t, mu + 4 * t, acc);
      else return super_block<NX>(c, m0 + 64 * t, m1 + 64 * t, m2 + 64 * t, mu + 8 * t, ms + 8 * t, acc);
    };
    // slice v0 + e: units u0 .. u1 - 1
    for (int e = 0, u0 = 0; e < per; ++e) {
      const int u1 = e + 1 < per ? mid_unit : units;
      if (e > 0 && u1 > u0) load(a, u0);  // the first slice's first unit came before the wait
      partial[(v0 + e) * kGroup + lane] = q4k_int::slice_dot(
          [&](uint4 (&c)[kChunks], int t) { load(c, u0 + t); },
          [&](const uint4(&c)[kChunks], int t, float acc) { return dot(c, u0 + t, acc); }, a, b, u1 - u0);
      u0 = u1;
    }
    __syncthreads();
    if (warp == 0 && live) {
      out[g0 + lane] = add_slices(partial[lane], [&](int q) { return q * kGroup + lane; });
    }
  } else {
    const int g = lane >> 2, c = lane & 3;
    pdl_begin();
    const float* xg = x + int64_t(min(g, R - 1)) * K + k0 + 4 * c;  // B column g: x row g (past R, the last)
    const int ra = min(2 * c, R - 1), rb = min(2 * c + 1, R - 1);   // this lane's output rows' sources
    float y[1][2][4] = {};
    auto flush = [&](int v) { flush_rows(y, partial, v, R, R, g, c); };
    // One walk over the warp's super-blocks; with two slices the sum restarts at the second's first
    // (mid). Two walks, one a slice, measured 4-15% slower for 8 rows at 4096 x 12288 on an H100.
    int_rows_walk<F, 1, kTwoSlices, NX>(
        gbase, cstride, sstride, wg, n, mid, g, c,
        [&](int, int e, uint32_t(&xw)[3][2], float(&u)[2], float(&sm)[2]) {
          split_rows<NX>(xg + 32 * e, ra, rb, xw, u, sm);
        },
        [&] { flush(v0); }, y);
    if constexpr (kTwoSlices) {
      if (per == 2 && mid == n) flush(v0);  // an empty second slice sums to 0 (none has: S >= 16)
    }
    flush(v0 + per - 1);
    __syncthreads();
    for (int i = int(threadIdx.x); i < kGroup * R; i += 32 * P) {
      const int col = i / R, row = i % R;
      if (col >= wg) continue;
      out[int64_t(row) * N + g0 + col] =
          add_slices(partial[col * R + row], [&](int q) { return (q * kGroup + col) * R + row; });
    }
  }
}

}  // namespace kestrel::cuda
