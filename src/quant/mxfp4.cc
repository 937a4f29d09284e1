// MXFP4: blocks of 32 E2M1 values (4 bits: sign, 2 exponent, 1 mantissa) sharing one E8M0
// exponent. The exponent is floor(log2(max|x|)) - 2 (so the largest magnitude lands in the top
// binade 4..6 of E2M1), and each element takes the nearest E2M1 value (first index wins ties);
// ggml's quantize_row_mxfp4_ref.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "quant/blocks.h"
#include "quant/quant.h"

namespace kestrel::quant {
namespace {

// E2M1 values doubled (0, 0.5, 1, 1.5, 2, 3, 4, 6 -> integers), negative half mirrored.
constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// 2^(e - 128): the E8M0 scale halved to undo the doubled table (subnormal for e < 2).
float e8m0_half(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : uint32_t(e - 1) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

int nearest_index(float x, float d) {
  int best = 0;
  float best_err = std::fabs(float(kMxfp4Values[0]) * d - x);
  for (int i = 1; i < 16; ++i) {
    const float err = std::fabs(float(kMxfp4Values[i]) * d - x);
    if (err < best_err) {
      best = i;
      best_err = err;
    }
  }
  return best;
}

}  // namespace

void quantize_row_mxfp4(const float* x, int64_t n, void* out) {
  KCHECK(n % kQKMxfp4 == 0);
  auto* y = static_cast<BlockMxfp4*>(out);
  for (int64_t b = 0; b < n / kQKMxfp4; ++b, x += kQKMxfp4) {
    float amax = 0.0f;
    for (int j = 0; j < kQKMxfp4; ++j) amax = std::max(amax, std::fabs(x[j]));
    // The reference converts the float exponent straight to uint8_t; below 2^-125 that would be
    // out of range (undefined in C), so kestrel clamps to 0 there: those blocks round to zero.
    float e_f = amax > 0.0f ? std::floor(std::log2(amax)) - 2 + 127 : 0.0f;
    if (!(e_f >= 0.0f)) e_f = 0.0f;
    if (e_f > 255.0f) e_f = 255.0f;
    const uint8_t e = uint8_t(e_f);
    const float d = e8m0_half(e);
    y[b].e = e;
    for (int j = 0; j < kQKMxfp4 / 2; ++j) {
      const int lo = nearest_index(x[j], d);
      const int hi = nearest_index(x[j + kQKMxfp4 / 2], d);
      y[b].qs[j] = uint8_t(lo | (hi << 4));
    }
  }
}

void dequantize_row_mxfp4(const void* in, int64_t n, float* y) {
  KCHECK(n % kQKMxfp4 == 0);
  const auto* blocks = static_cast<const BlockMxfp4*>(in);
  // The 16 codes' table values looked up by byte shuffles (low nibbles: elements 0..15, high:
  // 16..31), widened and converted exactly, times a power of two: exact, as element by element.
  const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kMxfp4Values));
  for (int64_t b = 0; b < n / kQKMxfp4; ++b, y += kQKMxfp4) {
    const __m256 d = _mm256_set1_ps(e8m0_half(blocks[b].e));
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks[b].qs));
    const __m128i lo = _mm_shuffle_epi8(table, _mm_and_si128(raw, _mm_set1_epi8(0x0F)));
    const __m128i hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(0x0F)));
    const __m128i halves[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
    for (int j = 0; j < 4; ++j)
      _mm256_storeu_ps(y + 8 * j, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(halves[j])), d));
  }
}

float dot_row_mxfp4(const void* w, const float* x, int64_t n) {
  KCHECK(n % kQKMxfp4 == 0);
  const auto* blocks = static_cast<const BlockMxfp4*>(w);
  double sum = 0;
  for (int64_t b = 0; b < n / kQKMxfp4; ++b, x += kQKMxfp4) {
    double s = 0;
    for (int j = 0; j < kQKMxfp4 / 2; ++j) {
      s += double(kMxfp4Values[blocks[b].qs[j] & 0xF]) * double(x[j]);
      s += double(kMxfp4Values[blocks[b].qs[j] >> 4]) * double(x[j + kQKMxfp4 / 2]);
    }
    sum += double(e8m0_half(blocks[b].e)) * s;
  }
  return float(sum);
}

}  // namespace kestrel::quant
