#include "quant/k_quant_common.h"

#include <algorithm>
#include <cmath>

#include "core/dtype.h"

namespace kestrel::quant {

float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* neg_min,
                       uint8_t* Laux, float rmin, float rdelta, int nstep, bool use_mad) {
  float min = x[0], max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *neg_min = -min;
    return 0.f;
  }
  float iscale = float(nmax) / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = nearest_int(iscale * (x[i] - min));
    L[i] = uint8_t(std::max(0, std::min(nmax, l)));
    float diff = scale * float(L[i]) + min - x[i];
    diff = use_mad ? std::fabs(diff) : diff * diff;
    best_error += weights[i] * diff;
  }
  if (nstep < 1) {
    *neg_min = -min;
    return scale;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * float(is) + float(nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * (x[i] - min));
      l = std::max(0, std::min(nmax, l));
      Laux[i] = uint8_t(l);
      const float w = weights[i];
      const float fl = float(l);
      sum_l += w * fl;
      sum_l2 += w * fl * fl;
      sum_xl += w * fl * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * float(Laux[i]) + this_min - x[i];
        diff = use_mad ? std::fabs(diff) : diff * diff;
        cur_error += weights[i] * diff;
      }
      if (cur_error < best_error) {
        for (int i = 0; i < n; ++i) L[i] = Laux[i];
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *neg_min = -min;
  return scale;
}

float make_qx_quants_rmse1(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  float iscale = float(-nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = nearest_int(iscale * x[i]);
    l = std::max(-nmax, std::min(nmax - 1, l));
    L[i] = int8_t(l + nmax);
    const float w = x[i] * x[i];
    const float fl = float(l);
    sumlx += w * x[i] * fl;
    suml2 += w * fl * fl;
  }
  float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(float(nmax) + 0.1f * float(is)) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * x[i]);
      l = std::max(-nmax, std::min(nmax - 1, l));
      const float w = x[i] * x[i];
      const float fl = float(l);
      sumlx += w * x[i] * fl;
      suml2 += w * fl * fl;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        const int l = nearest_int(iscale * x[i]);
        L[i] = int8_t(nmax + std::max(-nmax, std::min(nmax - 1, l)));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

void put_scale_min_k4(int j, uint8_t ls, uint8_t lm, uint8_t* q) {
  // Sub-blocks 0-3 keep their 6 bits in bytes 0-3 (scale) and 4-7 (min); sub-blocks 4-7 keep
  // their low 4 bits in bytes 8-11 and their top 2 bits in the spare top bits of bytes 0-7.
  // Must be called for j = 0..7 in order (j >= 4 ORs into bytes j < 4 wrote).
  if (j < 4) {
    q[j] = ls;
    q[j + 4] = lm;
  } else {
    q[j + 4] = uint8_t((ls & 0xF) | ((lm & 0xF) << 4));
    q[j - 4] |= uint8_t((ls >> 4) << 6);
    q[j] |= uint8_t((lm >> 4) << 6);
  }
}

void get_scale_min_k4(int j, const uint8_t* q, uint8_t* ls, uint8_t* lm) {
  if (j < 4) {
    *ls = q[j] & 63;
    *lm = q[j + 4] & 63;
  } else {
    *ls = uint8_t((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *lm = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}


void quantize_superblock_k(const float* x, int nmax, float rmin, float rdelta, int nstep, SuperBlockScales* out) {
  constexpr int kSub = 32, kNumSub = 256 / 32;
  float scales[kNumSub], mins[kNumSub], weights[kSub];
  uint8_t Laux[kSub];
  float max_scale = 0, max_min = 0;  // scales and mins are never negative: the min is subtracted
  for (int j = 0; j < kNumSub; ++j) {
    const float* xs = x + kSub * j;
    float sum_x2 = 0;
    for (int l = 0; l < kSub; ++l) sum_x2 += xs[l] * xs[l];
    const float av_x = std::sqrt(sum_x2 / kSub);
    for (int l = 0; l < kSub; ++l) weights[l] = av_x + std::fabs(xs[l]);
    scales[j] = make_qkx2_quants(kSub, nmax, xs, weights, out->L + kSub * j, &mins[j], Laux, rmin, rdelta, nstep,
                                 false);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  for (int j = 0; j < kNumSub; ++j) {
    uint8_t ls = uint8_t(nearest_int(inv_scale * scales[j]));  // wraps like the reference's uint8_t store
    uint8_t lm = uint8_t(nearest_int(inv_min * mins[j]));
    ls = std::min<uint8_t>(63, ls);
    lm = std::min<uint8_t>(63, lm);
    put_scale_min_k4(j, ls, lm, out->scales);
  }
  out->d = f32_to_f16(max_scale / 63.f);
  out->dmin = f32_to_f16(max_min / 63.f);
  const float d_all = f16_to_f32(out->d), dmin_all = f16_to_f32(out->dmin);
  for (int j = 0; j < kNumSub; ++j) {
    uint8_t sc, m;
    get_scale_min_k4(j, out->scales, &sc, &m);
    const float d = d_all * float(sc);
    if (d == 0) continue;  // keeps make_qkx2_quants' L for this sub-block, as the reference does
    const float dm = dmin_all * float(m);
    for (int i = 0; i < kSub; ++i) {
      const int l = nearest_int((x[kSub * j + i] + dm) / d);
      out->L[kSub * j + i] = uint8_t(std::max(0, std::min(nmax, l)));
    }
  }
}

}  // namespace kestrel::quant
