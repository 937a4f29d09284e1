// What the copy-engine GEMVs of the block formats (quant_gemv_q4k.cuh, quant_gemv_q6k.cuh) share:
// the TMA copies into shared memory counted on mbarriers, and the subnormal-quant arithmetic.
//  - A quant q (0..63) permuted into an otherwise zero word IS the float q * 2^-149 (a
//    subnormal, exact), so a weight costs a permute and an FMA. The activations are scaled in
//    shared memory by 2^64 (exact): each product x 2^64 * q 2^-149 is the exact x * q scaled by
//    2^-85, so an FMA chain rounds it exactly as it would unscaled; the run's scale, taken times
//    2^85 (exact), undoes it. Limits no model that runs reaches: |x| < 2^64 (an RMSNorm's sum of
//    squares overflows first), and a run's partial sums below 2^-41 are subnormal in the scaled
//    frame (rounded to 2^-64 absolute instead of 24 bits relative).
#pragma once

#include <cuda.h>  // CUtensorMap

#include <cstdint>

#include "backend/cuda/block_gemv_geometry.h"

namespace kestrel::cuda::block_gemv {

constexpr float kXScale = 18446744073709551616.0f;         // 2^64
constexpr float kScaleUp = 38685626227668133590597632.0f;  // 2^85

// Byte b of v (0..255) as the float byte * 2^-149 (a subnormal, or zero), exactly.
template <int b>
__device__ __forceinline__ float subnormal_byte(uint32_t v) {
  return __uint_as_float(__byte_perm(v, 0u, 0x4440u | b));
}

// The copy engine's side: an mbarrier per ring slot, armed with the bytes its copies will bring.
__device__ __forceinline__ uint32_t smem_addr(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void mbar_init(uint64_t* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(bar)) : "memory");
}
// Makes the barriers' initialization visible to the copy engine.
__device__ __forceinline__ void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
__device__ __forceinline__ void mbar_arrive_expect(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n\t}"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
  } while (!done);
}
// bytes (a multiple of 16, both addresses 16-byte aligned) global -> shared, counted on bar.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_addr(dst)),
               "l"(src), "r"(bytes), "r"(smem_addr(bar))
               : "memory");
}
// A box of a 2D tensor map (element coordinates c0 along a row, c1 rows) global -> shared,
// counted on bar; map is a kernel parameter (__grid_constant__) or in global memory.
__device__ __forceinline__ void tensor_copy_2d(void* dst, const CUtensorMap* map, int c0, int c1, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
          smem_addr(dst)),
      "l"(map), "r"(c0), "r"(c1), "r"(smem_addr(bar))
      : "memory");
}
// Orders this thread's ordinary shared-memory accesses before the copy engine's later writes.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// A slot's R rows of 256 activations, in place, times 2^64, and the sum of each run of 16 (of
// the unscaled values: a lane's 8 in a fixed tree, then the run's 2 lanes by one xor shuffle,
// which gives both the same bits) into sums [R][16]. Row r starts at xs + r * kRowFloats, its
// second half (elements 128..255) kHalfGap floats after the first half's end.
template <int R, int kRowFloats = 256, int kHalfGap = 0>
__device__ __forceinline__ void scale_activations(float* __restrict__ xs, float* __restrict__ sums, int lane) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
    float4* p = reinterpret_cast<float4*>(xs + r * kRowFloats + 8 * lane + (lane >= 16 ? kHalfGap : 0));
    const float4 a = p[0], b = p[1];
    float s = __fadd_rn(__fadd_rn(__fadd_rn(a.x, a.y), __fadd_rn(a.z, a.w)),
                        __fadd_rn(__fadd_rn(b.x, b.y), __fadd_rn(b.z, b.w)));
    s = __fadd_rn(s, __shfl_xor_sync(0xFFFFFFFFu, s, 1));
    if ((lane & 1) == 0) sums[r * 16 + lane / 2] = s;
    p[0] = make_float4(__fmul_rn(a.x, kXScale), __fmul_rn(a.y, kXScale), __fmul_rn(a.z, kXScale),
                       __fmul_rn(a.w, kXScale));
    p[1] = make_float4(__fmul_rn(b.x, kXScale), __fmul_rn(b.y, kXScale), __fmul_rn(b.z, kXScale),
                       __fmul_rn(b.w, kXScale));
  }
}

// A warp's copy ring in a block's dynamic shared memory laid out by block_gemv_layout (smem: any
// 16-byte alignment; its base moves up to the next 128 bytes): the warp's kStages slots of
// slot_bytes, their barriers (lane 0 initializes them), and the block's partial sums.
struct WarpRing {
  uint8_t* ring;
  uint64_t* bar;
  float* partial;
};
__device__ __forceinline__ WarpRing warp_ring(uint8_t* smem, int warp, int lane, int slot_bytes) {
  using namespace block_gemv_layout;
  smem += (128 - (smem_addr(smem) & 127)) & 127;  // tensor copies land on 128-byte boundaries
  const WarpRing w{smem + size_t(warp) * kStages * slot_bytes,
                   reinterpret_cast<uint64_t*>(smem + barrier_offset(slot_bytes)) + warp * kStages,
                   reinterpret_cast<float*>(smem + partial_offset(slot_bytes))};
  if (lane == 0) {
#pragma unroll
    for (int s = 0; s < kStages; ++s) mbar_init(w.bar + s);
    mbar_init_fence();
  }
  __syncwarp();
  return w;
}

// The block's outputs once every warp has written its partial sums (partial [warp][R][kCols],
// warp = gg P + slice): column l of group gg, row r, is its P slices' partials added in slice
// order, written to out [R, N] at column block_col + kCols gg + l unless past N.
template <int R, int kCols>
__device__ __forceinline__ void reduce_slices(const float* __restrict__ partial, float* __restrict__ out,
                                              int64_t block_col, int64_t N, int G, int P) {
  __syncthreads();
  for (int o = int(threadIdx.x); o < G * R * kCols; o += block_gemv_layout::kWarps * 32) {
    const int gg = o / (R * kCols), r = (o / kCols) % R, l = o % kCols;
    float v = partial[(gg * P * R + r) * kCols + l];
    for (int q = 1; q < P; ++q) v = __fadd_rn(v, partial[((gg * P + q) * R + r) * kCols + l]);
    const int64_t c = block_col + kCols * gg + l;
    if (c < N) out[int64_t(r) * N + c] = v;
  }
}

}  // namespace kestrel::cuda::block_gemv
