// The copy-engine GEMVs' geometry (backend/cuda/block_gemv_geometry.h) holds the layout rules the
// CUDA kernels rely on but cannot check at run time: shared memory within what the kernel is
// opted in to, slots where tensor and bulk copies may land, column pitches that put a 128-bit
// shared-memory phase on distinct banks, boxes that cover a super-block from the 16-byte boundary
// before it, and the Q6_K path taken exactly where the row pitch suits a tensor map. Plain C++:
// runs without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "backend/cuda/block_gemv_geometry.h"

namespace kestrel {
namespace {

constexpr size_t kOptInSmem = size_t(227) << 10;  // matmul.cu's kQuantGemvSmemMax (an H200's opt-in limit)

// Eight lanes reading 16 bytes each at `pitch` steps fall on distinct banks when the pitch is an
// odd number of 16-byte units.
bool phase_conflict_free(int pitch) { return pitch % 16 == 0 && (pitch / 16) % 2 == 1; }

TEST(BlockGemvGeometry, SlicesArePowersOfTwoDividingTheRow) {
  for (int64_t S = 1; S <= 96; ++S) {
    const int P = q4k_gemv::slices(S);
    EXPECT_TRUE(P >= 1 && P <= q4k_gemv::kMaxSlices && (P & (P - 1)) == 0) << S;
    EXPECT_EQ(S % P, 0) << S;
    if (P < q4k_gemv::kMaxSlices) {
      EXPECT_NE(S % (2 * P), 0) << S;  // the largest such
    }
    EXPECT_EQ(q4k_gemv::kWarps % P, 0) << S;                        // whole column groups a block
  }
  EXPECT_EQ(q4k_gemv::slices(16), 8);  // K = 4096
  EXPECT_EQ(q4k_gemv::slices(48), 8);  // K = 12288
  EXPECT_EQ(q4k_gemv::slices(11), 1);  // K = 2816
}

TEST(BlockGemvGeometry, SharedMemoryFitsEveryRowCount) {
  for (int R = 1; R <= 8; ++R) {
    EXPECT_LE(q4k_gemv::smem_bytes(R), kOptInSmem) << "Q4_K R=" << R;
    EXPECT_LE(q6k_gemv::smem_bytes(R), kOptInSmem) << "Q6_K R=" << R;
    // slots on 128-byte boundaries (tensor copies), sums and activation rows on 16 (bulk copies)
    EXPECT_EQ(q4k_gemv::slot_bytes(R) % 128, 0) << R;
    EXPECT_EQ(q6k_gemv::slot_bytes(R) % 128, 0) << R;
    EXPECT_EQ(q4k_gemv::slot_sums(R) % 16, 0) << R;
    EXPECT_EQ(q6k_gemv::slot_sums(R) % 16, 0) << R;
    EXPECT_GE(q4k_gemv::slot_bytes(R), q4k_gemv::slot_sums(R) + R * 16 * 4) << R;
    EXPECT_GE(q6k_gemv::slot_bytes(R), q6k_gemv::slot_sums(R) + R * 16 * 4) << R;
    EXPECT_EQ(q4k_gemv::partial_offset(R) % 16, 0) << R;
    EXPECT_EQ(q6k_gemv::partial_offset(R) % 16, 0) << R;
  }
  // two blocks an SM at one row (the launch bound the kernels are compiled for)
  EXPECT_LE(2 * (q4k_gemv::smem_bytes(1) + 1024), size_t(228) << 10);
  EXPECT_LE(2 * (q6k_gemv::smem_bytes(1) + 1024), size_t(228) << 10);
}

TEST(BlockGemvGeometry, LandingPitchesAvoidBankConflicts) {
  EXPECT_TRUE(phase_conflict_free(q6k_gemv::kBoxBytes));  // a Q6_K column's 240
  EXPECT_EQ(q4k_gemv::kSlotX % 16, 0);
  EXPECT_EQ(q6k_gemv::kSlotX % 128, 0);
  // a Q6_K row's two activation halves 16 bytes apart in bank terms: one wavefront
  EXPECT_EQ(q6k_gemv::kHalfPitch % 16, 0);
  EXPECT_NE((q6k_gemv::kHalfPitch / 16) % 8, 0);
  EXPECT_GE(q6k_gemv::kHalfPitch, 512);
  EXPECT_EQ(q6k_gemv::kRowPitch, q6k_gemv::kHalfPitch + 512);
}

TEST(BlockGemvGeometry, Q6kBoxCoversASuperBlockFromTheBoundaryBefore) {
  // a box starts at the 16-byte boundary at or before super-block s: 2 (s % 8) bytes before it
  for (int s = 0; s < 64; ++s) {
    const int start = s * q6k_gemv::kSuperBytes, box = start & ~15;
    EXPECT_EQ(start - box, 2 * (s % 8)) << s;
    EXPECT_LE(start - box + q6k_gemv::kSuperBytes, q6k_gemv::kBoxBytes) << s;
  }
  EXPECT_EQ(q6k_gemv::kBoxBytes % 16, 0);  // a box row is a multiple of 16 bytes
  EXPECT_LE(q6k_gemv::kBoxBytes / 2, 256);  // and at most 256 16-bit words
}

TEST(BlockGemvGeometry, Q6kCopyEngineExactlyWhereTheRowPitchAllowsATensorMap) {
  for (int64_t S = 1; S <= 96; ++S) {
    const int64_t K = S * q6k_gemv::kSuperElems, row_bytes = S * q6k_gemv::kSuperBytes;
    EXPECT_EQ(q6k_gemv::supported(K), row_bytes % 16 == 0) << K;  // a tensor map's row stride
  }
  EXPECT_FALSE(q6k_gemv::supported(4096 + 100));  // not whole super-blocks
  EXPECT_TRUE(q6k_gemv::supported(4096));
  EXPECT_TRUE(q6k_gemv::supported(12288));
  EXPECT_FALSE(q6k_gemv::supported(2816));
}

// The tensor-core Q4_K GEMV's A tiles: every one of a warp's 32 columns in exactly one tile row,
// and each half-warp's 64-bit loads (lanes g = 0..3 or 4..7, t = 0..3, rows g and g + 8, 8 bytes
// at 8 t of any 32-byte chunk) on 32 distinct banks.
TEST(BlockGemvGeometry, Q4kMmaTilesCoverTheColumnsWithoutBankConflicts) {
  std::vector<int> seen(32, 0);
  for (int mt = 0; mt < 2; ++mt)
    for (int i = 0; i < 16; ++i) ++seen[size_t(16 * mt + q4k_gemv::mma_column(i))];
  for (int c = 0; c < 32; ++c) EXPECT_EQ(seen[size_t(c)], 1) << c;
  for (int mt = 0; mt < 2; ++mt)
    for (int half : {0, 8})  // rows g and g + 8 load separately
      for (int chunk = 0; chunk < 4; ++chunk)
        for (int g0 : {0, 4}) {
          std::vector<int> banks(32, 0);
          for (int g = g0; g < g0 + 4; ++g)
            for (int t = 0; t < 4; ++t) {
              const int col = 16 * mt + q4k_gemv::mma_column(g + half);
              const int byte = col * q4k_gemv::kSuperBytes + 16 + 32 * chunk + 8 * t;
              ++banks[size_t((byte / 4) % 32)];
              ++banks[size_t((byte / 4 + 1) % 32)];
            }
          for (int b = 0; b < 32; ++b) EXPECT_EQ(banks[size_t(b)], 1) << "tile " << mt << " g0 " << g0 << " bank " << b;
        }
}

// The rounding counts the GPU tests' bounds take (a change of order must change them too).
TEST(BlockGemvGeometry, RoundingCounts) {
  EXPECT_EQ(q6k_gemv::roundings(4096), 24 + 2 + 8);
  EXPECT_EQ(q6k_gemv::roundings(12288), 24 + 6 + 8);
  EXPECT_EQ(q4k_gemv::block_columns(4096), 32);
  EXPECT_EQ(q6k_gemv::block_columns(4096), 16);
  EXPECT_EQ(q4k_gemv::block_columns(2816), 256);
}

// The kQ4_K_T32 and kQ8_0_T32 layouts are permutations of the row-major bytes within each group
// of 32 rows (the last group partial), so a slice of whole groups keeps its row-major byte range;
// the slices of a row's super-blocks cover them once, every warp's no longer than longest_slice.
TEST(BlockGemvGeometry, Q4kIntLayoutPermutesWithinGroups) {
  for (auto [N, S] : std::vector<std::pair<int64_t, int64_t>>{{64, 16}, {100, 4}, {33, 10}, {7, 1}}) {
    for (int chunks : {q4k_int::kChunks, q4k_int::kQ8Chunks}) {
      const int64_t super_bytes = 16 * chunks;
      std::vector<int> seen(size_t(N * S * chunks), 0);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t s = 0; s < S; ++s)
          for (int j = 0; j < chunks; ++j) {
            const int64_t off = q4k_int::chunk_offset(N, S, n, s, j, chunks);
            ASSERT_EQ(off % 16, 0);
            ASSERT_GE(off, 0);
            ASSERT_LT(off, N * S * super_bytes);
            const int64_t g0 = n / 32 * 32, g1 = std::min<int64_t>(N, g0 + 32);
            EXPECT_GE(off, g0 * S * super_bytes) << N << " " << n;  // inside its group's row-major range
            EXPECT_LT(off, g1 * S * super_bytes) << N << " " << n;
            ++seen[size_t(off / 16)];
          }
      for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], 1) << N << "x" << S << " chunk " << i;
      // a chunk of the same super-block and index, lanes of one group: 16 bytes apart
      if (N >= 2) {
        EXPECT_EQ(q4k_int::chunk_offset(N, S, 1, 0, 3, chunks) - q4k_int::chunk_offset(N, S, 0, 0, 3, chunks), 16);
      }
    }
    for (int V : {q4k_int::kWarps, q4k_int::kWideSlices}) {
      std::vector<int> covered(size_t(S), 0);
      for (int v = 0; v < V; ++v) {
        const int a = q4k_int::slice_first(S, v, V), b = q4k_int::slice_first(S, v + 1, V);
        EXPECT_LE(a, b);
        EXPECT_LE(b - a, q4k_int::longest_slice(S, V));
        for (int t = a; t < b; ++t) ++covered[size_t(t)];
      }
      for (int64_t t = 0; t < S; ++t) EXPECT_EQ(covered[size_t(t)], 1) << S << " super-block " << t << " V " << V;
    }
  }
  // 16 slices in a block of 8 warps: warp p takes slices 2p and 2p + 1, its 8-slice range, which
  // its split buffer holds
  for (int64_t S = 1; S <= 100; ++S)
    for (int p = 0; p < q4k_int::kWarps; ++p) {
      EXPECT_EQ(q4k_int::slice_first(S, 2 * p, q4k_int::kWideSlices), q4k_int::slice_first(S, p, q4k_int::kWarps));
      EXPECT_EQ(q4k_int::slice_first(S, 2 * p + 2, q4k_int::kWideSlices),
                q4k_int::slice_first(S, p + 1, q4k_int::kWarps));
    }
  EXPECT_EQ(q4k_int::smem_bytes(1, 12288, 8), size_t(8) * 6 * 208 * 4 + 16 * 32 * 4);
  EXPECT_EQ(q4k_int::smem_bytes(1, 12288, 16), size_t(16) * 3 * 208 * 4 + 16 * 32 * 4);
  EXPECT_EQ(q4k_int::smem_bytes(8, 12288, 8), size_t(16) * 32 * 8 * 4);
}

// A T32 matrix's slices depend on its shape alone: 16 for at least 16 super-blocks a row, else 8;
// with a group bound (KESTREL_CUDA_GEMV_WIDE's A/B), 16 only up to that many groups; 8 always at 0.
TEST(BlockGemvGeometry, IntGemvSlicesDependOnTheMatrixAlone) {
  EXPECT_EQ(q4k_int::group_slices(4096, 48), 16);    // the 9B's ffn_down
  EXPECT_EQ(q4k_int::group_slices(4096, 16), 16);    // its 4096 x 4096 projections
  EXPECT_EQ(q4k_int::group_slices(12288, 16), 16);   // gate / up
  EXPECT_EQ(q4k_int::group_slices(248320, 16), 16);  // the output head
  EXPECT_EQ(q4k_int::group_slices(32, 16), 16);
  EXPECT_EQ(q4k_int::group_slices(320, 15), 8);      // too few super-blocks for 16 slices
  EXPECT_EQ(q4k_int::group_slices(4096, 8), 8);      // the 35B-A3B's 2048-wide rows
  EXPECT_EQ(q4k_int::group_slices(4072, 16, 128), 16);  // a partial last group
  EXPECT_EQ(q4k_int::group_slices(4097, 16, 128), 8);   // 129 groups
  EXPECT_EQ(q4k_int::group_slices(4096, 48, 0), 8);
}

// to_tile_layout (the upload's and the bench's permutation) moves each 16-byte chunk to chunk_offset.
TEST(BlockGemvGeometry, Q4kIntTileLayoutMovesEachChunkToItsOffset) {
  for (int64_t N : {1, 32, 45, 70}) {
    const int64_t S = 3;
    std::vector<uint8_t> src(size_t(N * S * q4k_int::kSuperBytes)), dst(src.size(), 0);
    for (size_t i = 0; i < src.size(); ++i) src[i] = uint8_t(i * 7 + i / 251);
    q4k_int::to_tile_layout(src.data(), N, S, dst.data());
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < S; ++s)
        for (int j = 0; j < q4k_int::kChunks; ++j)
          for (int b = 0; b < 16; ++b)
            ASSERT_EQ(dst[size_t(q4k_int::chunk_offset(N, S, n, s, j) + b)],
                      src[size_t((n * S + s) * q4k_int::kSuperBytes + 16 * j + b)])
                << N << " " << n << " " << s << " " << j;
  }
}

// to_q8_tile_layout: block b of a super-block puts its d (2 bytes) at 16-bit word b of the scales
// chunk and its 32 quants in chunks 1 + 2b and 2 + 2b; every byte of the group lands once.
TEST(BlockGemvGeometry, Q8IntTileLayoutMovesEachBlockToItsChunks) {
  constexpr int kBlockBytes = 34, kSuperBytes = 8 * kBlockBytes;
  for (int64_t N : {1, 32, 45, 70}) {
    const int64_t S = 3;
    std::vector<uint8_t> src(size_t(N * S * kSuperBytes)), dst(src.size(), 0);
    for (size_t i = 0; i < src.size(); ++i) src[i] = uint8_t(i * 7 + i / 251);
    q4k_int::to_q8_tile_layout(src.data(), N, S, dst.data());
    std::vector<uint8_t> back(src.size(), 0);  // dst read back at the places the kernels read
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < S; ++s)
        for (int b = 0; b < 8; ++b) {
          uint8_t* blk = back.data() + size_t((n * S + s) * kSuperBytes + b * kBlockBytes);
          const int64_t sc = q4k_int::chunk_offset(N, S, n, s, 0, q4k_int::kQ8Chunks);
          std::memcpy(blk, dst.data() + sc + 2 * b, 2);
          for (int h = 0; h < 2; ++h) {
            const int64_t qc = q4k_int::chunk_offset(N, S, n, s, 1 + 2 * b + h, q4k_int::kQ8Chunks);
            std::memcpy(blk + 2 + 16 * h, dst.data() + qc, 16);
          }
        }
    EXPECT_EQ(back, src) << N;
  }
}

// The kQ6_K_T32 layout (rows a multiple of 8): every byte of a group lands once inside the
// group's row-major range, every chunk 16-byte aligned, a super-block's chunk j of neighbouring
// rows 16 bytes apart and their d's 2 bytes apart; read back at the places the kernels read
// (to_q6_tile_layout, then q6_chunk_offset / q6_d_offset), it is the row-major matrix.
TEST(BlockGemvGeometry, Q6IntTileLayoutPermutesWithinGroups) {
  constexpr int64_t kSb = q4k_int::kQ6SuperBytes;
  for (auto [N, S] : std::vector<std::pair<int64_t, int64_t>>{{64, 3}, {104, 2}, {40, 5}, {8, 1}}) {
    std::vector<uint8_t> src(size_t(N * S * kSb)), dst(src.size(), 0), back(src.size(), 0);
    for (size_t i = 0; i < src.size(); ++i) src[i] = uint8_t(i * 7 + i / 251);
    q4k_int::to_q6_tile_layout(src.data(), N, S, dst.data());
    std::vector<int> seen(src.size(), 0);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < S; ++s) {
        const int64_t g0 = n / 32 * 32, g1 = std::min<int64_t>(N, g0 + 32);
        auto place = [&](int64_t off, int64_t bytes, int64_t from) {
          ASSERT_GE(off, g0 * S * kSb) << N << " " << n;
          ASSERT_LE(off + bytes, g1 * S * kSb) << N << " " << n;
          for (int64_t b = 0; b < bytes; ++b) ++seen[size_t(off + b)];
          std::memcpy(back.data() + from, dst.data() + off, size_t(bytes));
        };
        for (int j = 0; j < q4k_int::kQ6Chunks; ++j) {
          const int64_t off = q4k_int::q6_chunk_offset(N, S, n, s, j);
          ASSERT_EQ(off % 16, 0) << N << " " << n << " " << s << " " << j;
          place(off, 16, (n * S + s) * kSb + 16 * j);
        }
        place(q4k_int::q6_d_offset(N, S, n, s), 2, (n * S + s) * kSb + 16 * q4k_int::kQ6Chunks);
      }
    for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], 1) << N << "x" << S << " byte " << i;
    EXPECT_EQ(back, src) << N;
    EXPECT_EQ(q4k_int::q6_chunk_offset(N, S, 1, 0, 5) - q4k_int::q6_chunk_offset(N, S, 0, 0, 5), 16);
    EXPECT_EQ(q4k_int::q6_d_offset(N, S, 1, 0) - q4k_int::q6_d_offset(N, S, 0, 0), 2);
  }
}

// The Q6_K GEMV's quant bytes: q6_quarter gives 4 (q - 32) of each of a half super-block's 128
// values in ggml's order (value 32 r + l of half h: the nibble of ql[64 h + 32 (r % 2) + l], low
// for r < 2, and bits 2r, 2r + 1 of qh[32 h + l]), for every quant value; q6_sum undoes the 4.
TEST(BlockGemvGeometry, Q6IntQuarterBytesAreFourTimesTheCenteredQuants) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<int> hits(64, 0);
  for (int rep = 0; rep < 64; ++rep) {
    uint8_t ql[128], qh[64];
    for (uint8_t& v : ql) v = uint8_t(byte(rng));
    for (uint8_t& v : qh) v = uint8_t(byte(rng));
    for (int h = 0; h < 2; ++h)
      for (int r = 0; r < 4; ++r)
        for (int l = 0; l < 32; l += 4) {
          uint32_t lw = 0, hw = 0;
          std::memcpy(&lw, ql + 64 * h + 32 * (r % 2) + l, 4);
          std::memcpy(&hw, qh + 32 * h + l, 4);
          const uint32_t word = q4k_int::q6_quarter(lw, hw, r);
          for (int i = 0; i < 4; ++i) {
            const int nib = (ql[64 * h + 32 * (r % 2) + l + i] >> (r < 2 ? 0 : 4)) & 15;
            const int q = (nib | ((qh[32 * h + l + i] >> (2 * r)) & 3) << 4) - 32;
            ASSERT_EQ(int8_t(uint8_t(word >> (8 * i))), 4 * q) << "half " << h << " quarter " << r << " l " << l + i;
            ++hits[size_t(q + 32)];
          }
        }
  }
  for (int q = 0; q < 64; ++q) EXPECT_GT(hits[size_t(q)], 0) << "quant " << q - 32;
  std::uniform_int_distribution<int32_t> term(-(1 << 15), 1 << 15);
  for (int rep = 0; rep < 1000; ++rep) {
    const int32_t A = term(rng), B = term(rng), C = term(rng);
    EXPECT_EQ(q4k_int::q6_sum(4 * A, 4 * B, 4 * C), A * 16384 + B * 128 + C);
  }
}

// The one-row integer-dot GEMV's walk over a lane's units (slice_dot, 2 in flight): every dot
// reads the unit its buffer was last loaded with, the units in order 0 .. n - 1, each loaded once
// and before its dot, never a buffer reloaded before its dot, and at most 2 loads ahead of the
// dots. A buffer here records the unit it holds.
TEST(BlockGemvGeometry, IntGemvSliceWalksDotEachUnitOnceInOrder) {
  for (int n = 1; n <= 21; ++n) {
    std::vector<int> dots, loads(1, 0);  // the caller loads unit 0 into the first buffer
    int ahead = 1;
    auto load = [&](int& buf, int t) {
      buf = t;
      loads.push_back(t);
      ahead = std::max(ahead, int(loads.size()) - int(dots.size()));
    };
    auto dot = [&](const int& buf, int t, float y) {
      EXPECT_EQ(buf, t) << "n " << n;
      dots.push_back(t);
      return y + 1.0f;
    };
    int a = 0, b = -1;
    const float y = q4k_int::slice_dot(load, dot, a, b, n);
    std::vector<int> order(static_cast<size_t>(n));
    for (int t = 0; t < n; ++t) order[size_t(t)] = t;
    EXPECT_EQ(dots, order) << "n " << n;
    EXPECT_EQ(loads, order) << "n " << n;
    EXPECT_EQ(y, float(n));
    EXPECT_LE(ahead, 2) << "n " << n;
  }
}

// The integer-dot GEMV splits each value by FMAs alone (q4k_int::split_value). The digits must be
// the cascade's, a = rint(u), b = rint(128 (u - a)), c = rint(128 (128 (u - a) - b)), u = x 2^(6 - e),
// with ties to even, and t = 16384 a + 128 b + c, for every x of a block whose largest magnitude
// is f 2^e (f in [0.5, 1)): the GEMV's sums take Q = sum q t, and the s8 mmas each digit's low byte.
// split_value2 (two terms) must give the same a and b, and t2 = 128 a + b = rint(128 u), whose ties
// (odd multiples of 2^(e - 14)) are among those below.
TEST(BlockGemvGeometry, Q4kIntSplitValueEqualsTheCascadeOfRoundings) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> frac(-1.0f, 1.0f);
  int ties = 0;
  auto check = [&](float x, int e) {
    const float inv = std::ldexp(1.0f, 6 - e), u = x * inv;
    const float fa = std::nearbyint(u), r = (u - fa) * 128.0f, fb = std::nearbyint(r);
    const float fc = std::nearbyint((r - fb) * 128.0f);
    const int32_t cascade = int32_t(fa) * 16384 + int32_t(fb) * 128 + int32_t(fc);
    ties += u * 16384.0f - std::floor(u * 16384.0f) == 0.5f;
    uint32_t a = 0, b = 0, c = 0;
    const int32_t t = q4k_int::split_value(x, inv, a, b, c);
    ASSERT_EQ(t, cascade) << x << " e " << e;
    ASSERT_EQ(int8_t(a & 0xFF), int32_t(fa)) << x << " e " << e;
    ASSERT_EQ(int8_t(b & 0xFF), int32_t(fb)) << x << " e " << e;
    ASSERT_EQ(int8_t(c & 0xFF), int32_t(fc)) << x << " e " << e;
    ASSERT_LE(std::abs(t), 1 << 20);
    uint32_t a2 = 0, b2 = 0;
    const int32_t t2 = q4k_int::split_value2(x, inv, a2, b2);
    ASSERT_EQ(a2, a) << x << " e " << e;
    ASSERT_EQ(b2, b) << x << " e " << e;
    ASSERT_EQ(t2, int32_t(fa) * 128 + int32_t(fb)) << x << " e " << e;
    ASSERT_EQ(float(t2), std::nearbyint(u * 128.0f)) << x << " e " << e;
    // |x - s t2 / 128| <= s / 256 = 2^(e - 14)
    ASSERT_LE(std::fabs(double(x) - std::ldexp(double(t2), e - 13)), std::ldexp(1.0, e - 14)) << x << " e " << e;
  };
  for (int e : {-100, -20, -1, 0, 1, 3, 17, 100}) {
    const float top = std::nextafter(std::ldexp(1.0f, e), 0.0f);  // the largest magnitude below 2^e
    for (float x : {0.0f, top, -top, std::ldexp(0.5f, e), -std::ldexp(0.5f, e)}) check(x, e);
    for (int i = 0; i < 20000; ++i) check(std::ldexp(frac(rng), e), e);
    for (int i = 0; i < 2000; ++i) {  // exact ties of the last digit: odd multiples of half a unit
      const float k = float(2 * int(rng() % (1u << 19)) + 1) * (rng() & 1 ? 1.0f : -1.0f);
      check(std::ldexp(k * 0.5f, e - 20), e);
    }
    for (int i = 0; i < 2000; ++i) {  // ties of the first and second digits
      const float k = float(2 * int(rng() % 64) + 1) * (rng() & 1 ? 1.0f : -1.0f);
      check(std::ldexp(k * 0.5f, e - 6), e);
      check(std::ldexp(k * 0.5f, e - 13), e);
    }
  }
  EXPECT_GT(ties, 1000);
}

}  // namespace
}  // namespace kestrel
