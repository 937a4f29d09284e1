// Device decoding of ggml's block formats (quant/blocks.h): each format is a tag type whose
// load8(row, k, f) writes the 8 elements [k, k + 8) of a stored row (k % 8 == 0) as floats,
// each exactly the value quant::dequantize_row gives it (the same products and sums, in the same
// order, with __fmul_rn / __fadd_rn so nvcc never fuses them into an FMA). A warp whose lanes
// take k = 8 * lane + 256 * i reads 256 consecutive elements per step: one K-quant super-block,
// eight Q8_0 / Q5_x / MXFP4 blocks, i.e. a contiguous span of bytes, so the warp's loads coalesce.
//
// WeightRows<W> is how the GEMV and MoE kernels reach a weight row: for the plain types a typed
// pointer (load8 from device_util.cuh), for the block formats a byte pointer to the row's blocks.
#pragma once

#include "backend/cuda/device_util.cuh"
#include "quant/blocks.h"

namespace kestrel::cuda {

__device__ __forceinline__ float f16_bits_to_f32(uint16_t v) { return __half2float(__ushort_as_half(v)); }
__device__ __forceinline__ uint16_t ld_u16(const uint8_t* p) { return *reinterpret_cast<const uint16_t*>(p); }
__device__ __forceinline__ uint32_t ld_u32(const uint8_t* p) { return *reinterpret_cast<const uint32_t*>(p); }
// 4 bytes from a 2-byte aligned address.
__device__ __forceinline__ uint32_t ld_u32_a2(const uint8_t* p) { return uint32_t(ld_u16(p)) | (uint32_t(ld_u16(p + 2)) << 16); }

// Small integers to floats without I2F (a quarter-rate instruction on sm_90, which bounded the
// MoE experts' block decode): byte j of v (0..255) as the float 2^23 + byte, exactly, from which
// one subtraction of kMagic (plus the format's offset) gives the quant's value exactly, the same
// float as the conversion.
constexpr float kMagic = 8388608.0f;  // 2^23
template <int j>
__device__ __forceinline__ float magic_byte(uint32_t v) {
  return __uint_as_float(__byte_perm(v, 0x4B000000u, 0x7440u | j));
}

// 6-bit scale and min of sub-block j (0..7) from a K-quant's 12 packed bytes (get_scale_min_k4).
__device__ __forceinline__ void k_scale_min(const uint8_t* s, int j, float& sc, float& m) {
  if (j < 4) {
    sc = float(s[j] & 63);
    m = float(s[j + 4] & 63);
  } else {
    sc = float((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
    m = float((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

// The same from the header words of a K-quant super-block read as one uint4 h (h.x: d and dmin;
// h.y, h.z, h.w: the 12 packed bytes): the 6-bit scale sc and min mm of sub-block b (0..7).
__device__ __forceinline__ void k_scale_min_bits(const uint4& h, int b, uint32_t& sc, uint32_t& mm) {
  const int j = b & 3;
  const uint32_t sy = (h.y >> (8 * j)) & 0xFF, sz = (h.z >> (8 * j)) & 0xFF;
  if (b < 4) {
    sc = sy & 63;
    mm = sz & 63;
  } else {
    const uint32_t w = (h.w >> (8 * j)) & 0xFF;
    sc = (w & 0xF) | (sy >> 6 << 4);
    mm = (w >> 4) | (sz >> 6 << 4);
  }
}

struct QQ8_0 {
  static constexpr int kBlockElems = quant::kQK8_0, kBlockBytes = sizeof(quant::BlockQ8_0);
  static constexpr DType kDType = DType::kQ8_0;
  __device__ __forceinline__ static void load8(const uint8_t* row, int64_t k, float (&f)[8]) {
    const uint8_t* b = row + (k / 32) * kBlockBytes;
    const uint8_t* q = b + 2 + (k & 31);  // 2-byte aligned
    decode8(ld_u32_a2(q), ld_u32_a2(q + 4), f16_bits_to_f32(ld_u16(b)), f);
  }
  // 8 quants (q0: the first 4, a byte each) under the block's scale d as ggml's values q d.
  __device__ __forceinline__ static void decode8(uint32_t q0, uint32_t q1, float d, float (&f)[8]) {
    constexpr float kOff = kMagic + 128.0f;  // the int8 quants offset by 128 (the sign bit flipped)
    const uint32_t words[2] = {q0, q1};
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const uint32_t v = words[i] ^ 0x80808080u;
      f[4 * i + 0] = __fmul_rn(__fsub_rn(magic_byte<0>(v), kOff), d);
      f[4 * i + 1] = __fmul_rn(__fsub_rn(magic_byte<1>(v), kOff), d);
      f[4 * i + 2] = __fmul_rn(__fsub_rn(magic_byte<2>(v), kOff), d);
      f[4 * i + 3] = __fmul_rn(__fsub_rn(magic_byte<3>(v), kOff), d);
    }
  }
};

// Q5_0 / Q5_1: element j of a block is the low nibble of qs[j] (j < 16) or the high nibble of
// qs[j - 16], plus bit j of qh times 16.
template <bool kMin>
struct QQ5 {
  static constexpr int kBlockElems = quant::kQK5;
  static constexpr int kBlockBytes = kMin ? sizeof(quant::BlockQ5_1) : sizeof(quant::BlockQ5_0);
  static constexpr DType kDType = kMin ? DType::kQ5_1 : DType::kQ5_0;
  __device__ __forceinline__ static void load8(const uint8_t* row, int64_t k, float (&f)[8]) {
    const uint8_t* b = row + (k / 32) * kBlockBytes;
    const float d = f16_bits_to_f32(ld_u16(b));
    const float m = kMin ? f16_bits_to_f32(ld_u16(b + 2)) : 0.0f;
    const uint8_t* qhp = b + (kMin ? 4 : 2);
    const uint32_t qh = uint32_t(ld_u16(qhp)) | (uint32_t(ld_u16(qhp + 2)) << 16);
    const uint8_t* qs = qhp + 4;
    const int j0 = int(k & 31);
    const int shift = j0 < 16 ? 0 : 4;
    const uint8_t* q = qs + (j0 & 15);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int j = j0 + i;
      const int v = ((q[i] >> shift) & 0xF) | int(((qh >> j) & 1u) << 4);
      f[i] = kMin ? __fadd_rn(__fmul_rn(float(v), d), m) : __fmul_rn(float(v - 16), d);
    }
  }
};
using QQ5_0 = QQ5<false>;
using QQ5_1 = QQ5<true>;

// Q4_K / Q5_K: super-block offset o = 64c + 32h + l: quant nibble h of qs[32c + l] (+ 16 if bit
// 2c + h of qh[l], Q5_K), sub-block 2c + h; x = (d * sc) * q - (dmin * m).
template <bool kFive>
struct QQK4 {
  static constexpr int kBlockElems = quant::kQK_K;
  static constexpr int kBlockBytes = kFive ? sizeof(quant::BlockQ5_K) : sizeof(quant::BlockQ4_K);
  static constexpr DType kDType = kFive ? DType::kQ5_K : DType::kQ4_K;
  __device__ __forceinline__ static void load8(const uint8_t* row, int64_t k, float (&f)[8]) {
    const uint8_t* b = row + (k / 256) * kBlockBytes;
    const uint32_t dd = ld_u32(b);
    const float d = f16_bits_to_f32(uint16_t(dd & 0xFFFF)), dmin = f16_bits_to_f32(uint16_t(dd >> 16));
    const int o = int(k & 255), c = o >> 6, h = (o >> 5) & 1, l = o & 31;
    float sc, m;
    k_scale_min(b + 4, 2 * c + h, sc, m);
    const float d1 = __fmul_rn(d, sc), m1 = __fmul_rn(dmin, m);
    const uint8_t* qs = b + 4 + quant::kKScaleSize + (kFive ? 32 : 0) + 32 * c + l;  // 8-byte aligned
    const uint2 raw = *reinterpret_cast<const uint2*>(qs);
    uint2 hb = make_uint2(0, 0);
    if (kFive) hb = *reinterpret_cast<const uint2*>(b + 4 + quant::kKScaleSize + l);
    const uint32_t words[2] = {raw.x, raw.y}, hwords[2] = {hb.x, hb.y};
#pragma unroll
    for (int w = 0; w < 2; ++w) {
      // the 4 quants of a word, one a byte: nibble h (+ 16 from bit 2c + h of qh, Q5_K)
      uint32_t v = (words[w] >> (4 * h)) & 0x0F0F0F0Fu;
      if (kFive) v |= ((hwords[w] >> (2 * c + h)) & 0x01010101u) << 4;
      f[4 * w + 0] = __fsub_rn(__fmul_rn(d1, __fsub_rn(magic_byte<0>(v), kMagic)), m1);
      f[4 * w + 1] = __fsub_rn(__fmul_rn(d1, __fsub_rn(magic_byte<1>(v), kMagic)), m1);
      f[4 * w + 2] = __fsub_rn(__fmul_rn(d1, __fsub_rn(magic_byte<2>(v), kMagic)), m1);
      f[4 * w + 3] = __fsub_rn(__fmul_rn(d1, __fsub_rn(magic_byte<3>(v), kMagic)), m1);
    }
  }
};
using QQ4_K = QQK4<false>;
using QQ5_K = QQK4<true>;

// Q6_K: super-block offset o = 128c + 32s + l: low nibble of ql[64c + l + 32 (s & 1)] (high
// nibble when s >= 2), high two bits (2s) of qh[32c + l]; scale 8c + 2s + l / 16;
// x = (d * scale) * (q - 32).
struct QQ6_K {
  static constexpr int kBlockElems = quant::kQK_K, kBlockBytes = sizeof(quant::BlockQ6_K);
  static constexpr DType kDType = DType::kQ6_K;
  __device__ __forceinline__ static void load8(const uint8_t* row, int64_t k, float (&f)[8]) {
    const uint8_t* b = row + (k / 256) * kBlockBytes;
    const float d = f16_bits_to_f32(ld_u16(b + 208));
    const int o = int(k & 255), c = o >> 7, s = (o >> 5) & 3, l = o & 31;
    const uint8_t* ql = b + 64 * c + l + 32 * (s & 1);  // 2-byte aligned (block 210 bytes)
    const uint8_t* qh = b + 128 + 32 * c + l;
    const float ds = __fmul_rn(d, float(reinterpret_cast<const int8_t*>(b + 192)[8 * c + 2 * s + l / 16]));
    const int lshift = s >= 2 ? 4 : 0;
    constexpr float kOff = kMagic + 32.0f;  // q - 32
#pragma unroll
    for (int i = 0; i < 8; i += 4) {
      // the 6-bit quants of 4 elements, one a byte
      const uint32_t v = ((ld_u32_a2(ql + i) >> lshift) & 0x0F0F0F0Fu) | (((ld_u32_a2(qh + i) >> (2 * s)) & 0x03030303u) << 4);
      f[i + 0] = __fmul_rn(ds, __fsub_rn(magic_byte<0>(v), kOff));
      f[i + 1] = __fmul_rn(ds, __fsub_rn(magic_byte<1>(v), kOff));
      f[i + 2] = __fmul_rn(ds, __fsub_rn(magic_byte<2>(v), kOff));
      f[i + 3] = __fmul_rn(ds, __fsub_rn(magic_byte<3>(v), kOff));
    }
  }
};

// MXFP4: x = e2m1(q) * 2^(e - 128) with the doubled E2M1 table (quant/mxfp4.cc).
struct QMXFP4 {
  static constexpr int kBlockElems = quant::kQKMxfp4, kBlockBytes = sizeof(quant::BlockMxfp4);
  static constexpr DType kDType = DType::kMXFP4;
  __device__ __forceinline__ static float e8m0_half(uint32_t e) {
    return __uint_as_float(e < 2 ? 0x00200000u << e : (e - 1) << 23);
  }
  __device__ __forceinline__ static float value(uint32_t nib) {
    // 0, 1, 2, 3, 4, 6, 8, 12 and their negatives, from the nibble's bits
    const uint32_t mag = nib & 7;
    const float v = mag < 4 ? float(mag) : float((mag & 1 ? 3 : 2) << ((mag >> 1) - 1));
    return nib & 8 ? 0.0f - v : v;  // +0 for the negative zero code, as the table's int 0
  }
  __device__ __forceinline__ static void load8(const uint8_t* row, int64_t k, float (&f)[8]) {
    const uint8_t* b = row + (k / 32) * kBlockBytes;
    const float d = e8m0_half(b[0]);
    const int j0 = int(k & 31);
    const int shift = j0 < 16 ? 0 : 4;
    const uint8_t* q = b + 1 + (j0 & 15);
#pragma unroll
    for (int i = 0; i < 8; ++i) f[i] = __fmul_rn(value((q[i] >> shift) & 0xF), d);
  }
};

// How kernels reach row n of a weight matrix [N, K] and 8 of its elements.
template <typename W>
struct WeightRows {
  using Row = const W*;
  __device__ __forceinline__ static Row row(const void* w, int64_t n, int64_t K) { return static_cast<const W*>(w) + n * K; }
  __device__ __forceinline__ static void load8(Row r, int64_t k, float (&f)[8]) { kestrel::cuda::load8(r + k, f); }
};
template <typename Q>
  requires requires { Q::kBlockBytes; }
struct WeightRows<Q> {
  using Row = const uint8_t*;
  __device__ __forceinline__ static Row row(const void* w, int64_t n, int64_t K) {
    return static_cast<const uint8_t*>(w) + n * (K / Q::kBlockElems) * Q::kBlockBytes;
  }
  __device__ __forceinline__ static void load8(Row r, int64_t k, float (&f)[8]) { Q::load8(r, k, f); }
};

// Calls fn.template operator()<Q>() with Q the tag type of a block dtype.
template <typename Fn>
void dispatch_quant(DType dt, const char* what, Fn&& fn) {
  switch (dt) {
    case DType::kQ8_0: fn.template operator()<QQ8_0>(); break;
    case DType::kQ5_0: fn.template operator()<QQ5_0>(); break;
    case DType::kQ5_1: fn.template operator()<QQ5_1>(); break;
    case DType::kQ4_K: fn.template operator()<QQ4_K>(); break;
    case DType::kQ5_K: fn.template operator()<QQ5_K>(); break;
    case DType::kQ6_K: fn.template operator()<QQ6_K>(); break;
    case DType::kMXFP4: fn.template operator()<QMXFP4>(); break;
    default: unsupported(what, ": weight dtype ", dtype_name(dt), " is not supported on CUDA");
  }
}

// Plain or block weight dtypes: dispatch_weight's types, then dispatch_quant's tags.
template <typename Fn>
void dispatch_any_weight(DType dt, const char* what, Fn&& fn) {
  if (dtype_is_quantized(dt)) dispatch_quant(dt, what, fn);
  else dispatch_weight(dt, what, fn);
}

// load8 for a block dtype chosen at run time (a uniform branch): the embeddings and n-gram
// tables, where one kernel serves every format.
__device__ __forceinline__ void load8_block(DType dt, const uint8_t* row, int64_t k, float (&f)[8]) {
  switch (dt) {
    case DType::kQ8_0: QQ8_0::load8(row, k, f); break;
    case DType::kQ5_0: QQ5_0::load8(row, k, f); break;
    case DType::kQ5_1: QQ5_1::load8(row, k, f); break;
    case DType::kQ4_K: QQ4_K::load8(row, k, f); break;
    case DType::kQ5_K: QQ5_K::load8(row, k, f); break;
    case DType::kQ6_K: QQ6_K::load8(row, k, f); break;
    default: QMXFP4::load8(row, k, f); break;
  }
}

}  // namespace kestrel::cuda
