// Helpers shared by the K-quant quantizers: llama.cpp's rounding and its two scale searches,
// re-implemented from the algorithm descriptions of ggml-quants.c. Every expression keeps the
// reference's single-precision operation order (the values must be bit-identical).
#pragma once

#include <cstdint>
#include <cstring>

namespace kestrel::quant {

constexpr float kGroupMaxEps = 1e-15f;

// Round to nearest, ties to even, by adding 1.5 * 2^23 and reading the mantissa bits;
// exact for |v| <= 2^22 (ggml's nearest_int).
inline int nearest_int(float v) {
  float shifted = v + 12582912.f;
  int32_t bits;
  std::memcpy(&bits, &shifted, 4);
  return (bits & 0x007fffff) - 0x00400000;
}

// Asymmetric quantization of 8 sub-blocks of 32, x[8 * 32] (sub-block s at x + 32 s), each to
// L[32 s + i] in 0..nmax with x ~ scale * L + min (min <= 0): an initial min/max grid, then
// nstep+1 trial inverse scales (nmax + rmin + rdelta * is) / (max - min), each refit by weighted
// least squares for (scale, min) and kept when its squared error, weighted by weights[8 * 32],
// is lower than the best so far (the min the next trial starts from is the best one's). Sets
// scales[s] and neg_mins[s] = -min. (ggml's make_qkx2_quants without use_mad, once a
// sub-block, with the same values: the sub-blocks run in parallel lanes, each lane the
// reference's operations in its order.)
void make_qkx2_quants_x8(const float* x, const float* weights, int nmax, float rmin, float rdelta, int nstep,
                         uint8_t* L, float* scales, float* neg_mins);

// Symmetric quantization of 8 sub-blocks of 16, x[8 * 16], each to L[16 s + i] in
// 0..2*nmax-1 (stored with +nmax offset; a sub-block whose largest |x| is under kGroupMaxEps
// gets L = 0, scale 0), weights x^2, the scale chosen among 19 trial inverse scales
// -(nmax + 0.1 * is) / max by the weighted least-squares fit. Sets scales[s] (signed: the sign
// of the largest-|x| element). (ggml's make_qx_quants with rmse_type 1 and no importance
// weights, once a sub-block, the same values; lanes as make_qkx2_quants_x8's.)
void make_qx_quants_rmse1_x8(const float* x, int nmax, int8_t* L, float* scales);

// K-quant 6-bit scale/min packing of sub-block j (0..7) into scales[12].
void put_scale_min_k4(int j, uint8_t ls, uint8_t lm, uint8_t* scales);
void get_scale_min_k4(int j, const uint8_t* scales, uint8_t* ls, uint8_t* lm);

// The shared first half of Q4_K and Q5_K quantization for one 256-element super-block x:
// each 32-element sub-block gets a (scale, min) pair from make_qkx2_quants_x8 with weights
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
