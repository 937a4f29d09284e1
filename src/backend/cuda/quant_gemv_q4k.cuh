// The Q4_K GEMV (matmul.cu's gemv_multi_quant_kernel, any R of 1..8 rows): decode at 4.5 bits a
// weight is bound by instructions, not bytes, unless a weight costs about two. Nsight Compute on
// the unit GEMV this replaces (a lane per 32 elements, quant_gemv.cuh's design) counted 7.7
// instructions a weight: the magic-number subtraction, the runs' sums of x computed by every lane,
// and per-unit integer work (scale decoding in two divergent branches, addresses) over too few
// weights, with x read as scattered 16-float pieces that kept L1 83% busy. Here:
//  - Lane geometry (q4k_gemv_geometry.h): L lanes share a column, each taking whole super-blocks
//    (l, l + L, ..), and a lane computes 2 columns, so one read of x serves both. A lane steps
//    through a super-block's 4 chunks of 64 elements (32 quant bytes: sub-blocks 2c in the low
//    nibbles, 2c + 1 in the high) with every lane at the same chunk c, which the loop unrolls: the
//    6-bit scale decoding has no branch, and a chunk's decoding and addressing serve 64 weights a
//    column where the unit GEMV's served 32.
//  - A quant nibble permuted into an otherwise zero word IS the float q * 2^-149 (a subnormal,
//    exact), so a weight costs a permute and an FMA. The rows of x are staged in shared memory
//    times 2^64 (exact): each product x 2^64 * q 2^-149 is the exact x * q scaled by 2^-85, so the
//    FMA chain rounds it exactly as it would unscaled; the scale, taken times 2^85 (exact), undoes
//    it. Limits no model that runs reaches: |x| < 2^64 (an RMSNorm's sum of squares overflows
//    first), and a run's partial sums below 2^-41 are subnormal in the scaled frame (rounded to
//    2^-64 absolute instead of 24 bits relative).
//  - The runs' sums of x (for the mins) are computed once per block while staging.
// Per element: y += (d sc) * (sum_run0 x q + sum_run1 x q) - (dmin m) * (X_run0 + X_run1), each run
// an FMA chain of 16 in element order, a chunk's two sub-blocks added, then the lane's chunks in
// order, then a xor tree over the L lanes. The order depends only on K, so a row has the same
// bits alone or among R; q4k_gemv::roundings(K) counts the roundings for the error bound.
#pragma once

#include "backend/cuda/q4k_gemv_geometry.h"
#include "backend/cuda/quant_gemv.cuh"

namespace kestrel::cuda {

namespace q4k_detail {

constexpr float kXScale = 18446744073709551616.0f;         // 2^64
constexpr float kScaleUp = 38685626227668133590597632.0f;  // 2^85

// Byte b of v (0..255) as the float byte * 2^-149 (a subnormal, or zero), exactly.
template <int b>
__device__ __forceinline__ float subnormal_byte(uint32_t v) {
  return __uint_as_float(__byte_perm(v, 0u, 0x4440u | b));
}

// Scales (times 2^85) and mins of sub-blocks 2c and 2c + 1 from a super-block's 16-byte header
// (get_scale_min_k4), c a compile-time chunk.
struct ChunkScales {
  float s0, s1, m0, m1;
};
template <int c>
__device__ __forceinline__ ChunkScales chunk_scales(const uint4& h) {
  const float d = f16_bits_to_f32(uint16_t(h.x & 0xFFFF)), dmin = f16_bits_to_f32(uint16_t(h.x >> 16));
  uint32_t sc0, sc1, m0, m1;
  if constexpr (c < 2) {
    constexpr int j = 2 * c;
    sc0 = (h.y >> (8 * j)) & 63;
    sc1 = (h.y >> (8 * j + 8)) & 63;
    m0 = (h.z >> (8 * j)) & 63;
    m1 = (h.z >> (8 * j + 8)) & 63;
  } else {
    constexpr int i = 2 * c - 4;  // 0 or 2
    const uint32_t lo0 = (h.w >> (8 * i)) & 0xFF, lo1 = (h.w >> (8 * i + 8)) & 0xFF;
    sc0 = (lo0 & 0xF) | (((h.y >> (8 * i)) & 0xFF) >> 6 << 4);
    sc1 = (lo1 & 0xF) | (((h.y >> (8 * i + 8)) & 0xFF) >> 6 << 4);
    m0 = (lo0 >> 4) | (((h.z >> (8 * i)) & 0xFF) >> 6 << 4);
    m1 = (lo1 >> 4) | (((h.z >> (8 * i + 8)) & 0xFF) >> 6 << 4);
  }
  return {__fmul_rn(__fmul_rn(d, float(sc0)), kScaleUp), __fmul_rn(__fmul_rn(d, float(sc1)), kScaleUp),
          __fmul_rn(dmin, float(m0)), __fmul_rn(dmin, float(m1))};
}

// 16 quants (nibble h of 16 bytes) as subnormal floats.
template <int h>
__device__ __forceinline__ void nibbles(const uint4& v, float (&q)[16]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const uint32_t b = (h ? w[k] >> 4 : w[k]) & 0x0F0F0F0Fu;
    q[4 * k + 0] = subnormal_byte<0>(b);
    q[4 * k + 1] = subnormal_byte<1>(b);
    q[4 * k + 2] = subnormal_byte<2>(b);
    q[4 * k + 3] = subnormal_byte<3>(b);
  }
}

// A lane's weights for one chunk of one column: the super-block header and 32 quant bytes.
struct Chunk {
  uint4 head, lo, hi;  // lo: quant bytes 0..15 (elements 0..15 of each sub-block), hi: 16..31
};
__device__ __forceinline__ void load_chunk(const uint8_t* sb, int c, Chunk& o) {
  o.head = __ldg(reinterpret_cast<const uint4*>(sb));
  o.lo = __ldg(reinterpret_cast<const uint4*>(sb + 16 + 32 * c));
  o.hi = __ldg(reinterpret_cast<const uint4*>(sb + 32 + 32 * c));
}

// Block-wide: elements [k0, k0 + len) of rows [0, R) of x ([R, K]) into shared memory, element
// k0 + k of row r at xs[r * row_stride + x_at(k)] times 2^64 (exact), and the sum of each run of
// 16 unscaled values at xsum[r * sum_stride + sum_at(k / 16)]: a thread's 4 values, then the
// run's 4 threads by xor shuffles (a fixed tree that gives every lane the same bits). len a
// multiple of 256; every thread of the block calls it.
__device__ __forceinline__ void stage(float* __restrict__ xs, int row_stride, float* __restrict__ xsum, int sum_stride,
                                      const float* __restrict__ x, int64_t K, int R, int64_t k0, int len) {
  using namespace q4k_gemv;
  const int total = R * len;
  for (int base = 0; base < total; base += int(blockDim.x) * 4) {  // the same trips for every thread
    const int i = base + int(threadIdx.x) * 4;
    const int r = i < total ? i / len : 0, k = i - r * len;
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (i < total) v = *reinterpret_cast<const float4*>(x + r * K + k0 + k);
    float sum = __fadd_rn(__fadd_rn(v.x, v.y), __fadd_rn(v.z, v.w));
    sum = __fadd_rn(sum, __shfl_xor_sync(0xFFFFFFFFu, sum, 1));
    sum = __fadd_rn(sum, __shfl_xor_sync(0xFFFFFFFFu, sum, 2));
    if (i < total) {
      if ((threadIdx.x & 3) == 0) xsum[r * sum_stride + sum_at(k / 16)] = sum;
      *reinterpret_cast<float4*>(xs + r * row_stride + x_at(k)) =
          make_float4(__fmul_rn(v.x, kXScale), __fmul_rn(v.y, kXScale), __fmul_rn(v.z, kXScale),
                      __fmul_rn(v.w, kXScale));
    }
  }
}

// Chunk c of the lane's current super-block (elements kb.. of the staged tile) for both columns
// and every row, into acc.
template <int R, int c>
__device__ __forceinline__ void chunk(const Chunk (&w)[2], const float* __restrict__ xs, int row_stride,
                                      const float* __restrict__ xsum, int sum_stride, int kb, float (&acc)[R][2]) {
  using namespace q4k_gemv;
  const ChunkScales sc[2] = {chunk_scales<c>(w[0].head), chunk_scales<c>(w[1].head)};
  float part[R][2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {  // sub-block 2c + h
    float p[R][2][2];            // [row][column][run]
#pragma unroll
    for (int run = 0; run < 2; ++run) {
      float q[2][16];
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        if (h) nibbles<1>(run ? w[j].hi : w[j].lo, q[j]);
        else nibbles<0>(run ? w[j].hi : w[j].lo, q[j]);
      }
#pragma unroll
      for (int r = 0; r < R; ++r) {
        float xr[16];
        load_run(xs + r * row_stride + x_at(kb + 32 * h + 16 * run), xr);
#pragma unroll
        for (int j = 0; j < 2; ++j) p[r][j][run] = run_dot(xr, q[j]);
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float* sp = xsum + r * sum_stride;
      const int s0 = (kb + 32 * h) / 16;
      const float X = __fadd_rn(sp[sum_at(s0)], sp[sum_at(s0 + 1)]);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const float s = h ? sc[j].s1 : sc[j].s0, m = h ? sc[j].m1 : sc[j].m0;
        const float P = __fsub_rn(__fmul_rn(s, __fadd_rn(p[r][j][0], p[r][j][1])), __fmul_rn(m, X));
        part[r][j] = h ? __fadd_rn(part[r][j], P) : P;
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int j = 0; j < 2; ++j) acc[r][j] = __fadd_rn(acc[r][j], part[r][j]);
}

}  // namespace q4k_detail

// The work of one block (kWarps warps) for R rows: out [R, N] = x [R, K] . w^T, w [N, K] in Q4_K.
// A lane computes 2 columns and loads its next chunk's weights while it computes the current one.
// smem: q4k_gemv::smem_bytes(K, R) bytes of dynamic shared memory. K % 256 == 0, x 16-byte
// aligned.
template <int R, int kWarps>
__device__ __forceinline__ void gemv_q4k_block(float* __restrict__ out, const float* __restrict__ x,
                                               const void* __restrict__ w, int64_t K, int64_t N, int64_t block,
                                               float* __restrict__ smem) {
  using namespace q4k_gemv;
  using namespace q4k_detail;
  const int S = int(K / kSuperElems), L = lanes(S), per_lane = S / L;
  const int tile = tile_super(S, L, R), tile_iters = tile / L;
  const int rs = row_floats(tile), ss = sum_floats(tile);
  float* const xs = smem;
  float* const xsum = smem + R * rs;
  const int lane = threadIdx.x & 31, l = lane & (L - 1);
  const int64_t wcol = (block * kWarps + (threadIdx.x >> 5)) * warp_columns(K);
  const int64_t col = wcol + 2 * (lane / L);  // the lane's columns col, col + 1
  const bool warp_live = wcol < N;
  const size_t row_bytes = size_t(S) * kSuperBytes;
  const uint8_t* rows[2];
#pragma unroll
  for (int j = 0; j < 2; ++j)
    rows[j] = static_cast<const uint8_t*>(w) + size_t(col + j < N ? col + j : N - 1) * row_bytes;  // tail: read, drop
  float acc[R][2];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = 0.0f;
  // the lane's chunks in order: super-block l + i L, chunk c; the next one's weights are loaded
  // while the current one is computed
  Chunk cur[2], next[2];
  auto load = [&](int i, int c, Chunk (&o)[2]) {
#pragma unroll
    for (int j = 0; j < 2; ++j) load_chunk(rows[j] + size_t(l + i * L) * kSuperBytes, c, o[j]);
  };
  if (warp_live) load(0, 0, next);
#pragma unroll 1
  for (int i0 = 0; i0 < per_lane; i0 += tile_iters) {
    const int i1 = per_lane - i0 < tile_iters ? per_lane : i0 + tile_iters;
    __syncthreads();  // the previous tile is no longer read
    stage(xs, rs, xsum, ss, x, K, R, int64_t(i0) * L * kSuperElems, (i1 - i0) * L * kSuperElems);
    __syncthreads();
    if (!warp_live) continue;
#pragma unroll 1
    for (int i = i0; i < i1; ++i) {
      const int kb = (l + (i - i0) * L) * kSuperElems;  // the super-block's first element in the tile
#pragma unroll
      for (int c = 0; c < 4; ++c) {
#pragma unroll
        for (int j = 0; j < 2; ++j) cur[j] = next[j];
        if (c < 3) load(i, c + 1, next);
        else if (i + 1 < per_lane) load(i + 1, 0, next);
        switch (c) {
          case 0: chunk<R, 0>(cur, xs, rs, xsum, ss, kb + 0, acc); break;
          case 1: chunk<R, 1>(cur, xs, rs, xsum, ss, kb + 64, acc); break;
          case 2: chunk<R, 2>(cur, xs, rs, xsum, ss, kb + 128, acc); break;
          default: chunk<R, 3>(cur, xs, rs, xsum, ss, kb + 192, acc); break;
        }
      }
    }
  }
  if (!warp_live) return;
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      float v = acc[r][j];
      for (int o = L >> 1; o > 0; o >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
      if (l == 0 && col + j < N) out[int64_t(r) * N + col + j] = v;
    }
  }
}

}  // namespace kestrel::cuda
