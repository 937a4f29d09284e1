// Q4_K: 256-element super-blocks of 8 sub-blocks of 32; x = d * sc * q - dmin * m with q in
// 0..15 and 6-bit (sc, m) per sub-block (ggml's quantize_row_q4_K_ref: make_qkx2_quants with
// nmax 15, rmin -1, rdelta 0.1, 20 steps).
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

void dequantize_row_q4_k(const void* in, int64_t n, float* y) {
  KCHECK(n % kQK_K == 0);
  const auto* blocks = static_cast<const BlockQ4_K*>(in);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float d = f16_to_f32(blocks[b].d), min = f16_to_f32(blocks[b].dmin);
    const uint8_t* q = blocks[b].qs;
    for (int c = 0; c < 4; ++c, q += 32) {
      uint8_t sc, m;
      get_scale_min_k4(2 * c, blocks[b].scales, &sc, &m);
      const float d1 = d * float(sc), m1 = min * float(m);
      get_scale_min_k4(2 * c + 1, blocks[b].scales, &sc, &m);
      const float d2 = d * float(sc), m2 = min * float(m);
      for (int l = 0; l < 32; ++l) *y++ = d1 * float(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * float(q[l] >> 4) - m2;
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
