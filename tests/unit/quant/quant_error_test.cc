// Round-trip error bounds and dot-kernel agreement for every block format, on Gaussian and
// heavy-tailed data (Student-t with 3 degrees of freedom, and Gaussian with occasional x100
// outliers). The bounds are per block, relative to the block's max |x| (the scale every format
// derives from), plus a relative-RMS bound per distribution; docs/gguf.md lists what they
// measured.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "quant/ggml_type.h"
#include "quant/quant.h"

namespace kestrel::quant {
namespace {

enum class Dist { kGaussian, kStudentT3, kOutliers };
const char* dist_name(Dist d) {
  return d == Dist::kGaussian ? "gaussian" : d == Dist::kStudentT3 ? "student-t3" : "outliers";
}

std::vector<float> sample(Dist dist, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::chi_squared_distribution<float> chi2(3.0f);
  std::uniform_real_distribution<float> uni(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) {
    v = normal(rng);
    if (dist == Dist::kStudentT3) v = v / std::sqrt(chi2(rng) / 3.0f);
    if (dist == Dist::kOutliers && uni(rng) < 0.002f) v *= 100.0f;
    v *= 0.02f;  // weight-like magnitudes
  }
  return x;
}

struct Bound {
  GgmlType type;
  double max_rel_block;  // max |x - x'| / max|x| over the block of `block` elements
  int block;             // elements sharing the scale the bound is relative to
  double rms_rel;        // rms(x - x') / rms(x) on Gaussian data
};

// Analytic where the format allows it:
//  Q8_0: |err| <= d/2 + 127 * |d - f16(d)| <= (0.5 + 127 * 2^-11) / 127 * max|x| = 0.00443 max|x|.
//  Q5_0: d = max / -16 with max the signed extreme; values of the other sign round to the grid
//  but clip at 15 |d| where they reach 16 |d|, so |err| <= |d| + 16 |d - f16(d)|
//  <= (1 + 16 * 2^-11) / 16 max|x| = 0.0630 max|x|.
//  Q5_1: d = (max - min) / 31 <= 2 max|x| / 31, q rounds half up: |err| <= d/2 + |m - f16(m)| +
//  31 |d - f16(d)| <= (1/31 + 2^-11 + 2 * 2^-11) max|x| = 0.0337 max|x|.
//  MXFP4: with max|x| in [2^E, 2^(E+1)) the grid is {0, .125, .25, .375, .5, .75, 1, 1.5} * 2^E:
//  the widest gap (1 to 1.5) and the clipping above 1.5 * 2^E both stay under 0.25 * max|x|.
//  K-quants: the sub-block scale/min search and the 6-bit scale rounding give no clean closed
//  form; the bounds are the measured worst cases (docs/gguf.md) with ~1.5x headroom, relative
//  to the 256-element super-block max.
// RMS bounds (Gaussian) are the measured values with ~1.5x headroom.
const Bound kBounds[] = {
    {GgmlType::kQ8_0, 0.00443, 32, 0.008},
    {GgmlType::kQ5_1, 0.0337, 32, 0.057},
    {GgmlType::kQ5_0, 0.0630, 32, 0.064},
    {GgmlType::kQ6_K, 0.025, 256, 0.027},
    {GgmlType::kQ5_K, 0.075, 256, 0.055},
    {GgmlType::kQ4_K, 0.125, 256, 0.11},
    {GgmlType::kMXFP4, 0.2501, 32, 0.17},
};

struct Measured {
  double max_rel_block = 0, rms_rel = 0;
};

Measured round_trip(GgmlType t, const std::vector<float>& x, int block) {
  const int64_t n = int64_t(x.size());
  std::vector<uint8_t> q(ggml_row_bytes(t, n));
  quantize_row(t, x.data(), n, q.data());
  std::vector<float> y(x.size());
  dequantize_row(t, q.data(), n, y.data());
  Measured m;
  double se = 0, sx = 0;
  for (int64_t b = 0; b < n; b += block) {
    double amax = 0, emax = 0;
    for (int64_t i = b; i < b + block; ++i) {
      amax = std::max(amax, double(std::fabs(x[i])));
      emax = std::max(emax, double(std::fabs(x[i] - y[i])));
      se += double(x[i] - y[i]) * double(x[i] - y[i]);
      sx += double(x[i]) * double(x[i]);
    }
    if (amax > 0) m.max_rel_block = std::max(m.max_rel_block, emax / amax);
  }
  m.rms_rel = std::sqrt(se / sx);
  return m;
}

TEST(QuantError, RoundTripWithinBounds) {
  const int64_t n = 256 * 512;
  for (Dist dist : {Dist::kGaussian, Dist::kStudentT3, Dist::kOutliers}) {
    const auto x = sample(dist, n, 1234 + int(dist));
    for (const Bound& b : kBounds) {
      const Measured m = round_trip(b.type, x, b.block);
      std::printf("  %-6s %-10s max|err|/max|x| %.5f  rms(err)/rms(x) %.5f\n", std::string(ggml_type_name(b.type)).c_str(),
                  dist_name(dist), m.max_rel_block, m.rms_rel);
      EXPECT_LE(m.max_rel_block, b.max_rel_block) << ggml_type_name(b.type) << " " << dist_name(dist);
      if (dist == Dist::kGaussian) {
        EXPECT_LE(m.rms_rel, b.rms_rel) << ggml_type_name(b.type);
      }
    }
  }
}

// More bits, less error: the formats order as expected on the same data.
TEST(QuantError, MoreBitsLessError) {
  const auto x = sample(Dist::kGaussian, 256 * 64, 99);
  const double q8 = round_trip(GgmlType::kQ8_0, x, 32).rms_rel;
  const double q6 = round_trip(GgmlType::kQ6_K, x, 256).rms_rel;
  const double q5 = round_trip(GgmlType::kQ5_K, x, 256).rms_rel;
  const double q4 = round_trip(GgmlType::kQ4_K, x, 256).rms_rel;
  EXPECT_LT(q8, q6);
  EXPECT_LT(q6, q5);
  EXPECT_LT(q5, q4);
}

// Quantizing what was dequantized is a fixed point for Q8_0 (every value is on the grid and the
// block max keeps its scale).
TEST(QuantError, Q8_0RequantizeIsStable) {
  const auto x = sample(Dist::kStudentT3, 32 * 100, 5);
  std::vector<uint8_t> q(ggml_row_bytes(GgmlType::kQ8_0, 3200)), q2(q.size());
  std::vector<float> y(x.size());
  quantize_row(GgmlType::kQ8_0, x.data(), 3200, q.data());
  dequantize_row(GgmlType::kQ8_0, q.data(), 3200, y.data());
  quantize_row(GgmlType::kQ8_0, y.data(), 3200, q2.data());
  EXPECT_EQ(q, q2);
}

// The dot kernel equals dequantize-then-dot (in double) to float rounding, for every format,
// on rows of several lengths.
TEST(QuantKernel, DotMatchesDequantizeThenDot) {
  const GgmlType types[] = {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0, GgmlType::kQ5_0,
                            GgmlType::kQ5_1, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K, GgmlType::kMXFP4};
  for (GgmlType t : types) {
    for (int64_t n : {256, 512, 2048, 4096}) {
      for (Dist dist : {Dist::kGaussian, Dist::kOutliers}) {
        const auto w = sample(dist, n, uint32_t(n) * 7 + uint32_t(t));
        const auto x = sample(Dist::kGaussian, n, uint32_t(n) * 13 + 1);
        std::vector<uint8_t> q(ggml_row_bytes(t, n));
        quantize_row(t, w.data(), n, q.data());
        std::vector<float> wd(static_cast<size_t>(n));
        dequantize_row(t, q.data(), n, wd.data());
        double ref = 0, mag = 0;
        for (int64_t i = 0; i < n; ++i) {
          ref += double(wd[i]) * double(x[i]);
          mag += std::fabs(double(wd[i]) * double(x[i]));
        }
        const float got = dot_row(t, q.data(), x.data(), n);
        EXPECT_NEAR(got, ref, 1e-6 * mag + 1e-30) << ggml_type_name(t) << " n=" << n << " " << dist_name(dist);
      }
    }
  }
}

// Pass-through formats: F32 is exact, F16/BF16 round to nearest even.
TEST(QuantKernel, PassThroughFormats) {
  const auto x = sample(Dist::kStudentT3, 1000, 11);
  for (GgmlType t : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16}) {
    std::vector<uint8_t> q(ggml_row_bytes(t, 1000));
    quantize_row(t, x.data(), 1000, q.data());
    std::vector<float> y(1000);
    dequantize_row(t, q.data(), 1000, y.data());
    const double rel = t == GgmlType::kF32 ? 0 : t == GgmlType::kF16 ? 1.0 / 2048 : 1.0 / 256;
    for (int i = 0; i < 1000; ++i) {
      if (t == GgmlType::kF16 && std::fabs(x[i]) < 6.2e-5f) continue;  // f16 subnormals: absolute error
      ASSERT_LE(std::fabs(x[i] - y[i]), rel * std::fabs(x[i])) << ggml_type_name(t) << " " << x[i];
    }
  }
}

}  // namespace
}  // namespace kestrel::quant
