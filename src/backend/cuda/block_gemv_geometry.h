// How the CUDA Q4_K and Q6_K GEMVs (quant_gemv_q4k.cuh, quant_gemv_q6k.cuh) split a matrix over
// warps and what each warp keeps in shared memory: here, in plain C++, because the GPU tests
// derive their error bounds from the same geometry and the launch sizes its shared memory from it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cmath>
#include <cstring>

#include "core/host_device.h"

namespace kestrel::block_gemv_layout {

constexpr int kWarps = 8;   // warps of a block
constexpr int kStages = 2;  // shared-memory slots of a warp's copy ring

// A copy-engine GEMV block's dynamic shared memory, for a slot whose run sums (R rows of 16
// floats) start at slot_sums bytes and a warp of `cols` output columns: kWarps rings of kStages
// slots (each rounded up to 128 bytes: a tensor copy lands on a 128-byte boundary), their
// barriers, each warp's partial sums for the reduction over a column's warps, and 128 bytes to
// align the base.
KESTREL_HD constexpr int slot_bytes(int slot_sums, int R) { return (slot_sums + R * 16 * 4 + 127) / 128 * 128; }
KESTREL_HD constexpr size_t barrier_offset(int slot_bytes) { return size_t(kWarps) * kStages * size_t(slot_bytes); }
KESTREL_HD constexpr size_t partial_offset(int slot_bytes) {
  return barrier_offset(slot_bytes) + size_t(kWarps) * kStages * 8;
}
KESTREL_HD constexpr size_t smem_bytes(int slot_bytes, int R, int cols) {
  return partial_offset(slot_bytes) + size_t(kWarps) * R * cols * 4 + 128;
}

}  // namespace kestrel::block_gemv_layout

namespace kestrel::q4k_gemv {

constexpr int kSuperElems = 256;  // elements of a Q4_K super-block
constexpr int kSuperBytes = 144;  // its bytes: d, dmin (f16), 12 bytes of 6-bit scales and mins, 128 of quants
using block_gemv_layout::kStages;
using block_gemv_layout::kWarps;
constexpr int kMaxSlices = 8;     // warps sharing a column

// Warps that share a column, each summing a contiguous 1/P of its super-blocks: the largest
// power of two up to kMaxSlices that divides the S super-blocks of a row.
KESTREL_HD constexpr int slices(int64_t S) {
  int P = kMaxSlices;
  while (P > 1 && S % P != 0) P >>= 1;
  return P;
}
// Output columns of one block: a warp's lanes are 32 columns, and kWarps / P warp groups.
KESTREL_HD constexpr int block_columns(int64_t K) { return 32 * (kWarps / slices(K / kSuperElems)); }

// One slot of a warp's ring: one super-block of each of the warp's 32 columns (column l's at
// 144 l), then R rows of the super-block's 256 activations (rewritten in place as BF16 terms),
// then each row's sub-block sums (8 of the 16 floats).
constexpr int kSlotX = 32 * kSuperBytes;  // 16-byte aligned, as the bulk copies need
KESTREL_HD constexpr int slot_sums(int R) { return kSlotX + R * kSuperElems * 4; }
KESTREL_HD constexpr int slot_bytes(int R) { return block_gemv_layout::slot_bytes(slot_sums(R), R); }
KESTREL_HD constexpr size_t barrier_offset(int R) { return block_gemv_layout::barrier_offset(slot_bytes(R)); }
KESTREL_HD constexpr size_t partial_offset(int R) { return block_gemv_layout::partial_offset(slot_bytes(R)); }
// The block's shared memory: rings, barriers, partial sums, then each warp's table of its 32
// columns' 8 sub-block scales (the tensor-core arithmetic's, 1 KiB a warp).
constexpr int kScaleTable = 32 * 8 * 4;
KESTREL_HD constexpr size_t smem_bytes(int R) {
  return block_gemv_layout::smem_bytes(slot_bytes(R), R, 32) + size_t(kWarps) * kScaleTable;
}

// The tensor-core arithmetic's A tiles: row i (0..15) of tile mt is the warp's column 16 mt +
// mma_column(i). Lane (g, t) reads 8 bytes at 8 t of a 32-byte chunk of rows g and g + 8, and
// columns sit 144 bytes (36 words) apart, so column c starts 4 c banks on: taking the even
// columns for g = 0..3 and the odd ones for g = 4..7 puts each half-warp's 64-bit phase on 32
// distinct banks.
KESTREL_HD constexpr int mma_column(int i) { return (i & 8) + ((i & 4) ? 2 * (i & 3) + 1 : 2 * (i & 3)); }

}  // namespace kestrel::q4k_gemv

namespace kestrel::q6k_gemv {

// The Q6_K GEMV has Q4_K's blocks, slices and two-slot rings, with 16 columns a warp: lane l
// takes column l % 16 and half l / 16 of each of its super-blocks (elements 128 h .. 128 h + 127:
// 8 runs of 16, each under its own scale), and the column's two lanes add their halves.
constexpr int kSuperElems = 256;
constexpr int kSuperBytes = 210;  // ql[128], qh[64], 16 int8 scales, d (f16)
constexpr int kCols = 16;         // columns of a warp
using q4k_gemv::kMaxSlices;
using q4k_gemv::kStages;
using q4k_gemv::kWarps;
using q4k_gemv::slices;

// The copy engine takes the weights as a 2D tensor of 16-bit words [N, 105 S], so the row pitch
// (210 S bytes) must be a multiple of 16: S % 8 == 0. Other Q6_K matrices take the unit GEMV
// (quant_gemv.cuh); the choice depends on K alone, so a row's bits do not depend on R.
KESTREL_HD constexpr bool supported(int64_t K) { return K % kSuperElems == 0 && (K / kSuperElems) % 8 == 0; }
KESTREL_HD constexpr int block_columns(int64_t K) { return kCols * (kWarps / slices(K / kSuperElems)); }

// A column's landing place in a slot: its 210 bytes and 30 of the next super-block (a box row is
// a multiple of 16 bytes; past the row's end the copy fills zeros), 240 bytes so that the eight
// lanes of a 128-bit shared-memory phase fall on distinct banks.
constexpr int kBoxBytes = 240;
constexpr int kSlotX = kCols * kBoxBytes;  // 3840
// A row's 256 activations in a slot: half 0 at 0, half 1 at 528 bytes (16 bytes apart in bank
// terms, so a warp's two halves read in one shared-memory wavefront).
constexpr int kHalfPitch = 528;
constexpr int kRowPitch = kHalfPitch + 512;  // 1040
KESTREL_HD constexpr int slot_sums(int R) { return kSlotX + R * kRowPitch; }
KESTREL_HD constexpr int slot_bytes(int R) { return block_gemv_layout::slot_bytes(slot_sums(R), R); }
KESTREL_HD constexpr size_t barrier_offset(int R) { return block_gemv_layout::barrier_offset(slot_bytes(R)); }
KESTREL_HD constexpr size_t partial_offset(int R) { return block_gemv_layout::partial_offset(slot_bytes(R)); }
KESTREL_HD constexpr size_t smem_bytes(int R) { return block_gemv_layout::smem_bytes(slot_bytes(R), R, kCols); }

// F32 roundings an element's product passes through (the tests' bound gamma(n) * S', S' with
// the "min" m = 32 s: the quants are summed unsigned, s * sum(x q) - 32 s * sum(x)): the run's
// FMA chain (16), the scale and the subtraction (18); a half's 8 runs in order (7); the two
// halves (1); the warp's S / P super-blocks (S / P - 1); the column's P warps (P - 1).
KESTREL_HD constexpr int roundings(int64_t K) {
  const int64_t S = K / kSuperElems;
  const int P = slices(S);
  return int(24 + S / P + P);
}

}  // namespace kestrel::q6k_gemv

// The integer-dot Q4_K, Q8_0 and Q6_K GEMVs (q4k_int_gemv.cuh) and their device layouts,
// DType::kQ4_K_T32, kQ8_0_T32 and kQ6_K_T32: a [N, K] matrix's rows in groups of 32 (the last one
// w = N % 32 rows if that is not 0), each group its rows' super-blocks (256 elements: one Q4_K or
// Q6_K block, eight Q8_0 blocks) in K order, and a super-block tile (w rows x 144, 272 or 210
// bytes) stored as chunks of 16 bytes, chunk-major: Q4_K's 9 chunks are its bytes in order (the
// header chunk first); Q8_0's 17 are the eight blocks' scales d (chunk 0: 16-bit word b the d of
// block b), then their quants (chunks 1 + 2b and 2 + 2b: block b's 32); Q6_K's 13 are its first
// 208 bytes in order (ql: chunks 0-7, qh: 8-11, the 16 scales: 12), and its d follows them, the w
// rows' d's side by side (2 w bytes: the tile is 210 w bytes, so w is a multiple of 8 to keep the
// chunks 16-byte aligned). A warp's 16-byte loads, a lane a row, then read w 16 contiguous bytes.
// The bytes of rows 32g .. 32g + w - 1 are a permutation of what they are row-major, so a slice
// that keeps whole groups keeps its row-major byte range.
namespace kestrel::q4k_int {

constexpr int kSuperElems = 256, kSuperBytes = 144, kChunks = 9, kGroup = 32;
constexpr int kQ8Chunks = 17;  // a Q8_0 super-block's chunks (272 bytes)
constexpr int kQ6Chunks = 13, kQ6SuperBytes = 210;  // a Q6_K super-block's chunks, and its bytes with d
constexpr int kWarps = block_gemv_layout::kWarps;  // a block's warps: slices of one group's super-blocks

// Byte offset of chunk j (Q4_K, chunks = kChunks: 0 d, dmin and the scales, 1 .. 8 quant bytes
// 16 (j - 1) .. + 15; Q8_0, chunks = kQ8Chunks: as above) of super-block s of row n, in a matrix
// of N rows of S super-blocks.
KESTREL_HD constexpr int64_t chunk_offset(int64_t N, int64_t S, int64_t n, int64_t s, int j, int chunks = kChunks) {
  const int64_t g0 = n / kGroup * kGroup, w = N - g0 < kGroup ? N - g0 : kGroup;
  return g0 * S * 16 * chunks + ((s * chunks + j) * w + (n - g0)) * 16;
}
// dst (N S 144 bytes) = the kQ4_K_T32 layout of src, a row-major Q4_K matrix of N rows of S
// super-blocks (host code: the upload and GpuBench.Q4kIntGemv).
inline void to_tile_layout(const uint8_t* src, int64_t N, int64_t S, uint8_t* dst) {
  for (int64_t n = 0; n < N; ++n)
    for (int64_t s = 0; s < S; ++s)
      for (int j = 0; j < kChunks; ++j)
        std::memcpy(dst + chunk_offset(N, S, n, s, j), src + size_t(n * S + s) * kSuperBytes + 16 * size_t(j), 16);
}
// dst (N S 272 bytes) = the kQ8_0_T32 layout of src, a row-major Q8_0 matrix of N rows of 8 S
// blocks (d as 2 bytes, then 32 quants).
inline void to_q8_tile_layout(const uint8_t* src, int64_t N, int64_t S, uint8_t* dst) {
  constexpr int kBlockBytes = 34;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t s = 0; s < S; ++s) {
      const uint8_t* sb = src + size_t(n * S + s) * 8 * kBlockBytes;
      uint8_t* d = dst + chunk_offset(N, S, n, s, 0, kQ8Chunks);
      for (int b = 0; b < 8; ++b) {
        std::memcpy(d + 2 * b, sb + b * kBlockBytes, 2);
        for (int h = 0; h < 2; ++h)
          std::memcpy(dst + chunk_offset(N, S, n, s, 1 + 2 * b + h, kQ8Chunks), sb + b * kBlockBytes + 2 + 16 * h, 16);
      }
    }
}
// Byte offset of chunk j (0 .. 12: the row-major bytes 16 j .. 16 j + 15) of Q6_K super-block s of
// row n, and of its d, in a kQ6_K_T32 matrix of N rows (N % 8 == 0) of S super-blocks.
KESTREL_HD constexpr int64_t q6_chunk_offset(int64_t N, int64_t S, int64_t n, int64_t s, int j) {
  const int64_t g0 = n / kGroup * kGroup, w = N - g0 < kGroup ? N - g0 : kGroup;
  return (g0 * S + s * w) * kQ6SuperBytes + (j * w + (n - g0)) * 16;
}
KESTREL_HD constexpr int64_t q6_d_offset(int64_t N, int64_t S, int64_t n, int64_t s) {
  const int64_t g0 = n / kGroup * kGroup, w = N - g0 < kGroup ? N - g0 : kGroup;
  return (g0 * S + s * w) * kQ6SuperBytes + kQ6Chunks * 16 * w + (n - g0) * 2;
}
// dst (N S 210 bytes) = the kQ6_K_T32 layout of src, a row-major Q6_K matrix of N rows (a
// multiple of 8) of S super-blocks.
inline void to_q6_tile_layout(const uint8_t* src, int64_t N, int64_t S, uint8_t* dst) {
  for (int64_t n = 0; n < N; ++n)
    for (int64_t s = 0; s < S; ++s) {
      const uint8_t* sb = src + size_t(n * S + s) * kQ6SuperBytes;
      for (int j = 0; j < kQ6Chunks; ++j) std::memcpy(dst + q6_chunk_offset(N, S, n, s, j), sb + 16 * j, 16);
      std::memcpy(dst + q6_d_offset(N, S, n, s), sb + 16 * kQ6Chunks, 2);
    }
}
// The integer-dot Q6_K GEMV's quants: four of them as the s8 bytes 4 (q - 32), q the 6-bit value
// (a nibble and 2 high bits). q6_bytes: nib holds each nibble in bits 2..5 of its byte, hb the
// high bits in bits 6, 7 (their other bits any); flipping the top bit makes q - 32 of the 6-bit
// value, which the byte holds times 4. q6_quarter: quarter r (0 .. 3) of a half super-block's 128
// values, 4 of them (l .. l + 3 of the quarter), from the ql word at l (r even) or at 32 + l (r
// odd), low nibbles for r < 2 and high ones after, and the qh word at l, its bits 2r, 2r + 1
// (ggml's order). q6_sum: a sub-block's Q = sum q (16384 a + 128 b + c) from the sums over the
// bytes 4q (|sum 4q a| <= 16 128 64 = 2^17): 4096 A + 32 B + C / 4, exact (C a multiple of 4,
// |Q| < 2^30).
KESTREL_HD constexpr uint32_t q6_bytes(uint32_t nib, uint32_t hb) {
  return (nib & 0x3C3C3C3Cu) | ((hb & 0xC0C0C0C0u) ^ 0x80808080u);
}
KESTREL_HD constexpr uint32_t q6_quarter(uint32_t ql, uint32_t qh, int r) {
  return q6_bytes(r < 2 ? ql << 2 : ql >> 2, qh << (6 - 2 * r));
}
KESTREL_HD constexpr int32_t q6_sum(int32_t A, int32_t B, int32_t C) { return A * 4096 + B * 32 + (C >> 2); }
// The one-row integer-dot GEMV's walk over a lane's n units (Q4_K: super-blocks; Q8_0, Q6_K: half
// super-blocks), two in flight: a holds unit 0 (loaded by the caller, before its wait), load(c, t)
// fills c with unit t, dot(c, t, y) adds unit t's products to y, units in order.
template <typename Buf, typename Load, typename Dot>
KESTREL_HD inline float slice_dot(Load&& load, Dot&& dot, Buf& a, Buf& b, int n) {
  float y = 0.0f;
  for (int t = 0; t < n; t += 2) {
    if (t + 1 < n) load(b, t + 1);
    y = dot(a, t, y);
    if (t + 1 >= n) break;
    if (t + 2 < n) load(a, t + 2);
    y = dot(b, t + 1, y);
  }
  return y;
}
// A group's slices: V contiguous runs of its S super-blocks, slice v [slice_first(S, v, V),
// slice_first(S, v + 1, V)), each summed on its own (a warp's) and the V sums added in order. V
// depends on the matrix alone, so a row's bits do not depend on the launch or its rows: 16 for a
// matrix of at least 16 super-blocks a row (K >= 4096), else 8. A block has P warps: 8, or 16
// when every matrix of a one-row launch has 16 slices (all its T32 matrices share K, so a launch
// of only those has); warp p takes slices p V / P .. (p + 1) V / P - 1, whose super-blocks are its
// 8-slice range. On an H100 (2026-12-07) the 9B Q4_K_M decoded 328.7 t/s at batch 1 with 8 slices,
// 336.0 with 16 for the matrices of at most 128 groups (4096 rows) only, and 350.7 with 16 for
// every one; batch 8 1204.6, 1166.7 and 1192.5 (bench/results/gemv-wide-groups-h100-2026-12-07.txt).
constexpr int kWideSlices = 16;
constexpr int64_t kWideGroups = INT64_MAX;
// (wide_groups: the most groups a 16-slice matrix has, kWideGroups, or KESTREL_CUDA_GEMV_WIDE's
// count for an A/B; 0: 8 slices always.)
KESTREL_HD constexpr int group_slices(int64_t N, int64_t S, int64_t wide_groups = kWideGroups) {
  return (N + kGroup - 1) / kGroup <= wide_groups && S >= kWideSlices ? kWideSlices : kWarps;
}
KESTREL_HD constexpr int slice_first(int64_t S, int v, int V) { return int(S * v / V); }
KESTREL_HD constexpr int longest_slice(int64_t S, int V) { return int((S + V - 1) / V); }
// Per warp of a block of P warps, for one row: its slices' split activations (3 bytes a value,
// then a unit and a sum per 32 values: 208 words a super-block); then the block's partial sums,
// kWideSlices x 32 x R floats.
KESTREL_HD constexpr size_t split_bytes(int64_t S, int P) { return size_t(longest_slice(S, P)) * 208 * 4; }
KESTREL_HD constexpr size_t smem_bytes(int R, int64_t K, int P) {
  return (R == 1 ? size_t(P) * split_bytes(K / kSuperElems, P) : 0) + size_t(kWideSlices) * kGroup * R * 4;
}

// One value's split under inv = 2^(6 - e) (e the exponent of its 32 values' largest magnitude, so
// |x inv| < 64): the cascade a = rint(u), b = rint(128 (u - a)), c = rint(128 (128 (u - a) - b)),
// u = x inv, with every rounding an FMA against kRound (adding 1.5 2^23 to a float of magnitude
// under 2^22 leaves the nearest integer, ties to even, in the low mantissa bits) and every
// remainder an exact FMA, so no conversion instruction: those run at an eighth of the FMA's rate
// on sm_90. a, b, c come back as the bits of kRound + digit, whose low byte is the digit as an s8;
// t = 16384 a + 128 b + c by one more rounding, t = rint(u 16384)
// (tests/unit/backend/block_gemv_geometry_test.cc: the same digits and t as the cascade).
constexpr float kRound = 12582912.0f;  // 1.5 2^23
constexpr uint32_t kRoundBits = 0x4B400000u;
KESTREL_HD inline int32_t split_value(float x, float inv, uint32_t& a, uint32_t& b, uint32_t& c) {
  const float A = fmaf(x, inv, kRound);
  const float fa = A - kRound;
  const float r = fmaf(x, inv, -fa);  // u - a, exact (|.| <= 1/2)
  const float B = fmaf(r, 128.0f, kRound);
  const float fb = B - kRound;
  const float C = fmaf(fmaf(r, 128.0f, -fb), 128.0f, kRound);  // the inner FMA exact as well
  a = float_bits(A);
  b = float_bits(B);
  c = float_bits(C);
  return int32_t(float_bits(fmaf(x, inv * 16384.0f, kRound)) - kRoundBits);
}
// The split's first two digits alone (x split into two terms, --matmul-precision bf16): a and b as
// split_value gives them, and t = 128 a + b = rint(u 128) (128 a is an even integer, so the tie
// goes the same way) by one rounding.
KESTREL_HD inline int32_t split_value2(float x, float inv, uint32_t& a, uint32_t& b) {
  const float A = fmaf(x, inv, kRound);
  const float fa = A - kRound;
  const float r = fmaf(x, inv, -fa);
  a = float_bits(A);
  b = float_bits(fmaf(r, 128.0f, kRound));
  return int32_t(float_bits(fmaf(x, inv * 128.0f, kRound)) - kRoundBits);
}

}  // namespace kestrel::q4k_int
