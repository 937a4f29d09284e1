// The prefill path's dequantized tiles (backend/cuda/dequant_tiles.h): every tile within the
// scratch, as few tiles as fit, equal tiles (the last no longer than the others), and each tile's
// first row on kRowAlign rows whenever a tile holds that many, so every cuBLAS output offset
// keeps the alignment its Hopper kernels need. Plain C++: runs without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "backend/cuda/dequant_tiles.h"

namespace kestrel {
namespace {

constexpr size_t kTile = dequant_tiles::kTermBytes;

TEST(DequantTiles, ReleasedShapes) {
  // The 9B's down projection (12288-wide rows): 2730 rows fit, so two tiles of 2048, not 2730 + 1366.
  EXPECT_EQ(dequant_tiles::tile_rows(4096, 12288, kTile), 2048);
  // Its gate/up (4096-wide rows, 8192 fit): two tiles of 6144.
  EXPECT_EQ(dequant_tiles::tile_rows(12288, 4096, kTile), 6144);
  // A matrix that fits whole is one tile.
  EXPECT_EQ(dequant_tiles::tile_rows(4096, 4096, kTile), 4096);
  EXPECT_EQ(dequant_tiles::tile_rows(8192, 4096, kTile), 8192);
  // 8200 rows: two tiles of 4224 (and 3976).
  EXPECT_EQ(dequant_tiles::tile_rows(8200, 4096, kTile), 4224);
}

TEST(DequantTiles, EveryShapeFitsAlignedAndEven) {
  for (const size_t bytes : {kTile, size_t(1) << 20, size_t(100000), size_t(5000)}) {
    for (int64_t K : {32, 256, 1000, 4096, 12288, 65536}) {
      const int64_t fit = std::max<int64_t>(1, int64_t(bytes / (size_t(K) * 2)));
      for (int64_t N = 1; N <= 20000; N += N < 300 ? 1 : 97) {
        const int64_t rows = dequant_tiles::tile_rows(N, K, bytes);
        const std::string at = "N " + std::to_string(N) + " K " + std::to_string(K) + " bytes " +
                               std::to_string(bytes);
        ASSERT_GE(rows, 1) << at;
        ASSERT_LE(rows, std::max<int64_t>(1, std::min(N, fit))) << at;
        const int64_t tiles = (N + rows - 1) / rows;
        if (fit >= N) {
          EXPECT_EQ(rows, N) << at;
          continue;
        }
        const int64_t align = fit >= dequant_tiles::kRowAlign ? dequant_tiles::kRowAlign : fit >= 4 ? 4 : 1;
        EXPECT_EQ(rows % align, 0) << at;
        // as few tiles as the aligned fit allows
        const int64_t most = fit / align * align;
        EXPECT_EQ(tiles, (N + most - 1) / most) << at;
        // equal tiles: the last is short by less than a tile's alignment per tile
        EXPECT_GT(N - (tiles - 1) * rows, 0) << at;
        EXPECT_LT(tiles * rows - N, tiles * align) << at;
      }
    }
  }
}

}  // namespace
}  // namespace kestrel
