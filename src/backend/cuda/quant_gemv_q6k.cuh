// The Q6_K GEMV on the copy engine (matmul_quant.cu's gemv_multi_quant_kernel, any R of 1..8 rows, for
// matrices whose rows are a multiple of 8 super-blocks: q6k_gemv::supported). The Q4_K GEMV's
// structure (quant_gemv_q4k.cuh): TMA copies into a two-slot ring per warp counted on
// mbarriers, the first ones before griddepcontrol.wait, activations staged and scaled by 2^64
// in the slot, quants as exact subnormals (block_gemv_common.cuh). What differs:
//  - A 210-byte super-block is not a multiple of 16 bytes, so neither a bulk copy per column nor
//    a box of whole super-blocks fits TMA's rules, and a tensor copy's first coordinate must fall
//    on 16 bytes (a box starting at super-block s, 2 (s % 8) bytes past such a boundary, stopped
//    the kernel with an illegal instruction). The matrix is a 2D tensor of 16-bit words
//    [N, 105 S]; a box of 120 words (240 bytes) by 16 rows starts at the 16-byte boundary at or
//    before the super-block (its 210 bytes lie 0..14 bytes in; zeros past the row's end) and
//    lands each column at 240-byte steps. The lanes read the super-block as words realigned by
//    byte permutes (the offset is the same for the whole warp).
//  - 16 columns a warp (a 32-column slot with activations would not leave room for two blocks
//    an SM): lane l takes column l % 16 and half h = l / 16 of each super-block (elements
//    128 h + [0, 128), 8 runs of 16 under their own int8 scales), and the two halves of a
//    column are added by one shuffle. The warp reads two activation addresses at a time, 528
//    bytes apart so they share a shared-memory wavefront.
//  - A quant q is 6 bits, 0..63 (ggml's value is d sc (q - 32)): a low nibble from ql and two
//    bits from qh put together with masks, summed unsigned, the offset folded out as a min:
//    y_run = s sum(x q) - 32 s sum(x), s = d sc.
// Per column: a run's FMA chain of 16 in element order; the half's 8 runs in order; half 0 +
// half 1; the warp's super-blocks in order; the P warps in order. The order depends only on K, so
// a row has the same bits alone or among R; q6k_gemv::roundings(K) counts the roundings.
#pragma once

#include "backend/cuda/block_gemv_common.cuh"
#include "backend/cuda/block_gemv_geometry.h"
#include "backend/cuda/quant_gemv.cuh"

namespace kestrel::cuda {

namespace q6k_detail {

using namespace block_gemv;

// 16 quants of run (k, i) of a half as subnormal floats: the low (k < 2) or high nibbles of ql
// words L (ql bytes 32 (k % 2) + 16 i of the half) with bits 2k, 2k + 1 of qh words Hq (qh bytes
// 16 i of the half) above them.
template <int k>
__device__ __forceinline__ void quants6(const uint4& L, const uint4& Hq, float (&q)[16]) {
  const uint32_t l[4] = {L.x, L.y, L.z, L.w}, hb[4] = {Hq.x, Hq.y, Hq.z, Hq.w};
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    const uint32_t lo = k >= 2 ? l[w] >> 4 : l[w];
    const uint32_t hi = k == 0 ? hb[w] << 4 : k == 1 ? hb[w] << 2 : k == 2 ? hb[w] : hb[w] >> 2;
    const uint32_t v = (lo & 0x0F0F0F0Fu) | (hi & 0x30303030u);
    q[4 * w + 0] = subnormal_byte<0>(v);
    q[4 * w + 1] = subnormal_byte<1>(v);
    q[4 * w + 2] = subnormal_byte<2>(v);
    q[4 * w + 3] = subnormal_byte<3>(v);
  }
}

// n words of a super-block's bytes from byte 4 w0 + delta on (delta even, 0..14): word loads
// from the column's 16-byte aligned landing place cb, realigned by byte permutes when delta is
// 2 mod 4.
template <int n>
__device__ __forceinline__ void words_at(const uint8_t* __restrict__ cb, int delta, int w0, uint32_t (&o)[n]) {
  const uint32_t* a = reinterpret_cast<const uint32_t*>(cb + (delta & ~3)) + w0;
  const uint32_t sel = (delta & 2) ? 0x5432u : 0x3210u;
  uint32_t prev = a[0];
#pragma unroll
  for (int i = 0; i < n; ++i) {
    const uint32_t next = a[i + 1];
    o[i] = __byte_perm(prev, next, sel);
    prev = next;
  }
}

// Half h of one super-block of the lane's column against R rows of staged, scaled activations
// (row r's half h at xs + r * kRowPitch / 4 + h * kHalfPitch / 4), the sums of their runs in
// sums [R][16]: the half's 8 runs summed in order, per row, into y. The super-block lies at
// cb + delta (cb the column's 16-byte aligned landing place: a tensor copy starts on a 16-byte
// boundary of the row, and super-block s on 2 (s % 8) past one).
template <int R>
__device__ __forceinline__ void half_block(const uint8_t* __restrict__ cb, int delta, int h,
                                           const float* __restrict__ xs, const float* __restrict__ sums,
                                           float (&y)[R]) {
  using namespace q6k_gemv;
  uint32_t ql[16], qh[8], scw[2];
  words_at<16>(cb, delta, 16 * h, ql);       // ql bytes 64 h ..
  words_at<8>(cb, delta, 32 + 8 * h, qh);    // qh bytes 32 h ..
  words_at<2>(cb, delta, 48 + 2 * h, scw);   // scales 8 h ..
  const uint4 A0 = make_uint4(ql[0], ql[1], ql[2], ql[3]), A1 = make_uint4(ql[4], ql[5], ql[6], ql[7]);
  const uint4 B0 = make_uint4(ql[8], ql[9], ql[10], ql[11]), B1 = make_uint4(ql[12], ql[13], ql[14], ql[15]);
  const uint4 H0 = make_uint4(qh[0], qh[1], qh[2], qh[3]), H1 = make_uint4(qh[4], qh[5], qh[6], qh[7]);
  const float d = f16_bits_to_f32(*reinterpret_cast<const uint16_t*>(cb + delta + 208));
  const float* xh = xs + h * (kHalfPitch / 4);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int j = 2 * k + i;  // the run in the half: elements 16 j .. 16 j + 15, scale 8 h + j
      float q[16];
      const uint4& L = (k & 1) ? (i ? B1 : B0) : (i ? A1 : A0);
      const uint4& Hq = i ? H1 : H0;
      switch (k) {
        case 0: quants6<0>(L, Hq, q); break;
        case 1: quants6<1>(L, Hq, q); break;
        case 2: quants6<2>(L, Hq, q); break;
        default: quants6<3>(L, Hq, q); break;
      }
      const int sc = int(int8_t((scw[j >> 2] >> (8 * (j & 3))) & 0xFF));
      const float su = __fmul_rn(d, float(sc));  // ggml's d * sc
      const float s = __fmul_rn(su, kScaleUp), m = __fmul_rn(su, 32.0f);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        float xr[16];
        load_run(xh + r * (kRowPitch / 4) + 16 * j, xr);
        const float part = __fsub_rn(__fmul_rn(s, run_dot(xr, q)), __fmul_rn(m, sums[r * 16 + 8 * h + j]));
        y[r] = j == 0 ? part : __fadd_rn(y[r], part);
      }
    }
  }
}

}  // namespace q6k_detail

// The work of one block (q6k_gemv::kWarps warps) for R rows: out [R, N] = x [R, K] . w^T, w
// [N, K] in Q6_K, columns [block * block_columns(K), ..). map: w as 16-bit words [N, 105 S],
// boxes of 120 words by 16 rows (block_tensor_map in matmul_quant.cu); rows past N read as zeros, and
// their outputs are dropped. Calls pdl_begin() itself: the weights' first copies are issued
// before it. smem: q6k_gemv::smem_bytes(R) bytes of dynamic shared memory (any 16-byte
// alignment). q6k_gemv::supported(K); x 16-byte aligned.
template <int R>
__device__ __forceinline__ void gemv_q6k_block(float* __restrict__ out, const float* __restrict__ x,
                                               const CUtensorMap* map, int64_t K, int64_t N, int64_t block,
                                               uint8_t* __restrict__ smem) {
  using namespace q6k_gemv;
  using namespace block_gemv;
  const int S = int(K / kSuperElems), P = slices(S), n = S / P, G = kWarps / P;
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
  const int g = warp / P, p = warp - g * P;  // column group, slice
  const int col = lane & (kCols - 1), h = lane / kCols;  // the lane's column in the warp, its half
  const int64_t block_col = block * kCols * G, col0 = block_col + kCols * g;  // the block's, the warp's first column
  // activations: lane a < 2R copies half a % 2 of row a / 2 of each super-block
  const int xrow = lane < 2 * R ? lane >> 1 : 0, xhalf = lane & 1;
  const float* xsrc = x + int64_t(xrow) * K + int64_t(p) * n * kSuperElems + 128 * xhalf;
  const WarpRing wr = warp_ring(smem, warp, lane, slot_bytes(R));
  uint8_t* const ring = wr.ring;
  uint64_t* const bar = wr.bar;
  // super-block t of the warp's slice: lane 0 arms the slot's barrier with all its bytes (the
  // whole box, zero-filled parts included) and copies the box; lanes 0..2R-1 a half-row each
  auto copy_weights = [&](int t) {
    uint8_t* slot = ring + (t % kStages) * slot_bytes(R);
    if (lane == 0) {
      mbar_arrive_expect(bar + t % kStages, uint32_t(kSlotX + R * kSuperElems * 4));
      tensor_copy_2d(slot, map, ((p * n + t) * kSuperBytes & ~15) / 2, int(col0), bar + t % kStages);
    }
  };
  auto copy_activations = [&](int t) {
    uint8_t* slot = ring + (t % kStages) * slot_bytes(R);
    if (lane < 2 * R)
      bulk_copy(slot + kSlotX + xrow * kRowPitch + xhalf * kHalfPitch, xsrc + int64_t(t) * kSuperElems, 512,
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
    scale_activations<R, kRowPitch / 4, (kHalfPitch - 512) / 4>(xs, sums, lane);
    __syncwarp();
    float y[R];
    q6k_detail::half_block<R>(slot + col * kBoxBytes, 2 * ((p * n + t) & 7), h, xs, sums, y);
#pragma unroll
    for (int r = 0; r < R; ++r) {  // half 0 + half 1, the same bits in both lanes
      const float other = __shfl_xor_sync(0xFFFFFFFFu, y[r], kCols);
      const float sb = h ? __fadd_rn(other, y[r]) : __fadd_rn(y[r], other);
      acc[r] = t ? __fadd_rn(acc[r], sb) : sb;
    }
    if (t + kStages < n) {  // refill the slot once every lane is done with it
      fence_proxy_async();
      __syncwarp();
      copy_weights(t + kStages);
      copy_activations(t + kStages);
    }
  }
  if (h == 0) {
#pragma unroll
    for (int r = 0; r < R; ++r) wr.partial[(warp * R + r) * kCols + col] = acc[r];
  }
  reduce_slices<R, kCols>(wr.partial, out, block_col, N, G, P);
}

}  // namespace kestrel::cuda
