// Q5_K: Q4_K with a fifth bit per element: q in 0..31 (ggml's quantize_row_q5_K_ref:
// make_qkx2_quants with nmax 31, rmin -0.5, rdelta 0.1, 15 steps).
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

void dequantize_row_q5_k(const void* in, int64_t n, float* y) {
  KCHECK(n % kQK_K == 0);
  const auto* blocks = static_cast<const BlockQ5_K*>(in);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float d = f16_to_f32(blocks[b].d), min = f16_to_f32(blocks[b].dmin);
    const uint8_t* ql = blocks[b].qs;
    const uint8_t* qh = blocks[b].qh;
    uint8_t u1 = 1, u2 = 2;
    for (int c = 0; c < 4; ++c, ql += 32, u1 <<= 2, u2 <<= 2) {
      uint8_t sc, m;
      get_scale_min_k4(2 * c, blocks[b].scales, &sc, &m);
      const float d1 = d * float(sc), m1 = min * float(m);
      get_scale_min_k4(2 * c + 1, blocks[b].scales, &sc, &m);
      const float d2 = d * float(sc), m2 = min * float(m);
      for (int l = 0; l < 32; ++l) *y++ = d1 * float((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * float((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
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
