// The bandwidth-bound block GEMV for Q8_0, and for Q6_K matrices whose rows are not a multiple of
// 8 super-blocks (matmul_quant.cu's gemv_multi_quant_kernel; Q4_K and the other Q6_K have their own on
// the copy engine, quant_gemv_q4k.cuh and quant_gemv_q6k.cuh, and this file's unit GEMV is where
// they came from).
//
// A lane takes a whole unit of 32 elements of one weight row per step: 16 bytes of Q6_K low bits
// and 16 of high bits, or one Q8_0 block. A unit is two runs of 16 elements, each run under one
// scale. The lane unpacks the quants with word-wide masks and byte permutes into float magic
// numbers (2^23 + q, then one subtraction gives q exactly), sums x * q over each run in F32 (an
// FMA chain), and applies the run's scale once. 32 lanes cover 1024 consecutive
// elements (4 super-blocks / 32 Q8_0 blocks) per step, so a warp's loads coalesce, and one step
// is exactly gemv.cuh's 1024-column activation tile; with one row, each lane loads its next
// unit's weights while it computes the current one.
//
// Every row's sum runs in the same order whatever the number of rows R, so a row is bit-identical
// alone or batched; all roundings are explicit (__fmaf_rn / __fmul_rn / __fadd_rn).
//
// Error (u = 2^-24): an element's product passes through at most 16 (run chain) + 3 (scale, run
// pair) + ceil(K / 1024) (the lane's steps) + 5 (warp tree) roundings, so against the double dot
// of the dequantized weights |err| <= gamma(26 + ceil(K / 1024)) * sum_i |w_i x_i|. See
// docs/cuda.md.
#pragma once

#include "backend/cuda/quant_blocks.cuh"

namespace kestrel::cuda {

constexpr int kUnitElems = 32;                  // elements of a lane's unit
constexpr int kUnitStep = 32 * kUnitElems;      // elements a warp covers per step (1024)
// kMagic and magic_byte: quant_blocks.cuh

// 16 bytes from a 2-byte aligned address as 4 words: aligned word loads, realigned by byte
// permutes when the address is 2 mod 4. Reads only [p, p + 16).
__device__ __forceinline__ void ld16_a2(const uint8_t* p, uint32_t (&o)[4]) {
  const uintptr_t mis = reinterpret_cast<uintptr_t>(p) & 2;
  const uint32_t* a = reinterpret_cast<const uint32_t*>(p - mis);
  const uint32_t w0 = __ldg(a), w1 = __ldg(a + 1), w2 = __ldg(a + 2), w3 = __ldg(a + 3);
  const uint32_t w4 = __ldg(reinterpret_cast<const uint16_t*>(p + 14));  // bytes 14, 15 (used when mis)
  const uint32_t sel = mis ? 0x5432u : 0x3210u;
  o[0] = __byte_perm(w0, w1, sel);
  o[1] = __byte_perm(w1, w2, sel);
  o[2] = __byte_perm(w2, w3, sel);
  o[3] = mis ? __byte_perm(w3, w4, sel) : w3;
}

// A unit's runs' scales; each format's quants<kB>(raw, unit, q) gives run A's (kB false) or run
// B's 16 quants as floats (q exactly).
struct Scales {
  float sa, sb;
};

// Q6_K unit u (0..7): half c = u / 4, s = (u / 2) % 2, l0 = 16 (u % 2); run A = elements
// 128c + 32s + l0 + [0, 16) (low nibbles of ql[64c + 32s + l0 ..], bits 2s of qh[32c + l0 ..],
// scale 8c + 2s + u % 2), run B = run A + 64 (high nibbles, bits 2s + 4, scale + 4). Blocks are
// 210 bytes, so only 2-byte aligned: ld16_a2.
struct UQ6_K {
  using Q = QQ6_K;
  __device__ __forceinline__ static int run_a(int u) { return 128 * (u >> 2) + 32 * ((u >> 1) & 1) + 16 * (u & 1); }
  __device__ __forceinline__ static int run_b(int u) { return run_a(u) + 64; }
  struct Raw {
    uint32_t ql[4], qh[4];
    int sa, sb;
    uint16_t d;
  };
  __device__ __forceinline__ static void load(const uint8_t* row, int64_t unit, Raw& r) {
    const uint8_t* b = row + (unit >> 3) * Q::kBlockBytes;
    const int u = int(unit & 7), c = u >> 2, s = (u >> 1) & 1, h = u & 1;
    ld16_a2(b + 64 * c + 32 * s + 16 * h, r.ql);
    ld16_a2(b + 128 + 32 * c + 16 * h, r.qh);
    const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192 + 8 * c + 2 * s + h);
    r.sa = __ldg(sc);
    r.sb = __ldg(sc + 4);
    r.d = __ldg(reinterpret_cast<const uint16_t*>(b + 208));
  }
  __device__ __forceinline__ static void decode(const Raw& r, int64_t, Scales& o) {
    const float d = f16_bits_to_f32(r.d);
    o.sa = __fmul_rn(d, float(r.sa));
    o.sb = __fmul_rn(d, float(r.sb));
  }
  template <bool kB>
  __device__ __forceinline__ static void quants(const Raw& r, int64_t unit, float (&q)[16]) {
    const int s = int(unit >> 1) & 1;
    constexpr float kOff = kMagic + 32.0f;  // q - 32
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      // 6-bit quants, one per byte: low nibble | high bits 2s (run A), high nibble | bits 2s + 4 (run B)
      const uint32_t v = kB ? ((r.ql[k] >> 4) & 0x0F0F0F0Fu) | ((r.qh[k] >> (2 * s)) & 0x30303030u)
                            : (r.ql[k] & 0x0F0F0F0Fu) | ((r.qh[k] << (4 - 2 * s)) & 0x30303030u);
      q[4 * k + 0] = __fsub_rn(magic_byte<0>(v), kOff);
      q[4 * k + 1] = __fsub_rn(magic_byte<1>(v), kOff);
      q[4 * k + 2] = __fsub_rn(magic_byte<2>(v), kOff);
      q[4 * k + 3] = __fsub_rn(magic_byte<3>(v), kOff);
    }
  }
};

// Q8_0: unit = block (34 bytes, 2-byte aligned); run A = its elements [0, 16), run B = [16, 32),
// both under d. The 32 quants are read as aligned words (from the block when it is 4-byte
// aligned, then realigned by byte permutes; from qs when qs is) plus one 2-byte load.
struct UQ8_0 {
  using Q = QQ8_0;
  __device__ __forceinline__ static int run_a(int u) { return 32 * u; }
  __device__ __forceinline__ static int run_b(int u) { return 32 * u + 16; }
  struct Raw {
    uint32_t w[8], extra;
    bool at_block;  // the words start at the block (its first half-word is d)
  };
  __device__ __forceinline__ static void load(const uint8_t* row, int64_t unit, Raw& r) {
    const uint8_t* b = row + unit * Q::kBlockBytes;
    r.at_block = (reinterpret_cast<uintptr_t>(b) & 2) == 0;
    const uint32_t* p = reinterpret_cast<const uint32_t*>(r.at_block ? b : b + 2);
#pragma unroll
    for (int k = 0; k < 8; ++k) r.w[k] = __ldg(p + k);
    r.extra = __ldg(reinterpret_cast<const uint16_t*>(r.at_block ? b + 32 : b));  // qs[30..31], or d
  }
  __device__ __forceinline__ static void decode(const Raw& r, int64_t, Scales& o) {
    o.sa = o.sb = f16_bits_to_f32(uint16_t(r.at_block ? r.w[0] & 0xFFFF : r.extra));
  }
  template <bool kB>
  __device__ __forceinline__ static void quants(const Raw& r, int64_t, float (&q)[16]) {
    const uint32_t sel = r.at_block ? 0x5432u : 0x3210u;
    constexpr float kOff = kMagic + 128.0f;  // int8 q = (q ^ 0x80) - 128
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int i = kB ? k + 4 : k;
      const uint32_t v = __byte_perm(r.w[i], i < 7 ? r.w[i + 1] : r.extra, sel) ^ 0x80808080u;
      q[4 * k + 0] = __fsub_rn(magic_byte<0>(v), kOff);
      q[4 * k + 1] = __fsub_rn(magic_byte<1>(v), kOff);
      q[4 * k + 2] = __fsub_rn(magic_byte<2>(v), kOff);
      q[4 * k + 3] = __fsub_rn(magic_byte<3>(v), kOff);
    }
  }
};

// sum over a run of 16: x[i] * q[i] as an FMA chain in i order.
__device__ __forceinline__ float run_dot(const float (&x)[16], const float (&q)[16]) {
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < 16; ++i) s = __fmaf_rn(x[i], q[i], s);
  return s;
}
__device__ __forceinline__ void load_run(const float* __restrict__ p, float (&x)[16]) {
#pragma unroll
  for (int i = 0; i < 16; i += 4) {
    const float4 v = *reinterpret_cast<const float4*>(p + i);
    x[i] = v.x;
    x[i + 1] = v.y;
    x[i + 2] = v.z;
    x[i + 3] = v.w;
  }
}

// A unit's contribution: sa * A + sb * B (Q8_0 as sa * (A + B): same scale).
template <typename U>
__device__ __forceinline__ float unit_partial(const Scales& w, float pa, float pb) {
  if constexpr (std::is_same_v<U, UQ8_0>)
    return __fmul_rn(w.sa, __fadd_rn(pa, pb));
  else
    return __fadd_rn(__fmul_rn(w.sa, pa), __fmul_rn(w.sb, pb));
}

// The work of one block of the unit GEMV for R rows (1..8) and kCols consecutive columns per
// warp (kWarps warps): x is [R, K] in global memory; R > 1 stages each 1024-column tile of its
// rows in xs (shared, [R * kUnitStep]), R == 1 reads x directly (same values, same order).
// Needs K % 32 == 0 and 16-byte aligned x and weights.
template <typename U, int R, int kWarps, int kCols>
__device__ __forceinline__ void gemv_units_block(float* __restrict__ out,        // [R, N]
                                                 const float* __restrict__ x,    // [R, K]
                                                 const void* __restrict__ w,     // [N, K] blocks
                                                 int64_t K, int64_t N, int64_t block,
                                                 float* __restrict__ xs) {
  using Rows = WeightRows<typename U::Q>;
  const int lane = threadIdx.x & 31;
  const int64_t n0 = (block * kWarps + (threadIdx.x >> 5)) * kCols;
  const uint8_t* wr[kCols];
#pragma unroll
  for (int c = 0; c < kCols; ++c) wr[c] = Rows::row(w, n0 + c < N ? n0 + c : N - 1, K);  // tail: read, drop
  float acc[R][kCols];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int c = 0; c < kCols; ++c) acc[r][c] = 0.0f;
  const int64_t units = K / kUnitElems;
  if (R == 1 && n0 >= N) return;
  // kPrefetch (one row): the weights of the lane's next unit are loaded while the current one
  // is computed; with R > 1 the registers go to the rows' sums instead
  constexpr bool kPrefetch = R == 1;
  typename U::Raw raw[kCols], next[kPrefetch ? kCols : 1];
  if (kPrefetch && n0 < N && lane < units) {
#pragma unroll
    for (int c = 0; c < kCols; ++c) U::load(wr[c], lane, next[c]);
  }
#pragma unroll 1
  for (int64_t kt = 0; kt < K; kt += kUnitStep) {
    const float* xt = x + kt;  // row r at xt + r * xstride
    int64_t xstride = K;
    if constexpr (R > 1) {
      const int len = int(K - kt < kUnitStep ? K - kt : kUnitStep);  // a multiple of 32
      __syncthreads();  // the previous tile is no longer read
      for (int i = threadIdx.x * 4; i < R * len; i += blockDim.x * 4) {
        const int r = i / len, k = i - r * len;
        *reinterpret_cast<float4*>(xs + r * kUnitStep + k) = *reinterpret_cast<const float4*>(x + r * K + kt + k);
      }
      __syncthreads();
      xt = xs;
      xstride = kUnitStep;
      if (n0 >= N) continue;
    }
    const int64_t unit = kt / kUnitElems + lane;
    if (unit >= units) continue;
    if constexpr (kPrefetch) {
#pragma unroll
      for (int c = 0; c < kCols; ++c) raw[c] = next[c];
      if (unit + 32 < units) {
#pragma unroll
        for (int c = 0; c < kCols; ++c) U::load(wr[c], unit + 32, next[c]);
      }
    } else {
#pragma unroll
      for (int c = 0; c < kCols; ++c) U::load(wr[c], unit, raw[c]);
    }
    // the unit's element offsets in the tile: U's unit geometry within its 256-element group
    const int g = 256 * (lane >> 3), u = lane & 7;
    const int oa = g + U::run_a(u), ob = g + U::run_b(u);
    Scales sc[kCols];
#pragma unroll
    for (int c = 0; c < kCols; ++c) U::decode(raw[c], unit, sc[c]);
    // run A of every column, each row's 16 activations read once for the warp's columns
    float q[kCols][16], pa[R][kCols];
#pragma unroll
    for (int c = 0; c < kCols; ++c) U::template quants<false>(raw[c], unit, q[c]);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float xr[16];
      load_run(xt + r * xstride + oa, xr);
#pragma unroll
      for (int c = 0; c < kCols; ++c) pa[r][c] = run_dot(xr, q[c]);
    }
    // run B, then each unit's partial
#pragma unroll
    for (int c = 0; c < kCols; ++c) U::template quants<true>(raw[c], unit, q[c]);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float xr[16];
      load_run(xt + r * xstride + ob, xr);
#pragma unroll
      for (int c = 0; c < kCols; ++c)
        acc[r][c] = __fadd_rn(acc[r][c], unit_partial<U>(sc[c], pa[r][c], run_dot(xr, q[c])));
    }
  }
  if (n0 >= N) return;
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      const float sum = warp_sum(acc[r][c]);
      if (lane == 0 && n0 + c < N) out[int64_t(r) * N + n0 + c] = sum;
    }
  }
}

}  // namespace kestrel::cuda
