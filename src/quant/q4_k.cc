// Q4_K: 256-element super-blocks of 8 sub-blocks of 32; x = d * sc * q - dmin * m with q in
// 0..15 and 6-bit (sc, m) per sub-block (ggml's quantize_row_q4_K_ref: make_qkx2_quants with
// nmax 15, rmin -1, rdelta 0.1, 20 steps).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "quant/blocks.h"
#include "quant/k_quant_common.h"
#include "quant/quant.h"

namespace kestrel::quant {

void quantize_row_q4_k(const float* x, int64_t n, void* out) {
  KCHECK(n % kQK_K == 0);
  auto* y = static_cast<BlockQ4_K*>(out);
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    SuperBlockScales sb;
    quantize_superblock_k(x, 15, -1.f, 0.1f, 20, &sb);
    y[b].d = sb.d;
    y[b].dmin = sb.dmin;
    std::memcpy(y[b].scales, sb.scales, kKScaleSize);
    uint8_t* q = y[b].qs;
    for (int j = 0; j < kQK_K; j += 64, q += 32)
      for (int l = 0; l < 32; ++l) q[l] = uint8_t(sb.L[j + l] | (sb.L[j + l + 32] << 4));
  }
}

namespace {

// Eight 6-bit (scale, min) pairs as floats d * sc and dmin * m, hoisted out of the element loops.
void q4_k_scales(const BlockQ4_K& b, float* dsc, float* msc) {
  const float d = f16_to_f32(b.d), min = f16_to_f32(b.dmin);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    get_scale_min_k4(j, b.scales, &sc, &m);
    dsc[j] = d * float(sc);
    msc[j] = min * float(m);
  }
}

}  // namespace

// Eight elements at a time: bytes widened to 32-bit lanes, nibbles split, converted (exact) and
// scaled with the reference's two roundings, d_j * q then - m_j (no fused multiply-add).
void dequantize_row_q4_k(const void* in, int64_t n, float* y) {
  KCHECK(n % kQK_K == 0);
  const auto* blocks = static_cast<const BlockQ4_K*>(in);
  const __m256i low4 = _mm256_set1_epi32(0xF);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    float dsc[8], msc[8];
    q4_k_scales(blocks[b], dsc, msc);
    const uint8_t* q = blocks[b].qs;
    for (int c = 0; c < 4; ++c, q += 32, y += 64) {
      const __m256 d1 = _mm256_set1_ps(dsc[2 * c]), m1 = _mm256_set1_ps(msc[2 * c]);
      const __m256 d2 = _mm256_set1_ps(dsc[2 * c + 1]), m2 = _mm256_set1_ps(msc[2 * c + 1]);
      for (int l = 0; l < 32; l += 8) {
        const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + l)));
        const __m256 lo = _mm256_cvtepi32_ps(_mm256_and_si256(v, low4));
        const __m256 hi = _mm256_cvtepi32_ps(_mm256_srli_epi32(v, 4));
        _mm256_storeu_ps(y + l, _mm256_sub_ps(_mm256_mul_ps(d1, lo), m1));
        _mm256_storeu_ps(y + 32 + l, _mm256_sub_ps(_mm256_mul_ps(d2, hi), m2));
      }
    }
  }
}

float dot_row_q4_k(const void* w, const float* x, int64_t n) {
  KCHECK(n % kQK_K == 0);
  const auto* blocks = static_cast<const BlockQ4_K*>(w);
  double sum = 0;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const double d = f16_to_f32(blocks[b].d), min = f16_to_f32(blocks[b].dmin);
    const uint8_t* q = blocks[b].qs;
    for (int c = 0; c < 4; ++c, q += 32, x += 64) {
      double qx_lo = 0, qx_hi = 0, x_lo = 0, x_hi = 0;
      for (int l = 0; l < 32; ++l) {
        qx_lo += double(q[l] & 0xF) * x[l];
        qx_hi += double(q[l] >> 4) * x[l + 32];
        x_lo += x[l];
        x_hi += x[l + 32];
      }
      uint8_t sc, m;
      get_scale_min_k4(2 * c, blocks[b].scales, &sc, &m);
      sum += d * sc * qx_lo - min * m * x_lo;
      get_scale_min_k4(2 * c + 1, blocks[b].scales, &sc, &m);
      sum += d * sc * qx_hi - min * m * x_hi;
    }
  }
  return float(sum);
}

}  // namespace kestrel::quant
