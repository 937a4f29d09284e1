// Q8_0: blocks of 32 int8 values with one f16 scale, d = max|x| / 127, q = round(x / d)
// (rounding half away from zero, as roundf; ggml's quantize_row_q8_0_ref).
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "core/dtype.h"
#include "core/error.h"
#include "quant/blocks.h"
#include "quant/quant.h"

namespace kestrel::quant {

void quantize_row_q8_0(const float* x, int64_t n, void* out) {
  KCHECK(n % kQK8_0 == 0);
  auto* y = static_cast<BlockQ8_0*>(out);
  for (int64_t b = 0; b < n / kQK8_0; ++b, x += kQK8_0) {
    float amax = 0.0f;
    for (int j = 0; j < kQK8_0; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    y[b].d = f32_to_f16(d);
    for (int j = 0; j < kQK8_0; ++j) y[b].qs[j] = int8_t(std::roundf(x[j] * id));
  }
}

// A block of 32 in four 8-wide steps: int8 widened to 32-bit lanes, converted (exact), times d.
void dequantize_row_q8_0(const void* in, int64_t n, float* y) {
  KCHECK(n % kQK8_0 == 0);
  const auto* blocks = static_cast<const BlockQ8_0*>(in);
  for (int64_t b = 0; b < n / kQK8_0; ++b, y += kQK8_0) {
    const __m256 d = _mm256_set1_ps(f16_to_f32(blocks[b].d));
    for (int j = 0; j < kQK8_0; j += 8) {
      const __m256i v = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blocks[b].qs + j)));
      _mm256_storeu_ps(y + j, _mm256_mul_ps(_mm256_cvtepi32_ps(v), d));
    }
  }
}

float dot_row_q8_0(const void* w, const float* x, int64_t n) {
  KCHECK(n % kQK8_0 == 0);
  const auto* blocks = static_cast<const BlockQ8_0*>(w);
  double sum = 0;
  for (int64_t b = 0; b < n / kQK8_0; ++b, x += kQK8_0) {
    double s = 0;
    for (int j = 0; j < kQK8_0; ++j) s += double(blocks[b].qs[j]) * double(x[j]);
    sum += double(f16_to_f32(blocks[b].d)) * s;
  }
  return float(sum);
}

}  // namespace kestrel::quant
