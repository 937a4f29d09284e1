// Byte layouts of the block formats kestrel quantizes, as ggml defines them (ggml-common.h):
// little-endian, packed, no padding. Each is checked against ggml's block size below.
#pragma once

#include <cstdint>

namespace kestrel::quant {

constexpr int kQK8_0 = 32;    // elements per Q8_0 block
constexpr int kQK5 = 32;      // elements per Q5_0 / Q5_1 block
constexpr int kQK_K = 256;    // elements per K-quant super-block
constexpr int kQKMxfp4 = 32;  // elements per MXFP4 block
constexpr int kKScaleSize = 12;

// Q8_0: x[i] = d * qs[i].
struct BlockQ8_0 {
  uint16_t d;          // f16 scale
  int8_t qs[kQK8_0];   // [32]
};

// Q5_0: x[i] = d * (q_i - 16), q in 0..31: low 4 bits of element i < 16 in the low nibble of
// qs[i], of element i >= 16 in the high nibble of qs[i-16]; the fifth bit of element i is bit i
// of qh (little-endian u32).
struct BlockQ5_0 {
  uint16_t d;              // f16 scale
  uint8_t qh[4];
  uint8_t qs[kQK5 / 2];    // [16]
};

// Q5_1: x[i] = d * q_i + m, q in 0..31, laid out as Q5_0.
struct BlockQ5_1 {
  uint16_t d;              // f16 scale
  uint16_t m;              // f16 minimum
  uint8_t qh[4];
  uint8_t qs[kQK5 / 2];
};

// Q4_K: 8 sub-blocks of 32; x = d * sc[j] * q - dmin * m[j], q in 0..15, sc/m 6-bit.
struct BlockQ4_K {
  uint16_t d;                     // f16 super-block scale of the sub-block scales
  uint16_t dmin;                  // f16 super-block scale of the sub-block mins
  uint8_t scales[kKScaleSize];    // 8 scales + 8 mins, 6 bits each (packing: scale_min_k4)
  uint8_t qs[kQK_K / 2];          // [128] 4-bit quants: byte l of chunk c holds elements 64c+l (low), 64c+32+l (high)
};

// Q5_K: as Q4_K with a fifth bit per element in qh.
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleSize];
  uint8_t qh[kQK_K / 8];   // [32] high bits: bit 2c of qh[l] -> element 64c+l, bit 2c+1 -> 64c+32+l
  uint8_t qs[kQK_K / 2];   // [128] low 4 bits, laid out as Q4_K's
};

// Q6_K: 16 sub-blocks of 16; x = d * scales[j] * (q - 32), q in 0..63, scales int8.
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];      // [128] low 4 bits
  uint8_t qh[kQK_K / 4];      // [64] high 2 bits
  int8_t scales[kQK_K / 16];  // [16]
  uint16_t d;                 // f16 super-block scale
};

// MXFP4 (OCP microscaling): x[i] = 2^(e-127) * e2m1(q_i); ggml stores e2m1 values doubled
// (kMxfp4Values) and halves the scale. Element i < 16 in the low nibble of qs[i], i >= 16 in the
// high nibble of qs[i-16].
struct BlockMxfp4 {
  uint8_t e;                  // E8M0 shared exponent
  uint8_t qs[kQKMxfp4 / 2];   // [16]
};

static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockMxfp4) == 17);

}  // namespace kestrel::quant
