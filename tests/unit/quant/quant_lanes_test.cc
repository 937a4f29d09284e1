// The K-quants' scale searches run 8 sub-blocks at once, a lane each (make_qkx2_quants_x8,
// make_qx_quants_rmse1_x8). Each lane must give exactly what the search gives one sub-block
// alone: these tests hold the one-sub-block searches as plain loops (the reference's operations
// in its order) and compare every output bit over many sub-blocks whose kinds differ from lane to
// lane, so a lane that reads another's state, or a branch taken per group instead of per lane,
// shows. QuantReference.BytesMatchIndependentTranscription checks the whole formats' bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "quant/k_quant_common.h"

namespace kestrel::quant {
namespace {

// One sub-block of make_qkx2_quants (squared error), as the reference loops it.
float qkx2_alone(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* neg_min, float rmin,
                 float rdelta, int nstep) {
  float min = x[0], max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    sum_w += weights[i];
    sum_x += weights[i] * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    std::fill(L, L + n, 0);
    *neg_min = -min;
    return 0.f;
  }
  float iscale = float(nmax) / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    L[i] = uint8_t(std::max(0, std::min(nmax, nearest_int(iscale * (x[i] - min)))));
    const float diff = scale * float(L[i]) + min - x[i];
    best_error += weights[i] * (diff * diff);
  }
  std::vector<uint8_t> Laux(static_cast<size_t>(n));
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * float(is) + float(nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::max(0, std::min(nmax, nearest_int(iscale * (x[i] - min))));
      Laux[size_t(i)] = uint8_t(l);
      const float w = weights[i], fl = float(l);
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
        const float diff = this_scale * float(Laux[size_t(i)]) + this_min - x[i];
        cur_error += weights[i] * (diff * diff);
      }
      if (cur_error < best_error) {
        std::copy(Laux.begin(), Laux.end(), L);
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *neg_min = -min;
  return scale;
}

// One sub-block of make_qx_quants with rmse_type 1, as the reference loops it.
float rmse1_alone(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    std::fill(L, L + n, 0);
    return 0.f;
  }
  auto sums = [&](float iscale, float& sumlx, float& suml2) {
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::max(-nmax, std::min(nmax - 1, nearest_int(iscale * x[i])));
      const float w = x[i] * x[i], fl = float(l);
      sumlx += w * x[i] * fl;
      suml2 += w * fl * fl;
    }
  };
  auto fill = [&](float iscale) {
    for (int i = 0; i < n; ++i) L[i] = int8_t(nmax + std::max(-nmax, std::min(nmax - 1, nearest_int(iscale * x[i]))));
  };
  float sumlx, suml2;
  sums(float(-nmax) / max, sumlx, suml2);
  fill(float(-nmax) / max);
  float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    const float iscale = -(float(nmax) + 0.1f * float(is)) / max;
    sums(iscale, sumlx, suml2);
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      fill(iscale);
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// A sub-block of kind k: near-Gaussian, all positive, constant negative, zeros, tiny (under the
// 1e-15 floor), huge, a handful of distinct values (ties in the searches), one spike among zeros,
// denormals, or constant positive.
void fill_sub_block(std::mt19937& rng, int kind, float* x, int n) {
  std::normal_distribution<float> gauss(0.f, 1.f);
  std::uniform_int_distribution<int> pick(-2, 2);
  for (int i = 0; i < n; ++i) {
    const float g = gauss(rng);
    switch (kind) {
      case 0: x[i] = g * 0.02f; break;
      case 1: x[i] = std::fabs(g) * 0.5f; break;
      case 2: x[i] = -0.01f; break;
      case 3: x[i] = 0.f; break;
      case 4: x[i] = g * 1e-17f; break;
      case 5: x[i] = g * 1e30f; break;
      case 6: x[i] = float(pick(rng)) * 0.25f; break;
      case 7: x[i] = i == n / 2 ? g : 0.f; break;
      case 8: x[i] = g * 1e-40f; break;
      default: x[i] = 0.3f; break;
    }
  }
}
constexpr int kKinds = 10;

TEST(QuantLanes, Qkx2LanesEqualOneSubBlockAlone) {
  constexpr int n = 32, lanes = 8;
  struct Params {
    int nmax;
    float rmin, rdelta;
    int nstep;
  };
  const Params params[] = {{15, -1.f, 0.1f, 20}, {31, -0.5f, 0.1f, 15}};  // Q4_K, Q5_K
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> kind_of(0, kKinds - 1);
  int checked = 0;
  for (int group = 0; group < 3000; ++group) {
    const Params& p = params[group % 2];
    float x[lanes * n], w[lanes * n];
    for (int s = 0; s < lanes; ++s) {
      fill_sub_block(rng, group < 100 ? (group + s) % kKinds : kind_of(rng), x + s * n, n);
      float sum_x2 = 0;
      for (int i = 0; i < n; ++i) sum_x2 += x[s * n + i] * x[s * n + i];
      const float av_x = std::sqrt(sum_x2 / n);
      for (int i = 0; i < n; ++i) w[s * n + i] = av_x + std::fabs(x[s * n + i]);
    }
    uint8_t L[lanes * n];
    float scales[lanes], neg_mins[lanes];
    make_qkx2_quants_x8(x, w, p.nmax, p.rmin, p.rdelta, p.nstep, L, scales, neg_mins);
    for (int s = 0; s < lanes; ++s) {
      uint8_t L1[n];
      float neg_min1 = 0;
      const float scale1 = qkx2_alone(n, p.nmax, x + s * n, w + s * n, L1, &neg_min1, p.rmin, p.rdelta, p.nstep);
      ASSERT_EQ(std::bit_cast<uint32_t>(scales[s]), std::bit_cast<uint32_t>(scale1)) << "group " << group << " lane " << s;
      ASSERT_EQ(std::bit_cast<uint32_t>(neg_mins[s]), std::bit_cast<uint32_t>(neg_min1))
          << "group " << group << " lane " << s;
      for (int i = 0; i < n; ++i) ASSERT_EQ(L[s * n + i], L1[i]) << "group " << group << " lane " << s << " i " << i;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 3000 * lanes);
}

TEST(QuantLanes, Rmse1LanesEqualOneSubBlockAlone) {
  constexpr int n = 16, lanes = 8, nmax = 32;  // Q6_K
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> kind_of(0, kKinds - 1);
  for (int group = 0; group < 4000; ++group) {
    float x[lanes * n];
    for (int s = 0; s < lanes; ++s) fill_sub_block(rng, group < 100 ? (group + s) % kKinds : kind_of(rng), x + s * n, n);
    int8_t L[lanes * n];
    float scales[lanes];
    make_qx_quants_rmse1_x8(x, nmax, L, scales);
    for (int s = 0; s < lanes; ++s) {
      int8_t L1[n];
      const float scale1 = rmse1_alone(n, nmax, x + s * n, L1);
      ASSERT_EQ(std::bit_cast<uint32_t>(scales[s]), std::bit_cast<uint32_t>(scale1)) << "group " << group << " lane " << s;
      for (int i = 0; i < n; ++i) ASSERT_EQ(L[s * n + i], L1[i]) << "group " << group << " lane " << s << " i " << i;
    }
  }
}

}  // namespace
}  // namespace kestrel::quant
