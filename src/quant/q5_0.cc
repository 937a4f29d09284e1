// Q5_0 and Q5_1: blocks of 32 five-bit values (ggml's quantize_row_q5_0_ref / q5_1_ref).
// Q5_0 is symmetric: the value of largest magnitude, with its sign, maps to -16, d = max / -16,
// q = min(31, trunc(x / d + 16.5)). Q5_1 is affine: d = (max - min) / 31, m = min,
// q = trunc((x - min) / d + 0.5). Scales are stored as f16.
#include <immintrin.h>

#include <cfloat>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "quant/blocks.h"
#include "quant/quant.h"

namespace kestrel::quant {
namespace {

// The 5-bit value of element j of a block.
int q5_at(const uint8_t* qs, uint32_t qh, int j) {
  const int lo = j < kQK5 / 2 ? (qs[j] & 0x0F) : (qs[j - kQK5 / 2] >> 4);
  return lo | int(((qh >> j) & 1u) << 4);
}

void pack(const uint8_t* q, uint8_t* qs, uint8_t* qh_bytes) {
  uint32_t qh = 0;
  for (int j = 0; j < kQK5 / 2; ++j) {
    qs[j] = uint8_t((q[j] & 0x0F) | ((q[j + kQK5 / 2] & 0x0F) << 4));
    qh |= uint32_t((q[j] >> 4) & 1) << j;
    qh |= uint32_t((q[j + kQK5 / 2] >> 4) & 1) << (j + kQK5 / 2);
  }
  std::memcpy(qh_bytes, &qh, 4);
}

uint32_t load_qh(const uint8_t* qh) {
  uint32_t v;
  std::memcpy(&v, qh, 4);
  return v;
}

// The block's 32 five-bit quants as bytes, in element order: the low nibbles of qs (elements
// 0..15), then the high nibbles (16..31), each with bit j of qh as its fifth bit.
__m256i quants32(const uint8_t* qs, const uint8_t* qh_bytes) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i lo = _mm_and_si128(raw, _mm_set1_epi8(0x0F));
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(0x0F));
  const __m256i nib = _mm256_set_m128i(hi, lo);
  // byte j <- byte j / 8 of qh, then keep bit j % 8: 0x10 where set
  const __m256i qh = _mm256_set1_epi32(int(load_qh(qh_bytes)));
  const __m256i spread = _mm256_shuffle_epi8(
      qh, _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0x0000000000000000));
  const __m256i bit = _mm256_set1_epi64x(int64_t(0x8040201008040201));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
  return _mm256_or_si256(nib, _mm256_and_si256(set, _mm256_set1_epi8(0x10)));
}

// y[0..32) = float(q_j) * d (+ m), q as signed bytes: widened and converted exactly, then one
// rounding for the product and one for the sum, as the element-wise float(q) * d + m.
template <bool kMin>
void store_scaled(__m256i q, __m256 d, __m256 m, float* y) {
  alignas(32) int8_t b[32];
  _mm256_store_si256(reinterpret_cast<__m256i*>(b), q);
  for (int j = 0; j < 32; j += 8) {
    const __m256i v = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + j)));
    const __m256 p = _mm256_mul_ps(_mm256_cvtepi32_ps(v), d);
    _mm256_storeu_ps(y + j, kMin ? _mm256_add_ps(p, m) : p);
  }
}

}  // namespace

void quantize_row_q5_0(const float* x, int64_t n, void* out) {
  KCHECK(n % kQK5 == 0);
  auto* y = static_cast<BlockQ5_0*>(out);
  for (int64_t b = 0; b < n / kQK5; ++b, x += kQK5) {
    float amax = 0.0f, max = 0.0f;  // the first value of largest magnitude, with its sign
    for (int j = 0; j < kQK5; ++j) {
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = f32_to_f16(d);
    uint8_t q[kQK5];
    for (int j = 0; j < kQK5; ++j) {
      const int v = int(int8_t(x[j] * id + 16.5f));  // truncation, as the reference's (int8_t) cast
      q[j] = uint8_t(v < 31 ? v : 31);
    }
    pack(q, y[b].qs, y[b].qh);
  }
}

void dequantize_row_q5_0(const void* in, int64_t n, float* y) {
  KCHECK(n % kQK5 == 0);
  const auto* blocks = static_cast<const BlockQ5_0*>(in);
  for (int64_t b = 0; b < n / kQK5; ++b, y += kQK5) {
    const __m256 d = _mm256_set1_ps(f16_to_f32(blocks[b].d));
    const __m256i q = _mm256_sub_epi8(quants32(blocks[b].qs, blocks[b].qh), _mm256_set1_epi8(16));
    store_scaled<false>(q, d, d, y);
  }
}

float dot_row_q5_0(const void* w, const float* x, int64_t n) {
  KCHECK(n % kQK5 == 0);
  const auto* blocks = static_cast<const BlockQ5_0*>(w);
  double sum = 0;
  for (int64_t b = 0; b < n / kQK5; ++b, x += kQK5) {
    const uint32_t qh = load_qh(blocks[b].qh);
    double s = 0;
    for (int j = 0; j < kQK5; ++j) s += double(q5_at(blocks[b].qs, qh, j) - 16) * double(x[j]);
    sum += double(f16_to_f32(blocks[b].d)) * s;
  }
  return float(sum);
}

void quantize_row_q5_1(const float* x, int64_t n, void* out) {
  KCHECK(n % kQK5 == 0);
  auto* y = static_cast<BlockQ5_1*>(out);
  for (int64_t b = 0; b < n / kQK5; ++b, x += kQK5) {
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < kQK5; ++j) {
      if (x[j] < min) min = x[j];
      if (x[j] > max) max = x[j];
    }
    const float d = (max - min) / 31.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = f32_to_f16(d);
    y[b].m = f32_to_f16(min);
    uint8_t q[kQK5];
    for (int j = 0; j < kQK5; ++j) q[j] = uint8_t((x[j] - min) * id + 0.5f);  // truncation, as (uint8_t)
    pack(q, y[b].qs, y[b].qh);
  }
}

void dequantize_row_q5_1(const void* in, int64_t n, float* y) {
  KCHECK(n % kQK5 == 0);
  const auto* blocks = static_cast<const BlockQ5_1*>(in);
  for (int64_t b = 0; b < n / kQK5; ++b, y += kQK5) {
    const __m256 d = _mm256_set1_ps(f16_to_f32(blocks[b].d)), m = _mm256_set1_ps(f16_to_f32(blocks[b].m));
    store_scaled<true>(quants32(blocks[b].qs, blocks[b].qh), d, m, y);
  }
}

float dot_row_q5_1(const void* w, const float* x, int64_t n) {
  KCHECK(n % kQK5 == 0);
  const auto* blocks = static_cast<const BlockQ5_1*>(w);
  double sum = 0;
  for (int64_t b = 0; b < n / kQK5; ++b, x += kQK5) {
    const uint32_t qh = load_qh(blocks[b].qh);
    double s = 0, sx = 0;
    for (int j = 0; j < kQK5; ++j) {
      s += double(q5_at(blocks[b].qs, qh, j)) * double(x[j]);
      sx += double(x[j]);
    }
    sum += double(f16_to_f32(blocks[b].d)) * s + double(f16_to_f32(blocks[b].m)) * sx;
  }
  return float(sum);
}

}  // namespace kestrel::quant
