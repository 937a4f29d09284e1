// How the CUDA prefill path of a block-format matmul (matmul_quant.cu) cuts the weight into the
// row tiles it dequantizes to BF16 and hands to cuBLAS: here, in plain C++, so the unit tests
// check the rule.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace kestrel::dequant_tiles {

// The dequantized weight tile: at most this many bytes of BF16 rows per term (hi, and lo when the
// weight is split; memory_plan.cc reserves both).
constexpr size_t kTermBytes = size_t(64) << 20;

// Rows of a tile are a multiple of this when the scratch holds that many: cuBLAS picks its Hopper
// kernels only for an output whose column offset keeps 16-byte alignment, and its tiles are 64 to
// 256 rows. A tile of 2730 rows (64 MiB of BF16 rows of 12288) put the next tile's output 10920
// bytes in and got an Ampere kernel for 4-byte alignment: 252 TFLOP/s on an H100, against ~500
// for the other projections' GEMMs (the 9B Q4_K_M's down projections, 24% of an 8192-token
// prefill at the default precision, bench/results/pp-trace-h100-2026-12-07.txt).
constexpr int64_t kRowAlign = 128;

// The rows of each tile (the last may be shorter) of an N x K weight whose BF16 tile may take at
// most tile_bytes: as few tiles as fit, of equal size rounded up to kRowAlign, never more rows
// than fit (then rounded down to kRowAlign, or to 4 rows, or 1, when fewer than that fit).
inline int64_t tile_rows(int64_t N, int64_t K, size_t tile_bytes) {
  const int64_t fit = std::max<int64_t>(1, int64_t(tile_bytes / (size_t(K) * 2)));
  if (fit >= N) return std::max<int64_t>(1, N);
  const int64_t align = fit >= kRowAlign ? kRowAlign : fit >= 4 ? 4 : 1;
  const int64_t most = fit / align * align;
  const int64_t tiles = (N + most - 1) / most;
  const int64_t even = ((N + tiles - 1) / tiles + align - 1) / align * align;
  return std::min(even, most);
}

}  // namespace kestrel::dequant_tiles
