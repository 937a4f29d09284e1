// The vectorized row decoders (dequantize_row for Q8_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, MXFP4) against ggml's dequantization
// written out element by element, bit for bit, on random blocks: every byte pattern of the
// quants and scales, and finite f16 super-block scales including subnormals and negatives.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "quant/blocks.h"
#include "quant/k_quant_common.h"
#include "quant/quant.h"

namespace kestrel::quant {
namespace {

constexpr int kBlocks = 64;

// A random finite f16 (any sign, subnormals included).
uint16_t random_f16(std::mt19937& rng) {
  for (;;) {
    const auto h = uint16_t(rng());
    if (((h >> 10) & 0x1f) != 0x1f) return h;
  }
}

template <typename Block>
std::vector<Block> random_blocks(uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Block> blocks(kBlocks);
  auto* bytes = reinterpret_cast<uint8_t*>(blocks.data());
  for (size_t i = 0; i < blocks.size() * sizeof(Block); ++i) bytes[i] = uint8_t(rng());
  return blocks;
}

void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    uint32_t a, b;
    std::memcpy(&a, &got[i], 4);
    std::memcpy(&b, &want[i], 4);
    ASSERT_EQ(a, b) << "element " << i << ": " << got[i] << " vs " << want[i];
  }
}

TEST(QuantDecode, Q8_0MatchesTheElementwiseReference) {
  std::mt19937 rng(1);
  auto blocks = random_blocks<BlockQ8_0>(11);
  for (auto& b : blocks) b.d = random_f16(rng);
  std::vector<float> want;
  for (const auto& b : blocks)
    for (int j = 0; j < kQK8_0; ++j) want.push_back(float(b.qs[j]) * f16_to_f32(b.d));
  std::vector<float> got(want.size());
  dequantize_row_q8_0(blocks.data(), int64_t(got.size()), got.data());
  expect_same_bits(got, want);
}

TEST(QuantDecode, Q4_KMatchesTheElementwiseReference) {
  std::mt19937 rng(2);
  auto blocks = random_blocks<BlockQ4_K>(12);
  for (auto& b : blocks) b.d = random_f16(rng), b.dmin = random_f16(rng);
  std::vector<float> want;
  for (const auto& b : blocks) {
    const float d = f16_to_f32(b.d), min = f16_to_f32(b.dmin);
    for (int j = 0; j < kQK_K; ++j) {
      const int sub = j / 32, l = j % 32;  // sub-block, position in it
      uint8_t sc, m;
      get_scale_min_k4(sub, b.scales, &sc, &m);
      const uint8_t byte = b.qs[32 * (sub / 2) + l];
      const int q = sub % 2 == 0 ? byte & 0xF : byte >> 4;
      const float d1 = d * float(sc), m1 = min * float(m);
      want.push_back(d1 * float(q) - m1);
    }
  }
  std::vector<float> got(want.size());
  dequantize_row_q4_k(blocks.data(), int64_t(got.size()), got.data());
  expect_same_bits(got, want);
}

TEST(QuantDecode, Q5_KMatchesTheElementwiseReference) {
  std::mt19937 rng(4);
  auto blocks = random_blocks<BlockQ5_K>(14);
  for (auto& b : blocks) b.d = random_f16(rng), b.dmin = random_f16(rng);
  std::vector<float> want;
  for (const auto& b : blocks) {
    const float d = f16_to_f32(b.d), min = f16_to_f32(b.dmin);
    for (int j = 0; j < kQK_K; ++j) {
      const int sub = j / 32, l = j % 32;  // sub-block, position in it; its fifth bit is bit `sub` of qh[l]
      uint8_t sc, m;
      get_scale_min_k4(sub, b.scales, &sc, &m);
      const uint8_t byte = b.qs[32 * (sub / 2) + l];
      const int q = (sub % 2 == 0 ? byte & 0xF : byte >> 4) + ((b.qh[l] >> sub) & 1 ? 16 : 0);
      const float d1 = d * float(sc), m1 = min * float(m);
      want.push_back(d1 * float(q) - m1);
    }
  }
  std::vector<float> got(want.size());
  dequantize_row_q5_k(blocks.data(), int64_t(got.size()), got.data());
  expect_same_bits(got, want);
}

TEST(QuantDecode, Q6_KMatchesTheElementwiseReference) {
  std::mt19937 rng(3);
  auto blocks = random_blocks<BlockQ6_K>(13);
  for (auto& b : blocks) b.d = random_f16(rng);
  std::vector<float> want;
  for (const auto& b : blocks) {
    const float d = f16_to_f32(b.d);
    for (int j = 0; j < kQK_K; ++j) {
      const int half = j / 128, k = (j % 128) / 32, l = j % 32;  // 128-chunk, quarter, position
      const uint8_t* ql = b.ql + 64 * half;
      const uint8_t* qh = b.qh + 32 * half;
      const uint8_t byte = ql[l + 32 * (k % 2)];  // quarters 0, 2 from ql[l], 1, 3 from ql[l + 32]
      const int nib = k < 2 ? byte & 0xF : byte >> 4;
      const int q = int(nib | (((qh[l] >> (2 * k)) & 3) << 4)) - 32;
      const int8_t sc = b.scales[8 * half + l / 16 + 2 * k];
      want.push_back(d * float(sc) * float(q));
    }
  }
  std::vector<float> got(want.size());
  dequantize_row_q6_k(blocks.data(), int64_t(got.size()), got.data());
  expect_same_bits(got, want);
}

TEST(QuantDecode, Q5_0AndQ5_1MatchTheElementwiseReference) {
  std::mt19937 rng(5);
  auto b0 = random_blocks<BlockQ5_0>(15);
  auto b1 = random_blocks<BlockQ5_1>(16);
  for (auto& b : b0) b.d = random_f16(rng);
  for (auto& b : b1) b.d = random_f16(rng), b.m = random_f16(rng);
  // element j: its nibble (low half of qs[j] for j < 16, high half of qs[j - 16] after), bit j of qh
  auto q5 = [](const uint8_t* qs, const uint8_t* qh, int j) {
    const int nib = j < 16 ? qs[j] & 0xF : qs[j - 16] >> 4;
    return nib | (((qh[j / 8] >> (j % 8)) & 1) << 4);
  };
  std::vector<float> want0, want1;
  for (const auto& b : b0)
    for (int j = 0; j < kQK5; ++j) want0.push_back(float(q5(b.qs, b.qh, j) - 16) * f16_to_f32(b.d));
  for (const auto& b : b1)
    for (int j = 0; j < kQK5; ++j) {
      const float p = float(q5(b.qs, b.qh, j)) * f16_to_f32(b.d);
      want1.push_back(p + f16_to_f32(b.m));
    }
  std::vector<float> got0(want0.size()), got1(want1.size());
  dequantize_row_q5_0(b0.data(), int64_t(got0.size()), got0.data());
  dequantize_row_q5_1(b1.data(), int64_t(got1.size()), got1.data());
  expect_same_bits(got0, want0);
  expect_same_bits(got1, want1);
}

TEST(QuantDecode, Mxfp4MatchesTheElementwiseReference) {
  auto blocks = random_blocks<BlockMxfp4>(17);  // every exponent byte, subnormal scales included
  blocks[0].e = 0, blocks[1].e = 1, blocks[2].e = 254;
  constexpr int kValues[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};  // E2M1 doubled
  std::vector<float> want;
  for (const auto& b : blocks) {
    const float d = std::ldexp(1.0f, int(b.e) - 128);  // the E8M0 scale, halved for the doubled table
    for (int j = 0; j < kQKMxfp4; ++j) {
      const int code = j < 16 ? b.qs[j] & 0xF : b.qs[j - 16] >> 4;
      want.push_back(float(kValues[code]) * d);
    }
  }
  std::vector<float> got(want.size());
  dequantize_row_mxfp4(blocks.data(), int64_t(got.size()), got.data());
  expect_same_bits(got, want);
}

}  // namespace
}  // namespace kestrel::quant
