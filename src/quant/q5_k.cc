// Q5_K: Q4_K with a fifth bit per element: q in 0..31 (ggml's quantize_row_q5_K_ref:
// make_qkx2_quants with nmax 31, rmin -0.5, rdelta 0.1, 15 steps).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "quant/blocks.h"
#include "quant/k_quant_common.h"
#include "quant/quant.h"

namespace kestrel::quant {

void quantize_row_q5_k(const float* x, int64_t n, void* out) {
  KCHECK(n % kQK_K == 0);
  auto* y = static_cast<BlockQ5_K*>(out);
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    SuperBlockScales sb;
    quantize_superblock_k(x, 31, -0.5f, 0.1f, 15, &sb);
    y[b].d = sb.d;
    y[b].dmin = sb.dmin;
    std::memcpy(y[b].scales, sb.scales, kKScaleSize);
    std::memset(y[b].qh, 0, sizeof(y[b].qh));
    uint8_t* ql = y[b].qs;
    uint8_t m1 = 1, m2 = 2;
    for (int c = 0; c < kQK_K; c += 64, ql += 32, m1 <<= 2, m2 <<= 2) {
      for (int j = 0; j < 32; ++j) {
        int l1 = sb.L[c + j], l2 = sb.L[c + j + 32];
        if (l1 > 15) {
          l1 -= 16;
          y[b].qh[j] |= m1;
        }
        if (l2 > 15) {
          l2 -= 16;
          y[b].qh[j] |= m2;
        }
        ql[j] = uint8_t(l1 | (l2 << 4));
      }
    }
  }
}

// As Q4_K's decoder (scales hoisted, eight elements per step, d_j * q then - m_j) with the fifth
// bit of element l of chunk c taken from bit 2c (low half) or 2c + 1 (high half) of qh[l].
void dequantize_row_q5_k(const void* in, int64_t n, float* y) {
  KCHECK(n % kQK_K == 0);
  const auto* blocks = static_cast<const BlockQ5_K*>(in);
  const __m256i low4 = _mm256_set1_epi32(0xF), one = _mm256_set1_epi32(1);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float d = f16_to_f32(blocks[b].d), min = f16_to_f32(blocks[b].dmin);
    float dsc[8], msc[8];
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      get_scale_min_k4(j, blocks[b].scales, &sc, &m);
      dsc[j] = d * float(sc);
      msc[j] = min * float(m);
    }
    const uint8_t* ql = blocks[b].qs;
    const uint8_t* qh = blocks[b].qh;
    for (int c = 0; c < 4; ++c, ql += 32, y += 64) {
      const __m256 d1 = _mm256_set1_ps(dsc[2 * c]), m1 = _mm256_set1_ps(msc[2 * c]);
      const __m256 d2 = _mm256_set1_ps(dsc[2 * c + 1]), m2 = _mm256_set1_ps(msc[2 * c + 1]);
      const __m128i s1 = _mm_cvtsi32_si128(2 * c), s2 = _mm_cvtsi32_si128(2 * c + 1);
      for (int l = 0; l < 32; l += 8) {
        const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(ql + l)));
        const __m256i h = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qh + l)));
        const __m256i lo = _mm256_or_si256(_mm256_and_si256(v, low4), _mm256_slli_epi32(_mm256_and_si256(_mm256_srl_epi32(h, s1), one), 4));
        const __m256i hi = _mm256_or_si256(_mm256_srli_epi32(v, 4), _mm256_slli_epi32(_mm256_and_si256(_mm256_srl_epi32(h, s2), one), 4));
        _mm256_storeu_ps(y + l, _mm256_sub_ps(_mm256_mul_ps(d1, _mm256_cvtepi32_ps(lo)), m1));
        _mm256_storeu_ps(y + 32 + l, _mm256_sub_ps(_mm256_mul_ps(d2, _mm256_cvtepi32_ps(hi)), m2));
      }
    }
  }
}

float dot_row_q5_k(const void* w, const float* x, int64_t n) {
  KCHECK(n % kQK_K == 0);
  const auto* blocks = static_cast<const BlockQ5_K*>(w);
  double sum = 0;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const double d = f16_to_f32(blocks[b].d), min = f16_to_f32(blocks[b].dmin);
    const uint8_t* ql = blocks[b].qs;
    const uint8_t* qh = blocks[b].qh;
    uint8_t u1 = 1, u2 = 2;
    for (int c = 0; c < 4; ++c, ql += 32, x += 64, u1 <<= 2, u2 <<= 2) {
      double qx_lo = 0, qx_hi = 0, x_lo = 0, x_hi = 0;
      for (int l = 0; l < 32; ++l) {
        qx_lo += double((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) * x[l];
        qx_hi += double((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) * x[l + 32];
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
