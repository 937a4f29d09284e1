// How the CUDA Q4_K GEMV (quant_gemv_q4k.cuh) lays a row of K columns over a warp's lanes, and
// what it stages in shared memory: here, in plain C++, because the GPU tests derive their error
// bound from the same geometry.
#pragma once

#include <cstddef>
#include <cstdint>

#ifdef __CUDACC__
#define KESTREL_HD __host__ __device__
#else
#define KESTREL_HD
#endif

namespace kestrel::q4k_gemv {

constexpr int kSuperElems = 256;  // elements of a Q4_K super-block
constexpr int kSuperBytes = 144;  // its bytes: d, dmin (f16), 12 bytes of 6-bit scales and mins, 128 of quants
constexpr int kMaxLanes = 16;     // lanes sharing one column
constexpr int kTileSuper = 64;    // super-blocks of one row staged at a time (64 / R for R rows, at least L)

// Lanes that share a column: the largest power of two up to kMaxLanes that divides the S
// super-blocks of a row, so each lane takes S / L of them (lane l: super-blocks l, l + L, ..).
KESTREL_HD constexpr int lanes(int64_t S) {
  int L = kMaxLanes;
  while (L > 1 && S % L != 0) L >>= 1;
  return L;
}
KESTREL_HD constexpr int log2_lanes(int L) {
  int n = 0;
  while ((1 << n) < L) ++n;
  return n;
}
// Super-blocks of each of R rows staged per tile: a multiple of L, all of S when it fits.
KESTREL_HD constexpr int tile_super(int64_t S, int L, int R) {
  int t = kTileSuper / R / L * L;
  if (t < L) t = L;
  return S < t ? int(S) : t;
}
// Staged positions: 4 floats of padding after every 256 (lanes L apart in super-blocks read 260
// floats apart, so the eight lanes of a 128-bit shared-memory phase hit distinct banks), and one
// run sum of padding after every 16 sums (likewise for the sums, 17 apart).
KESTREL_HD constexpr int x_at(int k) { return k + ((k >> 8) << 2); }
KESTREL_HD constexpr int sum_at(int s) { return s + (s >> 4); }
KESTREL_HD constexpr int row_floats(int tile) { return tile * (kSuperElems + 4); }
KESTREL_HD constexpr int sum_floats(int tile) { return tile * 17; }
// Dynamic shared memory of one block for R rows of K columns.
KESTREL_HD constexpr size_t smem_bytes(int64_t K, int R) {
  const int64_t S = K / kSuperElems;
  const int t = tile_super(S, lanes(S), R);
  return size_t(R) * size_t(row_floats(t) + sum_floats(t)) * sizeof(float);
}
// Output columns of one warp: each lane computes 2, and 32 / L lane groups share the warp.
KESTREL_HD constexpr int warp_columns(int64_t K) { return 2 * (32 / lanes(K / kSuperElems)); }

// F32 roundings an element's product passes through on its way to the output (the GPU tests'
// bound, gamma(n) * S'): the run's FMA chain (16), the two runs' sum, the scale, the min's
// subtraction, the chunk's two sub-blocks (4), the lane's accumulator (4 chunks a super-block,
// S / L super-blocks) and the tree over the column's L lanes. (The min's path, m * sum(x), is
// shorter: the runs' sums of x take 4 + 1 roundings, then the product and the subtraction.)
KESTREL_HD constexpr int roundings(int64_t K) {
  const int64_t S = K / kSuperElems;
  const int L = lanes(S);
  return int(20 + 4 * (S / L) + log2_lanes(L));
}

}  // namespace kestrel::q4k_gemv
