#include "quant/k_quant_common.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "core/dtype.h"

namespace kestrel::quant {

namespace {

// The scale searches run kLanes sub-blocks at once, a sub-block a lane, each lane computing
// exactly the reference's sequence of single-precision operations for its sub-block (the lanes
// never mix), so the values are bit-identical to one sub-block at a time; the sub-blocks' chains
// of dependent additions then overlap instead of waiting on each other.
constexpr int kLanes = 8;
using VF = float __attribute__((vector_size(kLanes * sizeof(float))));
using VI = int32_t __attribute__((vector_size(kLanes * sizeof(int32_t))));

VI nearest_int(VF v) {
  const VF shifted = v + 12582912.f;
  return (std::bit_cast<VI>(shifted) & 0x007fffff) - 0x00400000;
}
VI clamp(VI l, int lo, int hi) {
  const VI vlo = VI{} + lo, vhi = VI{} + hi;
  l = l < vlo ? vlo : l;
  return l > vhi ? vhi : l;
}
VF to_float(VI l) { return __builtin_convertvector(l, VF); }
VF vabs(VF v) { return std::bit_cast<VF>(std::bit_cast<VI>(v) & 0x7fffffff); }

// xt[i] = lane-major copy of the sub-blocks: xt[i][s] = x[s * n + i].
template <int n>
void transpose_in(const float* x, VF (&xt)[n]) {
  for (int i = 0; i < n; ++i)
    for (int s = 0; s < kLanes; ++s) xt[i][s] = x[s * n + i];
}

}  // namespace

void make_qkx2_quants_x8(const float* x, const float* weights, int nmax, float rmin, float rdelta, int nstep,
                         uint8_t* L, float* scales, float* neg_mins) {
  constexpr int n = 32;
  VF xt[n], wt[n];
  transpose_in(x, xt);
  transpose_in(weights, wt);
  VF min = xt[0], max = xt[0];
  VF sum_w = wt[0];
  VF sum_x = sum_w * xt[0];
  for (int i = 1; i < n; ++i) {
    min = xt[i] < min ? xt[i] : min;
    max = xt[i] > max ? xt[i] : max;
    sum_w += wt[i];
    sum_x += wt[i] * xt[i];
  }
  min = min > 0.f ? VF{} : min;
  const VI flat = max == min;  // those lanes end here: L = 0, scale 0
  const VF flat_neg_min = -min;
  // The weighted squared error of x ~ s * Ls + m, summed in element order.
  auto error = [&](VF s, VF m, const VI (&Ls)[n]) {
    VF e{};
    for (int i = 0; i < n; ++i) {
      const VF diff = s * to_float(Ls[i]) + m - xt[i];
      e += wt[i] * (diff * diff);
    }
    return e;
  };
  VF iscale = float(nmax) / (max - min);
  VF scale = 1.f / iscale;
  VI Lv[n], Laux[n];
  for (int i = 0; i < n; ++i) Lv[i] = clamp(nearest_int(iscale * (xt[i] - min)), 0, nmax);
  VF best_error = error(scale, min, Lv);
  for (int is = 0; nstep >= 1 && is <= nstep; ++is) {
    iscale = (rmin + rdelta * float(is) + float(nmax)) / (max - min);
    VF sum_l{}, sum_l2{}, sum_xl{};
    for (int i = 0; i < n; ++i) {
      Laux[i] = clamp(nearest_int(iscale * (xt[i] - min)), 0, nmax);
      const VF w = wt[i];
      const VF fl = to_float(Laux[i]);
      sum_l += w * fl;
      sum_l2 += w * fl * fl;
      sum_xl += w * fl * xt[i];
    }
    const VF D = sum_w * sum_l2 - sum_l * sum_l;
    VF this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
    VF this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
    const VI positive = this_min > 0.f;
    this_min = positive ? VF{} : this_min;
    this_scale = positive ? sum_xl / sum_l2 : this_scale;
    const VF cur_error = error(this_scale, this_min, Laux);
    const VI take = (D > 0.f) & (cur_error < best_error);
    for (int i = 0; i < n; ++i) Lv[i] = take ? Laux[i] : Lv[i];
    best_error = take ? cur_error : best_error;
    scale = take ? this_scale : scale;
    min = take ? this_min : min;
  }
  for (int s = 0; s < kLanes; ++s) {
    const bool f = flat[s] != 0;
    for (int i = 0; i < n; ++i) L[s * n + i] = f ? 0 : uint8_t(Lv[i][s]);
    scales[s] = f ? 0.f : scale[s];
    neg_mins[s] = f ? flat_neg_min[s] : -min[s];
  }
}

void make_qx_quants_rmse1_x8(const float* x, int nmax, int8_t* L, float* scales) {
  constexpr int n = 16;
  VF xt[n];
  transpose_in(x, xt);
  VF max{}, amax{};
  for (int i = 0; i < n; ++i) {
    const VF ax = vabs(xt[i]);
    const VI larger = ax > amax;
    amax = larger ? ax : amax;
    max = larger ? xt[i] : max;
  }
  const VI zero = amax < kGroupMaxEps;  // those lanes end here: L = 0, scale 0
  VF sumlx, suml2;
  // One trial inverse scale: its quants into Ls and its least-squares sums, in element order.
  auto trial = [&](VF iscale, VI (&Ls)[n]) {
    sumlx = suml2 = VF{};
    for (int i = 0; i < n; ++i) {
      Ls[i] = clamp(nearest_int(iscale * xt[i]), -nmax, nmax - 1);
      const VF w = xt[i] * xt[i];
      const VF fl = to_float(Ls[i]);
      sumlx += w * xt[i] * fl;
      suml2 += w * fl * fl;
    }
  };
  VI Lv[n], Laux[n];
  trial(float(-nmax) / max, Lv);
  VF scale = suml2 != 0.f ? sumlx / suml2 : VF{};
  VF best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    trial(-(float(nmax) + 0.1f * float(is)) / max, Laux);
    const VI take = (suml2 > 0.f) & (sumlx * sumlx > best * suml2);
    for (int i = 0; i < n; ++i) Lv[i] = take ? Laux[i] : Lv[i];
    scale = take ? sumlx / suml2 : scale;
    best = take ? scale * sumlx : best;
  }
  for (int s = 0; s < kLanes; ++s) {
    const bool z = zero[s] != 0;
    for (int i = 0; i < n; ++i) L[s * n + i] = z ? 0 : int8_t(Lv[i][s] + nmax);
    scales[s] = z ? 0.f : scale[s];
  }
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
  static_assert(kNumSub == kLanes, "a super-block's sub-blocks are the scale search's lanes");
  float scales[kNumSub], mins[kNumSub], weights[kNumSub * kSub];
  for (int j = 0; j < kNumSub; ++j) {
    const float* xs = x + kSub * j;
    float sum_x2 = 0;
    for (int l = 0; l < kSub; ++l) sum_x2 += xs[l] * xs[l];
    const float av_x = std::sqrt(sum_x2 / kSub);
    for (int l = 0; l < kSub; ++l) weights[kSub * j + l] = av_x + std::fabs(xs[l]);
  }
  make_qkx2_quants_x8(x, weights, nmax, rmin, rdelta, nstep, out->L, scales, mins);
  float max_scale = 0, max_min = 0;  // scales and mins are never negative: the min is subtracted
  for (int j = 0; j < kNumSub; ++j) {
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
