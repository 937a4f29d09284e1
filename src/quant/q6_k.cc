// Q6_K: 256-element super-blocks of 16 sub-blocks of 16; x = d * scale_j * (q - 32) with q in
// 0..63 and int8 sub-block scales (ggml's quantize_row_q6_K_ref: make_qx_quants with nmax 32
// and x^2 weights per sub-block, then the scales quantized to int8 against the largest-|scale|).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "quant/blocks.h"
#include "quant/k_quant_common.h"
#include "quant/quant.h"

namespace kestrel::quant {

void quantize_row_q6_k(const float* x, int64_t n, void* out) {
  KCHECK(n % kQK_K == 0);
  auto* y = static_cast<BlockQ6_K*>(out);
  int8_t L[kQK_K];
  float scales[kQK_K / 16];
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < kQK_K / 16; ib += 8) make_qx_quants_rmse1_x8(x + 16 * ib, 32, L + 16 * ib, scales + ib);
    for (int ib = 0; ib < kQK_K / 16; ++ib) {
      const float scale = scales[ib];
      const float abs_scale = std::fabs(scale);
      if (abs_scale > max_abs_scale) {
        max_abs_scale = abs_scale;
        max_scale = scale;
      }
    }
    if (max_abs_scale < kGroupMaxEps) {
      std::memset(&y[b], 0, sizeof(BlockQ6_K));
      continue;
    }
    const float iscale = -128.f / max_scale;
    y[b].d = f32_to_f16(1 / iscale);
    for (int ib = 0; ib < kQK_K / 16; ++ib) y[b].scales[ib] = int8_t(std::min(127, nearest_int(iscale * scales[ib])));
    const float d_all = f16_to_f32(y[b].d);
    for (int j = 0; j < kQK_K / 16; ++j) {
      const float d = d_all * float(y[b].scales[j]);
      if (d == 0) continue;
      for (int i = 0; i < 16; ++i) {
        const int l = nearest_int(x[16 * j + i] / d);
        L[16 * j + i] = int8_t(std::max(-32, std::min(31, l)) + 32);
      }
    }
    uint8_t* ql = y[b].ql;
    uint8_t* qh = y[b].qh;
    for (int j = 0; j < kQK_K; j += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t q1 = L[j + l] & 0xF, q2 = L[j + l + 32] & 0xF;
        const uint8_t q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
        ql[l] = uint8_t(q1 | (q3 << 4));
        ql[l + 32] = uint8_t(q2 | (q4 << 4));
        qh[l] = uint8_t((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                        ((L[j + l + 96] >> 4) << 6));
      }
    }
  }
}

namespace {

// The four 6-bit values of position l in 128-element chunk: elements l, l+32, l+64, l+96.
inline void q6_values(const uint8_t* ql, const uint8_t* qh, int l, int q[4]) {
  q[0] = int((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
  q[1] = int((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
  q[2] = int((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
  q[3] = int((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
}

}  // namespace

// Eight positions l at a time, each giving elements l, l+32, l+64, l+96 of a 128-element chunk:
// the 4 + 2 bits assembled in 32-bit lanes, offset by -32, converted (exact), and scaled by the
// sub-block's d * scale (rounded once, as the reference's left-to-right d * sc * q).
void dequantize_row_q6_k(const void* in, int64_t n, float* y) {
  KCHECK(n % kQK_K == 0);
  const auto* blocks = static_cast<const BlockQ6_K*>(in);
  const __m256i low4 = _mm256_set1_epi32(0xF), two = _mm256_set1_epi32(3), off = _mm256_set1_epi32(32);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float d = f16_to_f32(blocks[b].d);
    float ds[16];
    for (int j = 0; j < 16; ++j) ds[j] = d * float(blocks[b].scales[j]);
    const uint8_t* ql = blocks[b].ql;
    const uint8_t* qh = blocks[b].qh;
    for (int c = 0; c < 2; ++c, y += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; l += 8) {
        const float* s = ds + 8 * c + l / 16;  // sub-block scales of elements l, l+32, l+64, l+96: s[0], s[2], s[4], s[6]
        const __m256i a = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(ql + l)));
        const __m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(ql + l + 32)));
        const __m256i h = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qh + l)));
        const __m256i q[4] = {
            _mm256_or_si256(_mm256_and_si256(a, low4), _mm256_slli_epi32(_mm256_and_si256(h, two), 4)),
            _mm256_or_si256(_mm256_and_si256(e, low4), _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, 2), two), 4)),
            _mm256_or_si256(_mm256_srli_epi32(a, 4), _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, 4), two), 4)),
            _mm256_or_si256(_mm256_srli_epi32(e, 4), _mm256_slli_epi32(_mm256_srli_epi32(h, 6), 4))};
        for (int k = 0; k < 4; ++k)
          _mm256_storeu_ps(y + l + 32 * k,
                           _mm256_mul_ps(_mm256_set1_ps(s[2 * k]), _mm256_cvtepi32_ps(_mm256_sub_epi32(q[k], off))));
      }
    }
  }
}

float dot_row_q6_k(const void* w, const float* x, int64_t n) {
  KCHECK(n % kQK_K == 0);
  const auto* blocks = static_cast<const BlockQ6_K*>(w);
  double sum = 0;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const double d = f16_to_f32(blocks[b].d);
    const uint8_t* ql = blocks[b].ql;
    const uint8_t* qh = blocks[b].qh;
    const int8_t* sc = blocks[b].scales;
    for (int c = 0; c < 2; ++c, x += 128, ql += 64, qh += 32, sc += 8) {
      double part[8] = {};  // [sub-block within the chunk]: element l + 32k is in sub-block 2k + l/16
      for (int l = 0; l < 32; ++l) {
        int q[4];
        q6_values(ql, qh, l, q);
        for (int k = 0; k < 4; ++k) part[2 * k + l / 16] += double(q[k]) * x[l + 32 * k];
      }
      for (int s = 0; s < 8; ++s) sum += d * sc[s] * part[s];
    }
  }
  return float(sum);
}

}  // namespace kestrel::quant
