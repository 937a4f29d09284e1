// Known-answer tests for the block formats: tiny inputs whose quantized bytes were derived by
// hand from llama.cpp's reference algorithms (the derivations are in the comments), plus the
// building blocks the bit-identity rests on (ggml's rounding, f16 conversion, block layouts).
#include <gtest/gtest.h>
#include <immintrin.h>

#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "quant/blocks.h"
#include "quant/ggml_type.h"
#include "quant/k_quant_common.h"
#include "quant/quant.h"

namespace kestrel::quant {
namespace {

TEST(QuantLayout, BlockSizesMatchGgml) {
  EXPECT_EQ(ggml_row_bytes(GgmlType::kQ8_0, 32), 34u);
  EXPECT_EQ(ggml_row_bytes(GgmlType::kQ4_K, 256), 144u);
  EXPECT_EQ(ggml_row_bytes(GgmlType::kQ5_K, 256), 176u);
  EXPECT_EQ(ggml_row_bytes(GgmlType::kQ6_K, 256), 210u);
  EXPECT_EQ(ggml_row_bytes(GgmlType::kMXFP4, 32), 17u);
  EXPECT_EQ(ggml_row_bytes(GgmlType::kBF16, 7), 14u);
  EXPECT_EQ(ggml_row_bytes(GgmlType::kF16, 3), 6u);
  EXPECT_EQ(ggml_row_bytes(GgmlType::kQ4_K, 4096), 16u * 144u);
  // Field offsets inside the blocks (ggml's struct order).
  EXPECT_EQ(offsetof(BlockQ4_K, scales), 4u);
  EXPECT_EQ(offsetof(BlockQ4_K, qs), 16u);
  EXPECT_EQ(offsetof(BlockQ5_K, qh), 16u);
  EXPECT_EQ(offsetof(BlockQ5_K, qs), 48u);
  EXPECT_EQ(offsetof(BlockQ6_K, qh), 128u);
  EXPECT_EQ(offsetof(BlockQ6_K, scales), 192u);
  EXPECT_EQ(offsetof(BlockQ6_K, d), 208u);
  EXPECT_EQ(offsetof(BlockMxfp4, qs), 1u);
  EXPECT_EQ(ggml_row_bytes(GgmlType::kQ5_0, 32), 22u);
  EXPECT_EQ(ggml_row_bytes(GgmlType::kQ5_1, 32), 24u);
  EXPECT_EQ(offsetof(BlockQ5_0, qh), 2u);
  EXPECT_EQ(offsetof(BlockQ5_0, qs), 6u);
  EXPECT_EQ(offsetof(BlockQ5_1, qh), 4u);
  EXPECT_EQ(offsetof(BlockQ5_1, qs), 8u);
}

TEST(QuantLayout, TypeIdsAndNames) {
  EXPECT_EQ(uint32_t(GgmlType::kQ8_0), 8u);
  EXPECT_EQ(uint32_t(GgmlType::kQ4_K), 12u);
  EXPECT_EQ(uint32_t(GgmlType::kQ5_K), 13u);
  EXPECT_EQ(uint32_t(GgmlType::kQ6_K), 14u);
  EXPECT_EQ(uint32_t(GgmlType::kBF16), 30u);
  EXPECT_EQ(uint32_t(GgmlType::kMXFP4), 39u);
  for (uint32_t removed : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u, 40u, 1000u}) EXPECT_FALSE(ggml_type_traits(removed));
  GgmlType t;
  ASSERT_TRUE(ggml_type_from_name("q4_k", &t));
  EXPECT_EQ(t, GgmlType::kQ4_K);
  EXPECT_FALSE(ggml_type_from_name("q4_k_m", &t));
}

TEST(QuantRounding, NearestIntTiesToEven) {
  EXPECT_EQ(nearest_int(0.5f), 0);
  EXPECT_EQ(nearest_int(1.5f), 2);
  EXPECT_EQ(nearest_int(2.5f), 2);
  EXPECT_EQ(nearest_int(-0.5f), 0);
  EXPECT_EQ(nearest_int(-1.5f), -2);
  EXPECT_EQ(nearest_int(-31.5f), -32);
  EXPECT_EQ(nearest_int(14.5f), 14);
  EXPECT_EQ(nearest_int(15.5f), 16);
  EXPECT_EQ(nearest_int(2.49999f), 2);
  EXPECT_EQ(nearest_int(-0.0f), 0);
  EXPECT_EQ(nearest_int(4194303.f), 4194303);
}

// ggml converts with the F16C instruction on x86 (round to nearest even); so must we.
TEST(QuantRounding, F16ConversionMatchesF16c) {
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) {
    uint32_t bits = rng();
    if (i % 2) bits = (bits & 0x807fffffu) | (uint32_t(100 + rng() % 60) << 23);  // mostly the f16 range
    float f;
    std::memcpy(&f, &bits, 4);
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_f16(f), _cvtss_sh(f, 0)) << "bits 0x" << std::hex << bits;
  }
}

std::vector<uint8_t> quantize(GgmlType t, const std::vector<float>& x) {
  std::vector<uint8_t> out(ggml_row_bytes(t, int64_t(x.size())), 0xAA);
  quantize_row(t, x.data(), int64_t(x.size()), out.data());
  return out;
}

// d = 127/127 = 1 exactly (f16 0x3C00); q = roundf(x): halves round away from zero (2.5 -> 3),
// unlike the K-quants' nearest_int.
TEST(QuantKnownAnswer, Q8_0) {
  std::vector<float> x(32, 0.0f);
  x[0] = -127.f;
  x[1] = 2.5f;
  x[2] = -2.5f;
  x[3] = 0.49f;
  x[4] = 126.5f;
  x[5] = 1.0f;
  auto q = quantize(GgmlType::kQ8_0, x);
  const auto* b = reinterpret_cast<const BlockQ8_0*>(q.data());
  EXPECT_EQ(b->d, 0x3C00);
  const int8_t expect[6] = {-127, 3, -3, 0, 127, 1};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(b->qs[i], expect[i]) << i;
  for (int i = 6; i < 32; ++i) EXPECT_EQ(b->qs[i], 0);
  std::vector<float> zeros(64, 0.0f);
  auto z = quantize(GgmlType::kQ8_0, zeros);
  for (uint8_t byte : z) EXPECT_EQ(byte, 0);
}

// max|x| = 6: floor(log2 6) = 2, e = 2 - 2 + 127 = 127, scale 2^(127-128) = 0.5 on the doubled
// table {0,1,2,3,4,6,8,12} -> representable {0,.5,1,1.5,2,3,4,6}; ties keep the first index
// (0.25 -> 0, 0.75 -> 0.5, 5 -> 4 at index 6, -5 -> -4 at index 14), and -0.1 -> +0 (index 0 before index 8).
// Q5_0 on x_j = (j - 16) / 2: the largest magnitude is x_0 = -8, so d = -8 / -16 = 0.5 (f16
// 0x3800), 1/d = 2 and q_j = trunc(2 x_j + 16.5) = j. Element j's low nibble is in qs[j % 16]
// (low half for j < 16), its fifth bit is bit j of qh: set for j >= 16. Exact on the way back.
TEST(QuantKnownAnswer, Q5_0) {
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[size_t(j)] = float(j - 16) * 0.5f;
  std::vector<uint8_t> q(22);
  quantize_row(GgmlType::kQ5_0, x.data(), 32, q.data());
  const auto* b = reinterpret_cast<const BlockQ5_0*>(q.data());
  EXPECT_EQ(b->d, 0x3800);
  uint32_t qh;
  std::memcpy(&qh, b->qh, 4);
  EXPECT_EQ(qh, 0xFFFF0000u);
  for (int j = 0; j < 16; ++j) EXPECT_EQ(b->qs[j], uint8_t(j | (j << 4))) << j;
  std::vector<float> back(32);
  dequantize_row(GgmlType::kQ5_0, q.data(), 32, back.data());
  EXPECT_EQ(back, x);
  // A positive maximum makes d negative: x = 8 -> q = 0 (-16 d = 8), x = -8 clips to q = 31 (15 d = -7.5).
  std::vector<float> y(32, 0.0f);
  y[3] = 8.0f;
  y[4] = -8.0f;
  quantize_row(GgmlType::kQ5_0, y.data(), 32, q.data());
  dequantize_row(GgmlType::kQ5_0, q.data(), 32, back.data());
  EXPECT_EQ(b->d, 0xB800);  // -0.5
  EXPECT_EQ(back[3], 8.0f);
  EXPECT_EQ(back[4], -7.5f);
  EXPECT_EQ(back[0], 0.0f);  // q = trunc(0 + 16.5) = 16
}

// Q5_1 on x_j = 1 + j / 4: min 1, max 8.75, d = 7.75 / 31 = 0.25 (f16 0x3400), m = 1 (0x3C00),
// q_j = trunc((x_j - 1) * 4 + 0.5) = j; exact on the way back.
TEST(QuantKnownAnswer, Q5_1) {
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[size_t(j)] = 1.0f + float(j) * 0.25f;
  std::vector<uint8_t> q(24);
  quantize_row(GgmlType::kQ5_1, x.data(), 32, q.data());
  const auto* b = reinterpret_cast<const BlockQ5_1*>(q.data());
  EXPECT_EQ(b->d, 0x3400);
  EXPECT_EQ(b->m, 0x3C00);
  uint32_t qh;
  std::memcpy(&qh, b->qh, 4);
  EXPECT_EQ(qh, 0xFFFF0000u);
  for (int j = 0; j < 16; ++j) EXPECT_EQ(b->qs[j], uint8_t(j | (j << 4))) << j;
  std::vector<float> back(32);
  dequantize_row(GgmlType::kQ5_1, q.data(), 32, back.data());
  EXPECT_EQ(back, x);
  double want = 0;
  for (float v : x) want += double(v) * v;
  EXPECT_FLOAT_EQ(dot_row(GgmlType::kQ5_1, q.data(), x.data(), 32), float(want));
}

TEST(QuantKnownAnswer, Mxfp4) {
  std::vector<float> x(32, 0.0f);
  const float in[8] = {6.f, -6.f, 0.25f, 0.75f, 5.f, -5.f, 2.4f, -0.1f};
  const int idx[8] = {7, 15, 0, 1, 6, 14, 4, 0};
  for (int i = 0; i < 8; ++i) x[i] = in[i];
  x[16] = 3.f;   // high nibble of qs[0]: index 5
  x[17] = -1.f;  // high nibble of qs[1]: index 10
  auto q = quantize(GgmlType::kMXFP4, x);
  const auto* b = reinterpret_cast<const BlockMxfp4*>(q.data());
  EXPECT_EQ(b->e, 127);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(b->qs[i] & 0xF, idx[i]) << i;
  EXPECT_EQ(b->qs[0] >> 4, 5);
  EXPECT_EQ(b->qs[1] >> 4, 10);
  std::vector<float> y(32);
  dequantize_row(GgmlType::kMXFP4, q.data(), 32, y.data());
  EXPECT_EQ(y[0], 6.f);
  EXPECT_EQ(y[2], 0.f);
  EXPECT_EQ(y[3], 0.5f);
  EXPECT_EQ(y[5], -4.f);
  EXPECT_EQ(y[16], 3.f);
}

// Constant 1.0: every sub-block's make_qx_quants picks iscale -32 (the 18 trials never beat it
// strictly), so L = 0 (q - 32 = -32) and scale = sum(x^3 l) / sum(x^2 l^2) = -1/32. The super-
// block iscale is -128 / (-1/32) = 4096: d = f16(2^-12) = 0x0C00, every int8 scale -128, and
// the re-quantization gives l = round(1 / (2^-12 * -128)) = -32 again.
TEST(QuantKnownAnswer, Q6_KConstant) {
  std::vector<float> x(256, 1.0f);
  auto q = quantize(GgmlType::kQ6_K, x);
  const auto* b = reinterpret_cast<const BlockQ6_K*>(q.data());
  EXPECT_EQ(b->d, 0x0C00);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(b->scales[i], -128);
  for (int i = 0; i < 128; ++i) EXPECT_EQ(b->ql[i], 0);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(b->qh[i], 0);
  std::vector<float> y(256);
  dequantize_row(GgmlType::kQ6_K, q.data(), 256, y.data());
  for (float v : y) EXPECT_EQ(v, 1.0f);
}

// Constant 1.0: make_qkx2_quants clamps the min to 0, starts at iscale = nmax, and every trial
// has a singular normal matrix (D = 0), so scale = 1/nmax, L = nmax, min = 0. The 6-bit scale is
// 63 for every sub-block, mins 0; d = f16((1/nmax)/63): 0x1456 for Q4_K, 0x1032 for Q5_K.
// Packed scales: bytes 0-3 = 63 | (63 >> 4) << 6 = 0xFF, bytes 4-7 = 0, bytes 8-11 = 0x0F.
TEST(QuantKnownAnswer, Q4_KConstant) {
  std::vector<float> x(256, 1.0f);
  auto q = quantize(GgmlType::kQ4_K, x);
  const auto* b = reinterpret_cast<const BlockQ4_K*>(q.data());
  EXPECT_EQ(b->d, 0x1456);
  EXPECT_EQ(b->dmin, 0);
  const uint8_t scales[12] = {0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0, 0x0F, 0x0F, 0x0F, 0x0F};
  for (int i = 0; i < 12; ++i) EXPECT_EQ(b->scales[i], scales[i]) << i;
  for (int i = 0; i < 128; ++i) EXPECT_EQ(b->qs[i], 0xFF);
}

TEST(QuantKnownAnswer, Q5_KConstant) {
  std::vector<float> x(256, 1.0f);
  auto q = quantize(GgmlType::kQ5_K, x);
  const auto* b = reinterpret_cast<const BlockQ5_K*>(q.data());
  EXPECT_EQ(b->d, 0x1032);
  EXPECT_EQ(b->dmin, 0);
  const uint8_t scales[12] = {0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0, 0x0F, 0x0F, 0x0F, 0x0F};
  for (int i = 0; i < 12; ++i) EXPECT_EQ(b->scales[i], scales[i]) << i;
  for (int i = 0; i < 128; ++i) EXPECT_EQ(b->qs[i], 0xFF);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(b->qh[i], 0xFF);
}

// All-zero rows quantize to all-zero blocks and back to zeros in every format.
TEST(QuantKnownAnswer, ZerosEverywhere) {
  for (GgmlType t : {GgmlType::kQ8_0, GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kQ4_K, GgmlType::kQ5_K,
                     GgmlType::kQ6_K, GgmlType::kMXFP4}) {
    std::vector<float> x(512, 0.0f);
    auto q = quantize(t, x);
    // Q5_0 is the exception: d = 0 / -16 = -0 (f16 0x8000) and every q = trunc(0 + 16.5) = 16.
    if (t != GgmlType::kQ5_0) {
      for (size_t i = 0; i < q.size(); ++i) ASSERT_EQ(q[i], 0) << ggml_type_name(t) << " byte " << i;
    }
    std::vector<float> y(512, 1.0f);
    dequantize_row(t, q.data(), 512, y.data());
    for (float v : y) ASSERT_EQ(v, 0.0f);
  }
}

// The 6-bit scale/min packing round-trips for every value and sub-block.
TEST(QuantKnownAnswer, ScaleMinPacking) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 1000; ++trial) {
    uint8_t ls[8], lm[8], packed[12];
    std::memset(packed, 0xEE, sizeof(packed));
    for (int j = 0; j < 8; ++j) {
      ls[j] = uint8_t(rng() % 64);
      lm[j] = uint8_t(rng() % 64);
      put_scale_min_k4(j, ls[j], lm[j], packed);
    }
    for (int j = 0; j < 8; ++j) {
      uint8_t s, m;
      get_scale_min_k4(j, packed, &s, &m);
      ASSERT_EQ(s, ls[j]);
      ASSERT_EQ(m, lm[j]);
    }
  }
}

}  // namespace
}  // namespace kestrel::quant
