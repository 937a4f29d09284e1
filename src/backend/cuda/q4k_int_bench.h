// A measurement for docs/cuda.md's "What remains for issue 7": a one-row Q4_K GEMV whose weights
// come in a layout made for it and whose arithmetic is integer dot products, against the shipped
// kernel. GpuBench.Q4kIntGemv prints it; nothing in a forward pass uses it.
//  - Layout: the columns in groups of 32 (one a lane), each group's super-blocks in K order, and
//    a super-block tile (32 columns x 144 bytes) stored as 9 chunks of 16 bytes, chunk-major: a
//    warp's 16-byte loads read 512 contiguous bytes, the header chunk first.
//  - Activations: each 32 elements x become x^ = s (a + b / 128 + c / 16384), s a power of two
//    with max |x| / s in [32, 64), a, b, c integers in [-64, 64] (every step exact in F32, so
//    |x - x^| <= 2^-20 max |x| of the 32). A sub-block's Q = sum q (16384 a + 128 b + c) is three
//    dp4a chains, exact in 32-bit integers, whatever the order: a row's bits would not depend on
//    the rows beside it. Per sub-block: y += (d sc s / 16384) float(Q) - (dmin m) sum(x^).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kestrel::cuda {

struct Q4kIntGemvRun {
  int slices = 0;             // warps that split a group's super-blocks (a block is one group)
  bool converted = false;     // x came already split into terms (a producer kernel's job), else the GEMV splits it
  bool row_major = false;     // the weights in the GGUF's row-major layout, not the tile layout
  double hot_us = 0;          // a launch, back to back on one copy of the weights (L2-assisted)
  double dram_us = 0;         // a launch, the copies taking turns (>= 256 MB in all)
  std::vector<float> out;     // [N]
};

// w: N rows of K / 256 Q4_K super-blocks (row-major, as a GGUF holds them), N % 32 == 0,
// K % 256 == 0. x: [K]. Runs each variant (slices 4, 8, 16, up to K / 256, uneven where P does not
// divide it; x split by
// the GEMV or beforehand; and 8, 16 slices split inside on the row-major layout) `reps` times after
// warm-up; the split alone is timed into *split_us.
std::vector<Q4kIntGemvRun> time_q4k_int_gemv(const void* w, int64_t N, int64_t K, const float* x, int reps,
                                            double* split_us);

struct Q4kIntRowsRun {
  int rows = 0, slices = 0;
  bool split_inside = false;       // each warp splits its rows' values as it goes, else the split before
  double hot_us = 0, dram_us = 0;  // as above
  bool same_bits = false;          // every row's output equals the one-row kernel's on that row alone
  std::vector<float> out;          // [rows, N]
};

// The same weights times `rows` (2 .. 8) rows of x ([rows, K]) on the tensor cores (three s8 mmas a
// sub-block, one a term): rows 2, 4 and 8 at 8 slices, 8 at 16, the split before; rows 2 and 8 at 8
// slices and 8 at 16, split inside (slices of uneven length where P does not divide K / 256).
std::vector<Q4kIntRowsRun> time_q4k_int_rows(const void* w, int64_t N, int64_t K, const float* x, int reps);

}  // namespace kestrel::cuda
