// The sampler's arithmetic, shared by the host sampler (engine/sampler.cc) and every backend's
// sample_candidates op, which must reproduce it bit for bit: the sampling key of a logit, the
// weight of a token (exp_nonpositive), the order of the keys, and the mass of a row's weights.
// The host builds with -ffp-contract=off; device code spells every rounding out (mul, add, sub,
// div below), so both compute each operation once, rounded to nearest.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/host_device.h"

namespace kestrel::sampling {

KESTREL_HD inline float mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
KESTREL_HD inline float add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
KESTREL_HD inline float sub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
KESTREL_HD inline float div(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
KESTREL_HD inline double addd(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}

// The sampling key of logit l at temperature t: l / t, NaN taken as -inf. Selected on the bits so
// that a host loop over a row vectorizes.
KESTREL_HD inline float scaled(float l, float t) {
  const uint32_t b = float_bits(div(l, t));
  return bits_float((b & 0x7fffffffu) > 0x7f800000u ? 0xff800000u : b);
}

// Floats as integers in the same order (no NaN; -0 just below +0); its own inverse.
KESTREL_HD inline int32_t ordered_bits(int32_t b) { return b ^ ((b >> 31) & 0x7fffffff); }

// exp(x) for x <= 0 in single precision, written out so that a loop over a row vectorizes and
// every machine computes the same bits (libm's exp differs between versions): x = n ln2 + r with
// |r| <= ln2 / 2 (Cody-Waite), e^r by its degree-7 Taylor polynomial (truncation < 6e-9; with
// roundings within 2e-7 of exp), times 2^n built in the exponent bits. Below -87 (e^-87 ~
// 1.6e-38, against the top token's 1) it is 0. (Exact for x = 0: the top token weighs 1.)
KESTREL_HD inline float exp_nonpositive(float x) {
  // |x| <= 87 keeps x; NaN, infinities and beyond take -87 (in range for the int conversion) and
  // give 0. Selected on the bits: float compares would keep the loop from vectorizing.
  const uint32_t b = float_bits(x);
  const uint32_t keep = (b & 0x7fffffffu) <= 0x42ae0000u ? 0xffffffffu : 0u;  // 0x42ae0000 = 87.0f
  const float xc = bits_float((b & keep) | (0xc2ae0000u & ~keep));
  const float t = add(mul(xc, 1.44269504f), 12582912.0f);  // round(x log2 e) in the low mantissa bits
  const float n = sub(t, 12582912.0f);
  const float r = sub(sub(xc, mul(n, 0.693145752f)), mul(n, 1.42860677e-6f));
  float p = 1.0f / 5040.0f;
  p = add(mul(p, r), 1.0f / 720.0f);
  p = add(mul(p, r), 1.0f / 120.0f);
  p = add(mul(p, r), 1.0f / 24.0f);
  p = add(mul(p, r), 1.0f / 6.0f);
  p = add(mul(p, r), 0.5f);
  p = add(mul(p, r), 1.0f);
  p = add(mul(p, r), 1.0f);
  const float v = mul(p, bits_float(uint32_t(int32_t(n) + 127) << 23));
  return bits_float(float_bits(v) & keep);
}

// The mass of n weights, weight(i) for i < n: kMassLanes interleaved lanes (lane j sums the
// weights i = j, j + kMassLanes, ... in increasing i), folded as a tree (for w = kMassLanes / 2
// down to 1, lane[j] += lane[j + w] for j < w). The same bits every time for the same terms, no
// chain of dependent additions through the vocabulary, and one device thread a lane.
constexpr int kMassLanes = 256;
template <typename Weight>
double lane_sum(size_t n, Weight weight) {
  double lane[kMassLanes] = {};
  size_t i = 0;
  for (; i + kMassLanes <= n; i += kMassLanes) {
    for (size_t j = 0; j < size_t(kMassLanes); ++j) lane[j] += weight(i + j);
  }
  for (; i < n; ++i) lane[i % kMassLanes] += weight(i);
  for (int w = kMassLanes / 2; w >= 1; w /= 2) {
    for (int j = 0; j < w; ++j) lane[j] += lane[j + w];
  }
  return lane[0];
}

}  // namespace kestrel::sampling
