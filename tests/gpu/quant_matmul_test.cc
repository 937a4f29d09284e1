// CUDA ops on ggml block-format weights (Q8_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, MXFP4): matmul,
// matmul_multi, moe_experts, embed and embed_rows against the CPU reference of the same weights
// (quant::quantize_row of random data, then quant::dequantize_row, which the device decoding
// reproduces bit for bit), and "BENCH" lines for the GEMV bandwidth.
//
// Matmul tolerance, per output element, with S = sum_i |w_i x_i| (the reference is the double
// dot of the dequantized row, rounded once), u = 2^-24, gamma(n) = n u / (1 - n u):
//  - GEMV path (T <= 8, and every T in deterministic mode), Q6_K / Q8_0 (quant_gemv.cuh,
//    quant_gemv_q6k.cuh): a lane sums x * q over each run of 16 elements (an FMA chain) and
//    applies the run's scale s and min m once (s * sum(x q) - m * sum(x)); an element's product
//    passes through at most n roundings, n = 16 (chain) + 3 (scale, min, run pair) +
//    ceil(K / 1024) (the lane's steps) + 5 (warp tree) for Q8_0 and the Q6_K matrices the unit
//    GEMV takes, q6k_gemv::roundings(K) for the Q6_K ones
//    the copy-engine GEMV takes (q6k_gemv::supported(K): their geometry), and ggml's dequantized
//    w_i is within 2u (|s q_i| + |m|) of s q_i - m, so |err| <= gamma(n) * S', S' = sum_i |x_i|
//    (|s q_i| + |m|) <= sum_i |x_i| (|w_i| + 2 |m_i|) / (1 - 2u), m_i read back by dequantizing
//    the block with its quants zeroed (S' = S up to rounding for the formats without a min; the
//    copy-engine Q6_K GEMV sums its quants unsigned, 0..63, and takes its offset 32 out as a min
//    m = 32 s). Folding the min out of the sum is what makes S' (not S) the scale: s q and m may
//    nearly cancel in w.
//  - GEMV path, Q4_K (quant_gemv_q4k.cuh, on the tensor cores): x = hi + lo + e in BF16 terms,
//    |e| <= 2^-16 |x|, against the exact quants biased by 128: the dropped e costs up to
//    2^-16 sum |x| |s q| (and the min's sum(x) is taken of hi + lo, so the bias cancels against
//    what the mma saw); the F32 roundings (the mma's accumulation, the FMA chains of s D, the
//    bias and min subtraction, the slices) act on the biased sums, S_b = sum_i |x_i| |s_i| (128
//    + q_i), up to ~40 roundings' worth, so |err| <= 2^-16 S' + 2^-18 S_b. S_b is ~20 S' for
//    normal weights: the bound is ~1e-4 S', under the prefill path's (~3e-4 S at K = 4096).
//  - GEMV path, Q5_0 / Q5_1 / Q5_K / MXFP4: the dequantized weights are exact, each product and
//    sum is one F32 rounding, and an element passes through at most 1 (product) + 8 (dot8) +
//    K / 256 (a lane's steps) + 5 (warp tree) + 1 (the output) of them:
//    |err| <= (15 + K / 256) * 2^-24 * S.
//  - Prefill path (T > 8, the default 3-term precision): the weights split into BF16 terms
//    w = hi + lo + e_w, the activations into x = x1 + x2 + e_x (|e_w| <= 2^-16 |w|, |e_x| <=
//    2^-16 |x|), and cuBLAS sums hi.x1 + hi.x2 + lo.x1 in F32 over three GEMMs; the terms left
//    out (hi.e_x, lo.x2, lo.e_x, e_w.x) come to under 2^-14 |w x| together, so
//    |err| <= (2^-14 + (K + 4) * 2^-24) * S. (With the weight rounded to BF16 alone, as before
//    the split, the errors reach 2^-9 and this bound fails.)
#include <chrono>
#include <cstdio>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <functional>

#include "backend/cuda/block_gemv_geometry.h"
#include "gpu_test_util.h"
#include "ops/step_plan.h"
#include "quant/blocks.h"
#include "quant/ggml_type.h"
#include "quant/quant.h"

#ifdef KESTREL_HAVE_CUDA
namespace kestrel::test {
namespace {

constexpr DType kBlockTypes[] = {DType::kQ8_0, DType::kQ5_0, DType::kQ5_1, DType::kQ4_K,
                                 DType::kQ5_K, DType::kQ6_K, DType::kMXFP4};

class QuantGpuTest : public GpuTest {
 protected:
  // [rows, cols] of dt: normal(0, scale) values quantized by the reference quantizer.
  Buffer quantized(DType dt, int64_t rows, int64_t cols, float scale = 0.05f) {
    Buffer b = host_buffer(dt, rows, cols);
    const GgmlType g = *dtype_to_ggml(dt);
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      for (float& v : row) v = dist(rng_);
      quant::quantize_row(g, row.data(), cols, static_cast<uint8_t*>(b.view().data) + size_t(r) * b.view().row_bytes());
    }
    return b;
  }
  // The block matrix dequantized to F32 (ggml's values).
  static Buffer dequantized(const Tensor& q) {
    Buffer f = host_buffer(DType::kF32, q.rows, q.cols);
    for (int64_t r = 0; r < q.rows; ++r)
      quant::dequantize_row(*dtype_to_ggml(q.dtype), static_cast<const uint8_t*>(q.data) + size_t(r) * q.row_bytes(),
                            q.cols, f.view().f32() + r * q.cols);
    return f;
  }
  // Each element's min m_i (0 for the formats without one) as the GEMV takes it: the blocks
  // dequantized with their quants zeroed give -m_i (Q4_K: d1 * 0 - m1; Q6_K in the copy-engine
  // GEMV: d sc (0 - 32)).
  // (quant_byte: the Q4_K quant bytes' value; 0x11 gives s_i - m_i, s_i the element's scale.)
  static Buffer mins(const Tensor& q, uint8_t quant_byte = 0) {
    Buffer f = host_buffer(DType::kF32, q.rows, q.cols);
    std::fill_n(f.view().f32(), size_t(q.rows * q.cols), 0.0f);
    const bool q6k = q.dtype == DType::kQ6_K && q6k_gemv::supported(q.cols);
    if (q.dtype != DType::kQ4_K && !q6k) return f;
    std::vector<uint8_t> row(q.row_bytes());
    for (int64_t r = 0; r < q.rows; ++r) {
      std::memcpy(row.data(), static_cast<const uint8_t*>(q.data) + size_t(r) * q.row_bytes(), row.size());
      if (q6k) {
        for (size_t b = 0; b < row.size(); b += sizeof(quant::BlockQ6_K)) {
          std::memset(row.data() + b + offsetof(quant::BlockQ6_K, ql), 0, sizeof(quant::BlockQ6_K::ql));
          std::memset(row.data() + b + offsetof(quant::BlockQ6_K, qh), 0, sizeof(quant::BlockQ6_K::qh));
        }
      } else {
        for (size_t b = 0; b < row.size(); b += sizeof(quant::BlockQ4_K))
          std::memset(row.data() + b + offsetof(quant::BlockQ4_K, qs), quant_byte, sizeof(quant::BlockQ4_K::qs));
      }
      quant::dequantize_row(*dtype_to_ggml(q.dtype), row.data(), q.cols, f.view().f32() + r * q.cols);
    }
    return f;
  }
  // Each of `rows` multiplied alone gives the bits it had in `all` (the product of every row of dx).
  void expect_rows_as_alone(const Buffer& dx, const Buffer& dw, const std::vector<float>& all,
                            std::initializer_list<int> rows, const std::string& what) {
    const int64_t N = dw.view().rows;
    for (int r : rows) {
      Buffer one = gpu().alloc(DType::kF32, 1, N);
      gpu().matmul(one, dx.view().rows_slice(r, 1), dw);
      const std::vector<float> o = down(one);
      EXPECT_EQ(0, std::memcmp(o.data(), all.data() + size_t(r) * N, size_t(N) * 4)) << what << " row " << r;
    }
  }
  static bool unit_gemv(DType dt) { return dt == DType::kQ4_K || dt == DType::kQ6_K || dt == DType::kQ8_0; }
  CudaOps& cuda() { return static_cast<CudaOps&>(gpu()); }
  // One output of a T32 matrix's integer-dot GEMV, from x's row xr, w's dequantized row wr and the
  // row's -m per element mr (K values): y = w.x; S' = sum |s q x| + |m x|; the split's weights
  // sum_b max|x_b| sum_b |s q| (sq) and sum_b max|x_b| sum_b |m| (m).
  struct IntRef {
    double y = 0, sp = 0, sq = 0, m = 0;
  };
  static IntRef int_ref(const float* xr, const float* wr, const float* mr, int64_t K) {
    IntRef r;
    for (int64_t b = 0; b < K / 32; ++b) {
      double mx = 0, sq = 0, sm = 0;
      for (int64_t k = 32 * b; k < 32 * b + 32; ++k) {
        const double sqk = double(wr[k]) - mr[k];  // s q
        r.y += double(wr[k]) * xr[k];
        r.sp += std::fabs(sqk * xr[k]) + std::fabs(double(mr[k]) * xr[k]);
        mx = std::max(mx, double(std::fabs(xr[k])));
        sq += std::fabs(sqk);
        sm += std::fabs(double(mr[k]));
      }
      r.sq += mx * sq;
      r.m += mx * sm;
    }
    return r;
  }
  void check_int_t32(DType dt);                      // MatmulQ4KT32, MatmulQ8T32, MatmulQ6KT32
  void check_int_t32_two_terms(DType dt);            // MatmulT32TwoTerms
  void check_multi_with_t32(DType dt, DType other);  // likewise
  static DType t32_of(DType dt) {
    return dt == DType::kQ4_K ? DType::kQ4_K_T32 : dt == DType::kQ8_0 ? DType::kQ8_0_T32 : DType::kQ6_K_T32;
  }

  // GPU matmul of x by the block matrix w vs the double reference, within the bound above;
  // returns the largest |err| / S (S' for the unit GEMV).
  double check_matmul(const Tensor& x, const Tensor& w, bool gemv, const std::string& what) {
    const int64_t T = x.rows, K = x.cols, N = w.rows;
    const bool q4k_mma = gemv && w.dtype == DType::kQ4_K;  // |err| <= 2^-16 S' + 2^-18 S_b
    Buffer wf = dequantized(w), wm = mins(w), ws = q4k_mma ? mins(w, 0x11) : Buffer{};
    Buffer dx = up(x), dw = up(w), out = gpu().alloc(DType::kF32, T, N);
    gpu().matmul(out, dx, dw);
    const std::vector<float> o = down(out);
    const double u = std::ldexp(1.0, -24);
    const bool units = gemv && unit_gemv(w.dtype);
    const double n_round = w.dtype == DType::kQ6_K && q6k_gemv::supported(K) ? double(q6k_gemv::roundings(K))
                                                                               : 26.0 + double((K + 1023) / 1024);
    const double bound = q4k_mma ? std::ldexp(1.0, -16)
                         : units ? n_round * u / (1 - n_round * u) / (1 - 2 * u)
                         : gemv  ? (15.0 + double(K) / 256) * u
                                 : std::ldexp(1.0, -14) + double(K + 4) * u;
    double worst = 0;
    int failures = 0;
    for (int64_t t = 0; t < T; ++t) {
      const float* xr = x.f32() + t * K;
      for (int64_t n = 0; n < N; ++n) {
        const float* wr = wf.view().f32() + n * K;
        const float* mr = wm.view().f32() + n * K;
        const float* sr = q4k_mma ? ws.view().f32() + n * K : nullptr;  // s_i - m_i
        double ref = 0, s = 0, sb = 0;
        for (int64_t k = 0; k < K; ++k) {
          ref += double(wr[k]) * double(xr[k]);
          s += std::fabs(double(xr[k])) * (std::fabs(double(wr[k])) + (units ? 2 * std::fabs(double(mr[k])) : 0.0));
          // |x| (128 |s| + |s q|): the biased quants' sum the tensor cores accumulate
          if (q4k_mma)
            sb += std::fabs(double(xr[k])) * (128 * std::fabs(double(sr[k]) - double(mr[k])) +
                                              std::fabs(double(wr[k]) - double(mr[k])));
        }
        const double err = std::fabs(double(o[size_t(t * N + n)]) - ref);
        const double allowed = bound * s + std::ldexp(sb, -18);
        if (s > 0) worst = std::max(worst, err / s);
        if (err > allowed && failures++ < 5)
          ADD_FAILURE() << what << " t=" << t << " n=" << n << ": " << o[size_t(t * N + n)] << " vs " << ref
                        << " (|err| " << err << " > " << allowed << ")";
      }
    }
    return worst;
  }
};

TEST_F(QuantGpuTest, MatmulEveryFormatAgainstReference) {
  for (DType dt : kBlockTypes) {
    const int64_t blk = dtype_block_elems(dt);
    // a multiple of 256, an odd number of blocks, and one past the 1024-column shared-memory tile
    const std::vector<int64_t> Ks = blk == 256 ? std::vector<int64_t>{512, 768, 1280}
                                               : std::vector<int64_t>{512, 9 * blk, 33 * blk};
    double worst_gemv = 0, worst_prefill = 0;
    for (int64_t K : Ks) {
      for (int64_t N : {256, 37}) {
        Buffer w = quantized(dt, N, K);
        for (int T : {1, 3, 8, 40, 300}) {
          Buffer x = random(T, K);
          const std::string what = std::string(dtype_name(dt)) + " T=" + std::to_string(T) + " K=" +
                                   std::to_string(K) + " N=" + std::to_string(N);
          const double e = check_matmul(x, w, T <= 8, what);
          (T <= 8 ? worst_gemv : worst_prefill) = std::max(T <= 8 ? worst_gemv : worst_prefill, e);
        }
      }
    }
    std::printf("QMATMUL %-5s worst |err|/S: gemv %.2e, prefill %.2e\n", std::string(dtype_name(dt)).c_str(),
                worst_gemv, worst_prefill);
  }
}

// The prefill path's BF16 weight tile is bounded (64 MiB): a matrix past it runs in row tiles
// (80 rows: past the 64 the tensor-core kernel takes).
TEST_F(QuantGpuTest, MatmulPrefillAcrossDequantTiles) {
  const int64_t K = 4096, N = 8200;  // 8200 * 4096 * 2 bytes > 64 MiB: two tiles
  Buffer w = quantized(DType::kQ8_0, N, K);
  Buffer x = random(80, K);
  check_matmul(x, w, false, "Q8_0 tiled");
}

// 9 to 64 rows take the tensor-core kernel (moe_mma.cu) with the weights decoded in registers
// (Q4_K from 25 rows: up to 24 it runs 8-row GEMV passes, and T 9 checks those):
// the prefill bound at the default precision (check_matmul), and at bf16x2 / bf16, where the
// weight is rounded to BF16 (2^-9), within 1e-2 of the CPU's product; rows past a pass of 32, a
// row tile past N (N 200: four tiles of 64), and the inputs split in ranges of one 128-column chunk
// (a grid of 4 column tiles asks for more blocks than K has chunks), the last of K 1056 32 long.
TEST_F(QuantGpuTest, MatmulTensorCoresFewRows) {
  for (DType dt : kBlockTypes) {
    const int64_t K = dtype_block_elems(dt) == 256 ? 768 : 1056, N = 200;
    Buffer w = quantized(dt, N, K);
    Buffer dw = up(w);
    for (int T : {9, 33, 64}) {
      Buffer x = random(T, K);
      const std::string what = std::string(dtype_name(dt)) + " T=" + std::to_string(T);
      check_matmul(x, w, false, what);
      Buffer ref = cpu_.alloc(DType::kF32, T, N);
      cpu_.matmul(ref, x, w);
      Buffer dx = up(x);
      for (MatmulPrecision p : {MatmulPrecision::kBf16x2, MatmulPrecision::kBf16}) {
        cuda().set_matmul_precision(p);
        Buffer out = gpu().alloc(DType::kF32, T, N);
        gpu().matmul(out, dx, dw);
        EXPECT_LE(rel_err(down(out), host(ref)), 1e-2) << what << " " << matmul_precision_name(p);
      }
      cuda().set_matmul_precision(MatmulPrecision::kBf16x3);
    }
  }
}

// Deterministic mode: every T takes the GEMV kernel in groups of 8, and each row's bits are its
// bits alone; likewise any T <= 8 in the default mode.
TEST_F(QuantGpuTest, MatmulRowsBitIdenticalToAlone) {
  for (DType dt : {DType::kQ4_K, DType::kQ6_K, DType::kQ8_0, DType::kMXFP4}) {
    const int64_t K = 1280, N = 300;
    Buffer w = quantized(dt, N, K), dw = up(w);
    for (bool det : {false, true}) {
      cuda().set_deterministic(det);
      const int T = det ? 300 : 8;
      Buffer x = random(T, K), dx = up(x), all = gpu().alloc(DType::kF32, T, N);
      gpu().matmul(all, dx, dw);
      expect_rows_as_alone(dx, dw, down(all), {0, 3, T - 1},
                           std::string(dtype_name(dt)) + (det ? " deterministic" : ""));
    }
    cuda().set_deterministic(false);
  }
}

// The Q4_K GEMV's geometry follows K (block_gemv_geometry.h): P warps a column (8 for 16 or 48
// super-blocks, 4 for 12, 2 for 14, 1 for an odd count), each a contiguous 1/P of the
// super-blocks streamed through a ring of 2 slots (refilled when a warp has more than 2: K =
// 12288, 20480). Each against the reference, over a partial last block of columns (45 columns:
// at P = 1, 256 columns a block), and each row's bits the same alone as among 8.
TEST_F(QuantGpuTest, MatmulQ4KGeometries) {
  for (int64_t K : {256, 2816, 3072, 3584, 4096, 12288, 20480}) {
    const int64_t N = 45;
    Buffer w = quantized(DType::kQ4_K, N, K), dw = up(w);
    Buffer x = random(8, K), dx = up(x), all = gpu().alloc(DType::kF32, 8, N);
    const double e = check_matmul(x, w, true, "Q4_K K=" + std::to_string(K));
    gpu().matmul(all, dx, dw);
    expect_rows_as_alone(dx, dw, down(all), {0, 5}, "Q4_K K=" + std::to_string(K));
    std::printf("Q4K K=%ld slices %d worst |err|/S' %.2e\n", long(K), q4k_gemv::slices(K / 256), e);
  }
}

// The Q6_K GEMV on the copy engine (q6k_gemv::supported: rows of 8, 16, 24, 48 super-blocks, so
// one to six a warp, the ring refilled past two) against the reference for 1, 3 and 8 rows over
// a partial last block (45 columns, 16 a block), each row's bits the same alone as among 8; and
// K = 2816 (11 super-blocks), which stays on the unit GEMV, the same way.
TEST_F(QuantGpuTest, MatmulQ6KGeometries) {
  for (int64_t K : {2048, 4096, 6144, 12288, 2816}) {
    const int64_t N = 45;
    Buffer w = quantized(DType::kQ6_K, N, K), dw = up(w);
    double e = 0;
    for (int T : {1, 3, 8}) {
      Buffer x = random(T, K);
      e = std::max(e, check_matmul(x, w, true, "Q6_K K=" + std::to_string(K) + " T=" + std::to_string(T)));
    }
    Buffer x = random(8, K), dx = up(x), all = gpu().alloc(DType::kF32, 8, N);
    gpu().matmul(all, dx, dw);
    expect_rows_as_alone(dx, dw, down(all), {0, 5, 7}, "Q6_K K=" + std::to_string(K));
    std::printf("Q6K K=%ld copy engine %d roundings %d worst |err|/S' %.2e\n", long(K), int(q6k_gemv::supported(K)),
                q6k_gemv::supported(K) ? q6k_gemv::roundings(K) : int(26 + (K + 1023) / 1024), e);
  }
}

// Two matrices in one launch, many blocks each (K = 4096: 8 warps a column, 32 Q4_K or 16 Q6_K
// columns a block; more blocks than fit on an H200 at once), as a Q4_K_M layer pairs them: every
// column against the reference, and each matrix's bits the same launched alone as beside the
// other.
TEST_F(QuantGpuTest, MatmulCopyEngineManyBlocks) {
  const int64_t K = 4096;
  const std::pair<DType, DType> pairs[] = {
      {DType::kQ4_K, DType::kQ4_K}, {DType::kQ6_K, DType::kQ6_K}, {DType::kQ6_K, DType::kQ4_K}};
  for (auto [dt1, dt2] : pairs) {
    const int64_t n1 = dt1 == DType::kQ4_K ? 9000 : 5000, n2 = dt2 == DType::kQ4_K ? 4100 : 2100;
    Buffer w1 = quantized(dt1, n1, K), w2 = quantized(dt2, n2, K);
    Buffer dw1 = up(w1), dw2 = up(w2);
    const std::string what = std::string(dtype_name(dt1)) + " + " + std::string(dtype_name(dt2));
    for (int T : {1, 8}) {
      Buffer x = random(T, K), dx = up(x);
      check_matmul(x, w1, true, what + " first T=" + std::to_string(T));
      Buffer o1 = gpu().alloc(DType::kF32, T, n1), o2 = gpu().alloc(DType::kF32, T, n2);
      const std::vector<MatmulTarget> both = {{.out = o1, .w = dw1}, {.out = o2, .w = dw2}};
      gpu().matmul_multi(dx, both);
      Buffer s1 = gpu().alloc(DType::kF32, T, n1), s2 = gpu().alloc(DType::kF32, T, n2);
      gpu().matmul(s1, dx, dw1);
      gpu().matmul(s2, dx, dw2);
      EXPECT_EQ(down(o1), down(s1)) << what << " T=" << T;
      EXPECT_EQ(down(o2), down(s2)) << what << " T=" << T;
    }
  }
}

// One launch for a layer's mixed-format projections (Q4_K_M: Q4_K and Q6_K), each output the
// bits of its own matmul.
TEST_F(QuantGpuTest, MatmulMultiMixedFormatsEqualsSeparate) {
  const int64_t K = 1024;
  const std::vector<std::pair<DType, int64_t>> mats = {
      {DType::kQ4_K, 300}, {DType::kQ6_K, 64}, {DType::kQ8_0, 129}, {DType::kMXFP4, 32}};
  std::vector<Buffer> hw, dw;
  for (auto [dt, n] : mats) {
    hw.push_back(quantized(dt, n, K));
    dw.push_back(up(hw.back()));
  }
  for (int T : {1, 5, 8, 20}) {
    Buffer x = random(T, K), dx = up(x);
    std::vector<Buffer> outs;
    std::vector<MatmulTarget> targets;
    for (size_t m = 0; m < mats.size(); ++m) {
      outs.push_back(gpu().alloc(DType::kF32, T, mats[m].second));
      targets.push_back({.out = outs.back(), .w = dw[m]});
    }
    gpu().matmul_multi(dx, targets);
    for (size_t m = 0; m < mats.size(); ++m) {
      Buffer sep = gpu().alloc(DType::kF32, T, mats[m].second);
      gpu().matmul(sep, dx, dw[m]);
      EXPECT_EQ(down(outs[m]), down(sep)) << dtype_name(mats[m].first) << " T=" << T;
    }
  }
}

// The T32 layouts Ops::upload_matrix gives a Q4_K matrix (kQ4_K_T32), a Q8_0 one of whole
// 256-element super-blocks (kQ8_0_T32) and a Q6_K one whose rows are a multiple of 8 (kQ6_K_T32),
// read by the integer-dot GEMV (q4k_int_gemv.cuh), against the double reference of the row-major
// matrix. Each 32 values of x become x^ with |x - x^| <= 2^-20 max|x| of the 32, the block dots
// are exact integers, and the F32 epilogue (scale, min, Q8_0's rounding of Q, the slices' sums)
// adds a few roundings of S', so per element |err| <= 2^-20 sum_b max|x_b| sum_b |s q| + 2^-18 S'
// (the test: 2^-16 of their sum, the measured worst ~2e-7 for Q4_K). Up to 64 rows take the GEMV
// (s8 mmas: 8 rows in one launch, 9 to 64 in passes of up to 32 of the rows GEMV on 2 or 4 n-tiles
// of 8 rows): every row has the bits it has alone. Past 64 the prefill path dequantizes the same
// values as the row-major matrix's, so its bits are the row-major matrix's; in deterministic mode
// the GEMV takes them too (70 rows: passes of 32, 32 and 6), each row as alone.
// Shapes: whole groups and a partial one (100, 33 rows; Q6_K: 104, 40), slices of uneven length
// (K = 2560: 10 super-blocks over 8 slices; K = 5120: 20 over 16; K = 1024 and 256: slices with
// none), 16 slices (at least 16 super-blocks: one row on 16-warp blocks, many groups or few) and 8
// (fewer super-blocks).
void QuantGpuTest::check_int_t32(DType dt) {
  const DType t32 = t32_of(dt);
  const bool q6 = dt == DType::kQ6_K;
  // (Q6_K's partial groups: a multiple of 8 rows)
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {320, 4096}, {q6 ? 104 : 100, 5120}, {q6 ? 104 : 100, 1024}, {q6 ? 40 : 33, 2560},
      {64, 256},   {8192, 256},            {4136, 4096}};
  for (auto [N, K] : shapes) {
    Buffer w = quantized(dt, N, K);
    Buffer dw = gpu().upload_matrix(w), rm = up(w);
    ASSERT_EQ(dw.view().dtype, t32);
    // w and -m of each element (Q6_K's integer dot sums q - 32 itself: no min)
    Buffer wf = dequantized(w), mq = mins(w);
    if (q6) std::fill_n(mq.view().f32(), size_t(N * K), 0.0f);
    for (int T : {1, 3, 8, 9, 20, 64, 70}) {
      Buffer x = random(T, K), dx = up(x), out = gpu().alloc(DType::kF32, T, N);
      gpu().matmul(out, dx, dw);
      const std::vector<float> o = down(out);
      const std::string what =
          std::string(dtype_name(t32)) + " " + std::to_string(N) + "x" + std::to_string(K) + " T=" + std::to_string(T);
      if (T > 64) {
        Buffer ref = gpu().alloc(DType::kF32, T, N);
        gpu().matmul(ref, dx, rm);
        EXPECT_EQ(o, down(ref)) << what << ": the prefill path";
        cuda().set_deterministic(true);
        gpu().matmul(out, dx, dw);
        cuda().set_deterministic(false);
        expect_rows_as_alone(dx, dw, down(out), {0, 33, 64, T - 1}, what + " deterministic");
        continue;
      }
      double worst = 0;
      for (int t = 0; t < T; ++t)
        for (int64_t n = 0; n < N; ++n) {
          const IntRef r =
              int_ref(x.view().f32() + t * K, wf.view().f32() + n * K, mq.view().f32() + n * K, K);
          worst = std::max(worst, std::fabs(double(o[size_t(t * N + n)]) - r.y) / (r.sp + r.sq));
        }
      EXPECT_LE(worst, std::ldexp(1.0, -16)) << what;
      if (T > 1) expect_rows_as_alone(dx, dw, o, {0, T / 2, T - 1}, what);
    }
    if (N >= 64) {  // a slice of whole groups reads its rows: the bits of those rows uploaded alone
      // (not the whole matrix's: under a group bound, KESTREL_CUDA_GEMV_WIDE, a matrix's slices
      // follow its rows, group_slices)
      Buffer x = random(2, K), dx = up(x);
      Buffer alone = gpu().alloc(DType::kF32, 2, 32), part = gpu().alloc(DType::kF32, 2, 32);
      Buffer rows = gpu().upload_matrix(w.view().rows_slice(32, 32));
      ASSERT_EQ(rows.view().dtype, t32);
      gpu().matmul(alone, dx, rows);
      gpu().matmul(part, dx, dw.view().rows_slice(32, 32));
      EXPECT_EQ(0, std::memcmp(down(part).data(), down(alone).data(), 2 * 32 * 4))
          << dtype_name(t32) << " " << N << "x" << K << " slice";
    }
  }
}

// matmul_multi with T32 matrices beside other formats in one launch: each as alone. `other`: the
// format of a second T32 matrix in the launch. Past 8 rows T32 matrices alone share one split of
// x (matmul_multi_t32: 20 rows one pass, 40 a pass of 32 and one launch for the last 8); beside
// other formats each is its own matmul.
void QuantGpuTest::check_multi_with_t32(DType dt, DType other) {
  const int64_t K = 4096;  // 16 super-blocks: the T32 matrices take 16 slices
  Buffer a = quantized(dt, 96, K), b = quantized(DType::kQ6_K, 64, K), c = quantized(dt, 40, K);
  Buffer d = quantized(other, 64, K);
  Buffer da = gpu().upload_matrix(a), db = up(b), dc = up(c), dd = gpu().upload_matrix(d);
  ASSERT_EQ(da.view().dtype, t32_of(dt));
  ASSERT_EQ(dd.view().dtype, t32_of(other));
  // with other formats (8-warp blocks, two slices a warp), and the T32 matrices alone (16-warp
  // blocks for one row where the launch's kernel holds both formats)
  for (const std::vector<const Buffer*>& mats :
       {std::vector<const Buffer*>{&da, &db, &dc, &dd}, std::vector<const Buffer*>{&da, &dd}}) {
    for (int T : {1, 5, 20, 40}) {
      Buffer dx = up(random(T, K));
      std::vector<Buffer> outs;
      std::vector<MatmulTarget> targets;
      for (const Buffer* m : mats) {
        outs.push_back(gpu().alloc(DType::kF32, T, m->view().rows));
        targets.push_back({.out = outs.back(), .w = *m});
      }
      gpu().matmul_multi(dx, targets);
      for (size_t i = 0; i < mats.size(); ++i) {
        Buffer sep = gpu().alloc(DType::kF32, T, mats[i]->view().rows);
        gpu().matmul(sep, dx, *mats[i]);
        EXPECT_EQ(down(outs[i]), down(sep))
            << dtype_name(mats[i]->view().dtype) << " T=" << T << " of " << mats.size() << " matrices";
      }
    }
  }
}

// At --matmul-precision bf16 the integer-dot GEMVs split x into two terms (|x - x^| <= 2^-13 of a
// 32-value block's largest magnitude): the error within 2^-13 sum_b max|x_b| (sum_b |s q| + sum_b
// |m|) plus the epilogue's roundings (2^-16 of S, as above), a row's bits alone and batched the
// same (one row, 8-row passes, the rows GEMV), and the results not those of three terms.
void QuantGpuTest::check_int_t32_two_terms(DType dt) {
  const bool q6 = dt == DType::kQ6_K;
  for (auto [N, K] : std::vector<std::pair<int64_t, int64_t>>{{320, 4096}, {q6 ? 40 : 33, 2560}, {64, 256}}) {
    Buffer w = quantized(dt, N, K);
    Buffer dw = gpu().upload_matrix(w);
    ASSERT_EQ(dw.view().dtype, t32_of(dt));
    Buffer wf = dequantized(w), mq = mins(w);
    if (q6) std::fill_n(mq.view().f32(), size_t(N * K), 0.0f);
    for (int T : {1, 3, 8, 9, 20, 40}) {
      const std::string what = std::string(dtype_name(t32_of(dt))) + " " + std::to_string(N) + "x" +
                               std::to_string(K) + " T=" + std::to_string(T) + " two terms";
      Buffer x = random(T, K), dx = up(x), out = gpu().alloc(DType::kF32, T, N);
      gpu().matmul(out, dx, dw);
      const std::vector<float> three = down(out);
      cuda().set_matmul_precision(MatmulPrecision::kBf16);
      gpu().matmul(out, dx, dw);
      const std::vector<float> o = down(out);
      if (T > 1) expect_rows_as_alone(dx, dw, o, {0, T / 2, T - 1}, what);
      cuda().set_matmul_precision(MatmulPrecision::kBf16x3);
      EXPECT_NE(o, three) << what << ": the same results as three terms";
      double worst = 0, worst_two = 0, worst_three = 0;  // (the last two: |err| / (S + split))
      for (int t = 0; t < T; ++t)
        for (int64_t n = 0; n < N; ++n) {
          const IntRef r =
              int_ref(x.view().f32() + t * K, wf.view().f32() + n * K, mq.view().f32() + n * K, K);
          const double err = std::fabs(double(o[size_t(t * N + n)]) - r.y), split = r.sq + r.m;
          worst = std::max(worst, err / (std::ldexp(r.sp, -16) + std::ldexp(split, -13)));
          worst_two = std::max(worst_two, err / (r.sp + split));
          worst_three = std::max(worst_three, std::fabs(double(three[size_t(t * N + n)]) - r.y) / (r.sp + split));
        }
      EXPECT_LE(worst, 1.0) << what;
      // the split's error, not the epilogue's, is what the two-term results show
      if (N == 320) EXPECT_GT(worst_two, 4 * worst_three) << what;
    }
  }
}

// (Q4_K_T32, Q8_0_T32 and Q6_K_T32, alone and in matmul_multi's launches)
TEST_F(QuantGpuTest, MatmulT32TwoTerms) {
  for (DType dt : {DType::kQ4_K, DType::kQ8_0, DType::kQ6_K}) check_int_t32_two_terms(dt);
  cuda().set_matmul_precision(MatmulPrecision::kBf16);
  check_multi_with_t32(DType::kQ4_K, DType::kQ8_0);
  check_multi_with_t32(DType::kQ6_K, DType::kQ4_K);
  cuda().set_matmul_precision(MatmulPrecision::kBf16x3);
}

// (a Q4_K_T32 matrix beside Q6_K, row-major Q4_K and Q8_0_T32)
TEST_F(QuantGpuTest, MatmulQ4KT32) {
  check_int_t32(DType::kQ4_K);
  check_multi_with_t32(DType::kQ4_K, DType::kQ8_0);
}

// (a Q8_0_T32 matrix beside Q6_K, row-major Q8_0 and Q4_K_T32)
TEST_F(QuantGpuTest, MatmulQ8T32) {
  check_int_t32(DType::kQ8_0);
  check_multi_with_t32(DType::kQ8_0, DType::kQ4_K);
}

// (a Q6_K_T32 matrix beside row-major Q6_K and Q4_K_T32, as a Q4_K_M layer's projections, and
// beside Q8_0_T32; a Q6_K matrix whose rows are not a multiple of 8 stays row-major)
TEST_F(QuantGpuTest, MatmulQ6KT32) {
  check_int_t32(DType::kQ6_K);
  check_multi_with_t32(DType::kQ6_K, DType::kQ4_K);
  check_multi_with_t32(DType::kQ6_K, DType::kQ8_0);
  EXPECT_EQ(gpu().upload_matrix(quantized(DType::kQ6_K, 36, 512)).view().dtype, DType::kQ6_K);
}

// The prefill path over a T32 matrix of more than one dequantized tile (64 MiB of BF16: 4200 x
// 8192 takes two, the second ending in a group of 8 rows) gives the row-major matrix's bits.
TEST_F(QuantGpuTest, MatmulT32PrefillTiles) {
  const int64_t N = 4200, K = 8192, T = 70;
  for (DType dt : {DType::kQ4_K, DType::kQ8_0, DType::kQ6_K}) {
    Buffer w = quantized(dt, N, K);
    Buffer dw = gpu().upload_matrix(w), rm = up(w);
    ASSERT_EQ(dw.view().dtype, t32_of(dt));
    Buffer dx = up(random(T, K)), out = gpu().alloc(DType::kF32, T, N), ref = gpu().alloc(DType::kF32, T, N);
    for (MatmulPrecision p : {MatmulPrecision::kBf16, MatmulPrecision::kBf16x3}) {
      cuda().set_matmul_precision(p);
      gpu().matmul(out, dx, dw);
      gpu().matmul(ref, dx, rm);
      EXPECT_EQ(down(out), down(ref)) << dtype_name(dt) << " " << matmul_precision_name(p);
    }
  }
  cuda().set_matmul_precision(MatmulPrecision::kBf16x3);
}

// Block-format experts against the CPU experts over the same (dequantized) F32 weights: the
// grouped kernels sum in the same F32 order as for float weights (existing bound 1e-5). The last
// pair is a q4_k_m layer: down in Q6_K, gate and up in Q4_K.
TEST_F(QuantGpuTest, MoeExperts) {
  const std::pair<DType, DType> kinds[] = {{DType::kMXFP4, DType::kMXFP4}, {DType::kQ4_K, DType::kQ4_K},
                                           {DType::kQ8_0, DType::kQ8_0},   {DType::kQ6_K, DType::kQ6_K},
                                           {DType::kQ4_K, DType::kQ6_K},   {DType::kQ8_0, DType::kBF16}};
  for (const auto& [dt, dt_down] : kinds) {
    for (int T : {1, 5, 40}) {
      const int E = 8, k = 2, H = 256, F = 512;
      ExpertWeights hw, dw;
      std::vector<Buffer> keep;
      auto add = [&](DType t, std::vector<Tensor>& h, std::vector<Tensor>& d, int64_t rows, int64_t cols) {
        if (t == DType::kBF16) {
          Buffer w = random(DType::kBF16, rows, cols, 0.1f);
          keep.push_back(host_buffer(DType::kF32, rows, cols));
          for (int64_t i = 0; i < rows * cols; ++i)
            keep.back().view().f32()[i] = bf16_to_f32(w.view().as<uint16_t>()[i]);
          h.push_back(keep.back());
          keep.push_back(up(w));
          d.push_back(keep.back());
          return;
        }
        Buffer q = quantized(t, rows, cols, 0.1f);
        keep.push_back(dequantized(q));
        h.push_back(keep.back());
        keep.push_back(up(q));
        d.push_back(keep.back());
      };
      for (int e = 0; e < E; ++e) {
        add(dt, hw.gate, dw.gate, F, H);
        add(dt, hw.up, dw.up, F, H);
        add(dt_down, hw.down, dw.down, H, F);
      }
      Buffer x = random(T, H), logits = random(T, E);
      Buffer ids = cpu_.alloc(DType::kI32, T, k), wts = cpu_.alloc(DType::kF32, T, k);
      cpu_.moe_route(ids, wts, logits, k, true);
      Buffer dx = up(x), dids = up(ids), dwts = up(wts);
      Buffer ref = cpu_.alloc(DType::kF32, T, H), out = gpu().alloc(DType::kF32, T, H);
      cpu_.moe_experts(ref, x, ids, wts, hw);
      gpu().moe_experts(out, dx, dids, dwts, dw);
      EXPECT_LE(rel_err(down(out), host(ref)), 1e-5) << dtype_name(dt) << " / " << dtype_name(dt_down) << " T=" << T;
    }
  }
}

// A prefill step's block-format experts on the tensor cores (moe_mma.cu) at each precision: each
// 8 weights decoded to ggml's values and split into BF16 hi + lo at bf16x3 (matmul_quant's prefill
// products: 1e-5 of the CPU over the dequantized weights), the weight rounded to BF16 at bf16x2 and
// bf16 (2^-9 a weight: 1e-2), and `exact`'s CUDA-core kernels (1e-5). 48 pairs an expert: two
// passes of 32, the second partial.
TEST_F(QuantGpuTest, MoeExpertsTensorCoresEachPrecision) {
  const std::pair<DType, DType> kinds[] = {{DType::kQ4_K, DType::kQ6_K}, {DType::kQ8_0, DType::kQ8_0},
                                           {DType::kQ5_K, DType::kMXFP4}};
  const int T = 96, E = 4, k = 2, H = 512, F = 256;
  for (const auto& [dt, dt_down] : kinds) {
    ExpertWeights hw, dw;
    std::vector<Buffer> keep;
    for (int e = 0; e < E; ++e) {
      for (auto [t, h, d, rows, cols] : {std::tuple{dt, &hw.gate, &dw.gate, F, H}, std::tuple{dt, &hw.up, &dw.up, F, H},
                                         std::tuple{dt_down, &hw.down, &dw.down, H, F}}) {
        Buffer q = quantized(t, rows, cols, 0.1f);
        keep.push_back(dequantized(q));
        h->push_back(keep.back());
        keep.push_back(up(q));
        d->push_back(keep.back());
      }
    }
    Buffer x = random(T, H), logits = random(T, E);
    Buffer ids = cpu_.alloc(DType::kI32, T, k), wts = cpu_.alloc(DType::kF32, T, k);
    cpu_.moe_route(ids, wts, logits, k, true);
    Buffer dx = up(x), dids = up(ids), dwts = up(wts), ref = cpu_.alloc(DType::kF32, T, H);
    cpu_.moe_experts(ref, x, ids, wts, hw);
    const std::vector<float> want = host(ref);
    for (auto [p, tol] : {std::pair{MatmulPrecision::kBf16x3, 1e-5}, std::pair{MatmulPrecision::kBf16x2, 1e-2},
                          std::pair{MatmulPrecision::kBf16, 1e-2}, std::pair{MatmulPrecision::kExact, 1e-5}}) {
      cuda().set_matmul_precision(p);
      Buffer out = gpu().alloc(DType::kF32, T, H);
      gpu().moe_experts(out, dx, dids, dwts, dw);
      EXPECT_LE(rel_err(down(out), want), tol) << dtype_name(dt) << " / " << dtype_name(dt_down) << " precision "
                                               << int(p);
    }
    cuda().set_matmul_precision(MatmulPrecision::kBf16x3);
  }
}

// Embedding rows come out exactly as dequantize_row gives them (times the scale, in F32).
TEST_F(QuantGpuTest, EmbedAndEmbedRows) {
  const int64_t V = 300, H = 512;
  for (DType dt : kBlockTypes) {
    Buffer table = quantized(dt, V, H, 1.0f), dtable = up(table);
    Buffer tf = dequantized(table);
    StepPlan plan = make_plan({{0, 5}, {7, 1}, {3, 12}}, int(V), rng_);
    Buffer out = gpu().alloc(DType::kF32, plan.n_rows(), H);
    gpu().begin_step(plan);
    gpu().embed(out, dtable, plan, 1.5f);
    std::vector<float> ref(size_t(plan.n_rows() * H));
    for (int64_t r = 0; r < plan.n_rows(); ++r)
      for (int64_t c = 0; c < H; ++c) ref[size_t(r * H + c)] = tf.view().f32()[plan.tokens[size_t(r)] * H + c] * 1.5f;
    EXPECT_EQ(down(out), ref) << "embed " << dtype_name(dt);

    // embed_rows over a block-format shard and a BF16 one
    Buffer bf = random(DType::kBF16, 7, H), dbf = up(bf);
    const std::vector<Tensor> shards = {dtable, dbf};
    const std::vector<int32_t> ids = {0, 299, 300, 306, 5, 5, 150};
    Buffer rows = gpu().alloc(DType::kF32, int64_t(ids.size()), H);
    gpu().embed_rows(rows, shards, ids);
    std::vector<float> rref;
    for (int32_t id : ids)
      for (int64_t c = 0; c < H; ++c)
        rref.push_back(id < V ? tf.view().f32()[id * H + c] : bf16_to_f32(bf.view().as<uint16_t>()[(id - V) * H + c]));
    EXPECT_EQ(down(rows), rref) << "embed_rows " << dtype_name(dt);
  }
}

// ngram_embed over block-format shards gathers the rows dequantize_row gives, as the CPU does.
TEST_F(QuantGpuTest, NgramEmbedBlockFormats) {
  const int n = 3, heads = 4;
  // a hash of 4 heads (two orders) whose tables cover 600 rows: sizes 149, 151, 157, 139
  const std::vector<int64_t> packed = {1000003, 2000003, 3000017, 149, 151, 157, 139, 0, 149, 300, 457};
  Buffer hp = cpu_.alloc(DType::kI64, 1, int64_t(packed.size()));
  std::copy(packed.begin(), packed.end(), hp.view().as<int64_t>());
  Buffer dhp = up(hp);
  Buffer w = cpu_.alloc(DType::kI32, 10, n);
  for (int64_t i = 0; i < w.view().numel(); ++i) w.view().as<int32_t>()[i] = int32_t((i * 7919) % 5000);
  Buffer dw = up(w);
  const int64_t H = 256;
  for (DType dt : kBlockTypes) {
    std::vector<Buffer> hs, ds;
    std::vector<Tensor> ht, dts;
    for (int64_t rows : {256, 256, 88}) {
      hs.push_back(quantized(dt, rows, H, 1.0f));
      ds.push_back(up(hs.back()));
      ht.push_back(hs.back());
      dts.push_back(ds.back());
    }
    Buffer ref = cpu_.alloc(DType::kF32, 10 * heads, H), out = gpu().alloc(DType::kF32, 10 * heads, H);
    cpu_.ngram_embed(ref, ht, w, hp);
    gpu().ngram_embed(out, dts, dw, dhp);
    EXPECT_EQ(down(out), host(ref)) << dtype_name(dt);
  }
}

TEST_F(QuantGpuTest, SupportsEveryBlockFormat) {
  for (DType dt : kBlockTypes) EXPECT_TRUE(gpu().supports_weight_dtype(dt)) << dtype_name(dt);
  EXPECT_FALSE(gpu().supports_weight_dtype(DType::kI32));
}

// GEMV bandwidth: bytes of blocks read per second (decode is bound by them), and prefill time.
// "hot": the same matrix back to back, which an H200's 50 MB L2 partly holds (these matrices are
// 28-41 MB), so it overstates decode; "DRAM": copies of the matrix taking turns, 256 MB in all,
// so each launch reads its weights from device memory as a decode step does.
TEST_F(QuantGpuTest, BenchQuantGemv) {
  auto time = [&](const std::function<void()>& fn, int reps = 50) {
    for (int i = 0; i < 3; ++i) fn();
    cuda().synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) fn();
    cuda().synchronize();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
  };
  for (DType dt : {DType::kQ4_K, DType::kQ8_0, DType::kQ6_K, DType::kMXFP4}) {
    for (auto [N, K] : {std::pair<int64_t, int64_t>{12288, 4096}, {4096, 12288}}) {
      // random blocks (any bytes are valid weights except NaN/inf scales): bandwidth does not
      // depend on the values, and quantizing 50M elements on the host would take minutes
      Buffer w = host_buffer(dt, N, K);
      auto* p = static_cast<uint8_t*>(w.view().data);
      for (size_t i = 0; i < w.view().nbytes(); ++i) p[i] = uint8_t(rng_() & 0x3B);  // f16 exponents stay small
      Buffer dw = up(w);
      const double bytes = double(w.view().nbytes());
      std::vector<Buffer> turns;  // dw and its copies, 256 MB in all
      turns.push_back(std::move(dw));
      while (double(turns.size()) * bytes < 256e6) turns.push_back(up(w));
      // Q4_K, Q8_0 and Q6_K also in the layout Ops::upload_matrix gives the Qwen line's projections (T32)
      std::vector<Buffer> t32_turns;
      if (dt == DType::kQ4_K || dt == DType::kQ8_0 || dt == DType::kQ6_K)
        while (double(t32_turns.size()) * bytes < 256e6) t32_turns.push_back(gpu().upload_matrix(w));
      for (const std::vector<Buffer>* ts : {&turns, &t32_turns}) {
        if (ts->empty()) continue;
        for (int T : {1, 8}) {
          Buffer x = up(random(T, K)), out = gpu().alloc(DType::kF32, T, N);
          const double hot = time([&] { gpu().matmul(out, x, (*ts)[0]); });
          size_t next = 0;
          const double dram = time([&] { gpu().matmul(out, x, (*ts)[next++ % ts->size()]); }, 10 * int(ts->size()));
          std::printf("BENCH qgemv_%s_T%d_%ldx%ld %.0f GB/s hot (%.1f us), %.0f GB/s DRAM (%.1f us, %zu copies)\n",
                      std::string(dtype_name((*ts)[0].view().dtype)).c_str(), T, long(N), long(K), bytes / hot / 1e9,
                      hot * 1e6, bytes / dram / 1e9, dram * 1e6, ts->size());
        }
      }
      // the first T32 copy stays for the prefill bench below
      if (t32_turns.size() > 1) t32_turns.erase(t32_turns.begin() + 1, t32_turns.end());
      const Buffer& dw0 = turns[0];
      // A few rows: the tensor-core kernel up to KESTREL_CUDA_QUANT_MMA_ROWS (64 unless set; Q4_K
      // 8-row GEMV passes up to 24 rows, whatever the variable), the dequantized tiles and cuBLAS
      // past it; run the bench with the variable at 0 and at 128 to compare the two paths at each
      // row count (the qgemv T8 line above times one GEMV pass). The T32 copy: the integer-dot rows
      // GEMV in passes of up to 32 rows (2 or 4 n-tiles of 8) up to 64 rows, then dequantized tiles.
      {
        const char* env = std::getenv("KESTREL_CUDA_QUANT_MMA_ROWS");
        std::vector<const Buffer*> mats = {&dw0};
        if (!t32_turns.empty()) mats.push_back(&t32_turns[0]);
        for (const Buffer* m : mats)
          for (int T : {9, 16, 24, 32, 48, 64, 128}) {
            Buffer x = up(random(T, K)), out = gpu().alloc(DType::kF32, T, N);
            const double s = time([&] { gpu().matmul(out, x, *m); }, 20);
            std::printf("BENCH qmatmul_rows_%s_T%d_%ldx%ld %.1f us (%.0f GB/s of weights; "
                        "KESTREL_CUDA_QUANT_MMA_ROWS=%s)\n",
                        std::string(dtype_name(m->view().dtype)).c_str(), T, long(N), long(K), s * 1e6,
                        bytes / s / 1e9, env ? env : "unset");
          }
      }
      if (N == 12288 && !t32_turns.empty()) {  // Q4_K, Q8_0 and Q6_K
        // the prefill path: a 512-row step (the engine's chunk) and 2048 rows, in both layouts
        for (const Buffer* m : std::initializer_list<const Buffer*>{&dw0, &t32_turns[0]})
          for (int T : {512, 2048}) {
            Buffer x = up(random(T, K)), out = gpu().alloc(DType::kF32, T, N);
            for (MatmulPrecision p : {MatmulPrecision::kBf16, MatmulPrecision::kBf16x3}) {
              cuda().set_matmul_precision(p);
              const double s = time([&] { gpu().matmul(out, x, *m); }, 10);
              std::printf("BENCH qprefill_%s_T%d_%ldx%ld_%s %.1f TFLOP/s (%.2f ms)\n",
                          std::string(dtype_name(m->view().dtype)).c_str(), T, long(N), long(K),
                          matmul_precision_name(p), 2.0 * T * N * K / s / 1e12, s * 1e3);
            }
          }
        cuda().set_matmul_precision(MatmulPrecision::kBf16x3);
      }
    }
  }
}

}  // namespace
}  // namespace kestrel::test
#endif  // KESTREL_HAVE_CUDA
