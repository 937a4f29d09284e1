// Bit-identity against a second, independent transcription of llama.cpp's reference quantizers:
// tools/quant_reference_f32.py re-implements them in Python with every operation rounded to
// single precision and printed these FNV-1a hashes of the quantized bytes of 4096 values (16
// super-blocks) per input family. The inputs come from a tiny LCG both sides reproduce exactly:
// 0 = near-Gaussian (sum of four uniforms), 1 = heavy-tailed (divided by uniform + 0.05),
// 2 = near-Gaussian with 1% of values x100, 3 = sub-blocks of mixed kinds (Lcg::mixed).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "quant/ggml_type.h"
#include "quant/quant.h"

namespace kestrel::quant {
namespace {

class Lcg {
 public:
  explicit Lcg(uint32_t seed) : s_(seed) {}
  float u() {
    s_ = s_ * 1664525u + 1013904223u;
    return float(s_ >> 8) * 0x1p-24f;
  }
  float sample(int kind) {
    float a = u();
    a = a + u();
    a = a + u();
    a = a + u();
    float g = a - 2.0f;
    if (kind == 1) g = g / (u() + 0.05f);
    if (kind == 2 && u() < 0.01f) g = g * 100.0f;
    return g * 0.02f;
  }
  // Family 3, value k: its 32-value sub-block's mode picks near-Gaussian, its magnitude, the
  // constant -0.01 (a flat sub-block), zeros, or near-Gaussian times 1e-17 (under Q6_K's floor),
  // so every super-block mixes the scale searches' edge cases (they run 8 sub-blocks at once).
  float mixed(int k) {
    const int mode = (k / 32) * 7 % 5;
    if (mode == 2) return -0.01f;
    if (mode == 3) return 0.0f;
    const float g = sample(0);
    if (mode == 1) return std::fabs(g);
    if (mode == 4) return g * 1e-17f;
    return g;
  }

 private:
  uint32_t s_;
};

uint64_t fnv1a64(const std::vector<uint8_t>& bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint8_t b : bytes) h = (h ^ b) * 0x100000001b3ull;
  return h;
}

struct Expected {
  GgmlType type;
  int kind;
  uint64_t hash;
};

// Printed by tools/quant_reference_f32.py.
const Expected kExpected[] = {
  {GgmlType::kQ8_0, 0, 0x6e8351e251fe2398ull},
  {GgmlType::kQ4_K, 0, 0xf46a853958fc6134ull},
  {GgmlType::kQ5_K, 0, 0xc827c61b1ddf0b2eull},
  {GgmlType::kQ6_K, 0, 0x2005e6b524b5d61bull},
  {GgmlType::kMXFP4, 0, 0xd325ee446c736ea3ull},
  {GgmlType::kQ8_0, 1, 0xc3862dd31f070fbaull},
  {GgmlType::kQ4_K, 1, 0xc154e59adea40332ull},
  {GgmlType::kQ5_K, 1, 0xe76b830532db4a19ull},
  {GgmlType::kQ6_K, 1, 0x79f44de0fff998cdull},
  {GgmlType::kMXFP4, 1, 0x42f9ca62a49843b9ull},
  {GgmlType::kQ8_0, 2, 0x5bcd222b00b0430eull},
  {GgmlType::kQ4_K, 2, 0x5b9e06229dad4243ull},
  {GgmlType::kQ5_K, 2, 0x05a8f349e8377053ull},
  {GgmlType::kQ6_K, 2, 0x5f4893ee59ac4ae7ull},
  {GgmlType::kMXFP4, 2, 0xda3459eaeaad80a2ull},
  {GgmlType::kQ5_0, 0, 0x94fd68b45a3a7091ull},
  {GgmlType::kQ5_1, 0, 0xd1ee52a732bca501ull},
  {GgmlType::kQ5_0, 1, 0xf199dead89054d9dull},
  {GgmlType::kQ5_1, 1, 0x0dff35ecf44044ceull},
  {GgmlType::kQ5_0, 2, 0xef5774f1844837f6ull},
  {GgmlType::kQ5_1, 2, 0x89ab3fda18cc176dull},
  {GgmlType::kQ8_0, 3, 0x88a23828cf4a125dull},
  {GgmlType::kQ4_K, 3, 0xa3283d47299a9b79ull},
  {GgmlType::kQ5_K, 3, 0xf8f0bbfa51861243ull},
  {GgmlType::kQ6_K, 3, 0xcef39215c2d4e8f9ull},
  {GgmlType::kMXFP4, 3, 0x5f4ce1a09b72d84eull},
  {GgmlType::kQ5_0, 3, 0xd189fc69fd2d43aaull},
  {GgmlType::kQ5_1, 3, 0x02181b3f95212040ull},
};

TEST(QuantReference, BytesMatchIndependentTranscription) {
  for (const Expected& e : kExpected) {
    Lcg gen(1000u + uint32_t(e.kind));
    std::vector<float> x(4096);
    for (int k = 0; k < 4096; ++k) x[size_t(k)] = e.kind == 3 ? gen.mixed(k) : gen.sample(e.kind);
    std::vector<uint8_t> q(ggml_row_bytes(e.type, 4096));
    quantize_row(e.type, x.data(), 4096, q.data());
    EXPECT_EQ(fnv1a64(q), e.hash) << ggml_type_name(e.type) << " input family " << e.kind;
  }
}

}  // namespace
}  // namespace kestrel::quant
