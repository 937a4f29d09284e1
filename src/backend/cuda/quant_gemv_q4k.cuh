// The Q4_K GEMV (matmul.cu's gemv_multi_quant_kernel, any R of 1..8 rows). Decode at 4.5 bits a
// weight needs ~3.3 TB/s of Q4_K for issue 7's goal. The kernels before this one loaded weights
// with per-lane 16-byte loads and stalled on them: each warp load took 32 bytes of 8 rows, a
// 144-byte super-block a row, and Nsight Compute showed 0.51 instructions issued a cycle a
// scheduler, mostly waiting on those loads, at ~1.7 TB/s, whatever the arithmetic (a tensor-core
// variant with 40% fewer instructions read at the same rate). Here the copy engine (TMA) moves
// the weights into a ring of shared-memory slots, completion counted on an mbarrier, so a warp's
// loads stay in flight while it computes. For one row, one 2D tensor copy a slot (a super-block
// of each of 32 rows): copying each row's 144 bytes on its own held the kernel at one copy per
// ~18 cycles an SM (2.0–2.1 TB/s for either shape, measured 2026-12-03), the box at 2.2–2.4.
//  - Geometry (block_gemv_geometry.h): a lane is one output column; a warp is 32 columns and a
//    contiguous 1/P of their super-blocks; P warps share the columns and their partial sums meet
//    in shared memory at the end. A ring slot holds one super-block of each of the 32 columns
//    (lane l's 144 bytes at 144 l) and the matching 256 activations of each row, copied too.
//  - Activations are read by every lane at the same address (a broadcast), once per column.
//  - Quant nibbles become exact subnormal floats and the activations are scaled by 2^64 in the
//    slot (block_gemv_common.cuh), so a weight costs a permute and an FMA.
// Per column: a sub-block's y = (d sc) * (sum_run0 x q + sum_run1 x q) - (dmin m) * (X_run0 +
// X_run1), each run an FMA chain of 16 in element order; a super-block's 8 sub-blocks summed in
// order, the warp's super-blocks in order, then the P warps in order. The order depends only on
// K, so a row has the same bits alone or among R; q4k_gemv::roundings(K) counts the roundings
// for the error bound.
#pragma once

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/block_gemv_common.cuh"
#include "backend/cuda/block_gemv_geometry.h"
#include "backend/cuda/quant_gemv.cuh"

namespace kestrel::cuda {

namespace q4k_detail {

using namespace block_gemv;

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


// One super-block of the lane's column (its 144 bytes at sb) against R rows of staged, scaled
// activations: the sum of its 8 sub-blocks in order, per row, into y.
template <int R>
__device__ __forceinline__ void super_block(const uint8_t* __restrict__ sb, const float* __restrict__ xs,
                                            const float* __restrict__ sums, float (&y)[R]) {
  const uint4 head = *reinterpret_cast<const uint4*>(sb);
#pragma unroll
  for (int c = 0; c < 4; ++c) {  // chunk c: sub-blocks 2c (low nibbles) and 2c + 1 (high)
    const uint4 lo = *reinterpret_cast<const uint4*>(sb + 16 + 32 * c);  // elements 0..15 of each
    const uint4 hi = *reinterpret_cast<const uint4*>(sb + 32 + 32 * c);  // 16..31
    ChunkScales sc;
    switch (c) {
      case 0: sc = chunk_scales<0>(head); break;
      case 1: sc = chunk_scales<1>(head); break;
      case 2: sc = chunk_scales<2>(head); break;
      default: sc = chunk_scales<3>(head); break;
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float q0[16], q1[16];
      if (h) {
        nibbles<1>(lo, q0);
        nibbles<1>(hi, q1);
      } else {
        nibbles<0>(lo, q0);
        nibbles<0>(hi, q1);
      }
      const int e = 64 * c + 32 * h;  // the sub-block's first element
#pragma unroll
      for (int r = 0; r < R; ++r) {
        float xr[16];
        load_run(xs + r * q4k_gemv::kSuperElems + e, xr);
        const float p0 = run_dot(xr, q0);
        load_run(xs + r * q4k_gemv::kSuperElems + e + 16, xr);
        const float p1 = run_dot(xr, q1);
        const float X = __fadd_rn(sums[r * 16 + e / 16], sums[r * 16 + e / 16 + 1]);
        const float s = h ? sc.s1 : sc.s0, m = h ? sc.m1 : sc.m0;
        const float part = __fsub_rn(__fmul_rn(s, __fadd_rn(p0, p1)), __fmul_rn(m, X));
        y[r] = (c == 0 && h == 0) ? part : __fadd_rn(y[r], part);
      }
    }
  }
}

}  // namespace q4k_detail

// The work of one block (q4k_gemv::kWarps warps) for R rows: out [R, N] = x [R, K] . w^T, w
// [N, K] in Q4_K, columns [block * block_columns(K), ..). map (read for R = 1): w as 32-bit
// words [N, row_bytes / 4], boxes of 36 words by 32 rows (block_tensor_map in matmul.cu); rows
// past N read as zeros, and their outputs are dropped. Calls pdl_begin() itself: the weights'
// first copies are issued before it, while the kernel before this one still runs. smem:
// q4k_gemv::smem_bytes(R) bytes of dynamic shared memory (any 16-byte alignment). K % 256 == 0; x 16-byte aligned.
template <int R>
__device__ __forceinline__ void gemv_q4k_block(float* __restrict__ out, const float* __restrict__ x,
                                               const void* __restrict__ w, const CUtensorMap* map, int64_t K,
                                               int64_t N, int64_t block, uint8_t* __restrict__ smem) {
  using namespace q4k_gemv;
  using namespace q4k_detail;
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
  // super-block t of the warp's slice: lane 0 arms the slot's barrier with all its bytes; the
  // 32 columns' 144 bytes come as one box for one row, as a copy a lane for R > 1 (the box for
  // every R measured 353 GB/s at R = 8, 12288 x 4096, and this combination 347, 2026-12-03: not
  // the copies but something else holds R > 1 back); lanes 0..R-1 copy one activation row's 256 each
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
  float acc[R];
#pragma unroll 1
  for (int t = 0; t < n; ++t) {
    uint8_t* slot = ring + (t % kStages) * slot_bytes(R);
    mbar_wait(bar + t % kStages, uint32_t(t / kStages) & 1u);
    float* xs = reinterpret_cast<float*>(slot + kSlotX);
    float* sums = reinterpret_cast<float*>(slot + slot_sums(R));
    scale_activations<R>(xs, sums, lane);
    __syncwarp();
    float y[R];
    super_block<R>(slot + lane * kSuperBytes, xs, sums, y);
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = t ? __fadd_rn(acc[r], y[r]) : y[r];
    if (t + kStages < n) {  // refill the slot once every lane is done with it
      fence_proxy_async();
      __syncwarp();
      copy_weights(t + kStages);
      copy_activations(t + kStages);
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) wr.partial[(warp * R + r) * 32 + lane] = acc[r];
  reduce_slices<R, 32>(wr.partial, out, block_col, N, G, P);
}

}  // namespace kestrel::cuda
