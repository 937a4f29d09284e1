// Helpers shared by the K-quant quantizers: llama.cpp's rounding and its two scale searches,
// re-implemented from the algorithm descriptions of ggml-quants.c. Every expression keeps the
// reference's single-precision operation order (the values must be bit-identical).
#pragma once

#include <cstdint>
#include <cstring>

namespace kestrel::quant {

// Round to nearest, ties to even, by adding 1.5 * 2^23 and reading the mantissa bits;
// exact for |v| <= 2^22 (ggml's nearest_int).
inline int nearest_int(float v) {
  float shifted = v + 12582912.f;
  int32_t bits;
  std::memcpy(&bits, &shifted, 4);
  return (bits & 0x007fffff) - 0x00400000;
}

// Asymmetric quantization of x[n] to L[i] in 0..nmax with x ~ scale * L + min (min <= 0):
// an initial min/max grid, then nstep+1 trial inverse scales (nmax + rmin + rdelta * is) /
// (max - min), each refit by weighted least squares for (scale, min), keeping the trial with
// the lowest weighted error (absolute if use_mad, squared otherwise). Returns scale and sets
// *neg_min = -min. Laux: [n] scratch. (ggml's make_qkx2_quants.)
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* neg_min,
                       uint8_t* Laux, float rmin, float rdelta, int nstep, bool use_mad);

// Symmetric quantization of x[n] to L[i] in 0..2*nmax-1 (stored with +nmax offset), weights
// x^2, the scale chosen among 19 trial inverse scales -(nmax + 0.1 * is) / max by the weighted
// least-squares fit. Returns the scale (signed: the sign of the largest-|x| element). (ggml's
// make_qx_quants with rmse_type 1 and no importance weights.)
float make_qx_quants_rmse1(int n, int nmax, const float* x, int8_t* L);

// K-quant 6-bit scale/min packing of sub-block j (0..7) into scales[12].
void put_scale_min_k4(int j, uint8_t ls, uint8_t lm, uint8_t* scales);
void get_scale_min_k4(int j, const uint8_t* scales, uint8_t* ls, uint8_t* lm);

constexpr float kGroupMaxEps = 1e-15f;


// The shared first half of Q4_K and Q5_K quantization for one 256-element super-block x:
// each 32-element sub-block gets a (scale, min) pair from make_qkx2_quants with weights
// av_x + |x| (av_x = rms of the sub-block); the pairs are quantized to 6 bits against the
// super-block maxima (d = max_scale / 63, dmin = max_min / 63, both stored f16), and every
// element is re-quantized against the rounded scales: L[i] in 0..nmax.
struct SuperBlockScales {
  uint16_t d = 0, dmin = 0;       // f16
  uint8_t scales[12] = {};        // packed 6-bit scales and mins
  uint8_t L[256] = {};            // quantized elements
};
void quantize_superblock_k(const float* x, int nmax, float rmin, float rdelta, int nstep, SuperBlockScales* out);

}  // namespace kestrel::quant
