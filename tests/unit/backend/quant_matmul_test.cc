// The CPU backend computing with block-format weights (Q8_0 ... MXFP4): every weight-taking op
// gives bit for bit what it gives with the same weights dequantized to F32 beforehand (ggml's
// dequantize_row), in F32 and in the float64 oracle mode, for odd batch and output sizes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "backend/cpu/cpu_ops.h"
#include "core/thread_pool.h"
#include "ops/ops.h"
#include "quant/quant.h"

namespace kestrel::test {
namespace {

const DType kBlockTypes[] = {DType::kQ8_0, DType::kQ5_0, DType::kQ5_1, DType::kQ4_K,
                             DType::kQ5_K, DType::kQ6_K, DType::kMXFP4};

// A quantized matrix and the same values widened to F32.
struct QuantMatrix {
  Buffer q;    // [rows, cols] in the block dtype
  Buffer f32;  // [rows, cols] = dequantize(q)
};

QuantMatrix random_matrix(DType dtype, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> src(size_t(rows * cols));
  for (float& v : src) v = d(rng);
  const GgmlType type = *dtype_to_ggml(dtype);
  QuantMatrix m{host_buffer(dtype, rows, cols), host_buffer(DType::kF32, rows, cols)};
  const size_t row_bytes = m.q.view().row_bytes();
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* qr = static_cast<uint8_t*>(m.q.view().data) + size_t(r) * row_bytes;
    quant::quantize_row(type, src.data() + r * cols, cols, qr);
    quant::dequantize_row(type, qr, cols, m.f32.view().f32() + r * cols);
  }
  return m;
}

// x [rows, cols] of the activation dtype, normal values.
Buffer random_activations(DType dtype, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> d(0.0, 1.0);
  Buffer b = host_buffer(dtype, rows, cols);
  for (int64_t i = 0; i < rows * cols; ++i) {
    if (dtype == DType::kF64) b.view().as<double>()[i] = d(rng);
    else b.view().f32()[i] = float(d(rng));
  }
  return b;
}

::testing::AssertionResult same_bytes(const Tensor& a, const Tensor& b) {
  if (a.dtype != b.dtype || a.rows != b.rows || a.cols != b.cols) return ::testing::AssertionFailure() << "shapes differ";
  if (std::memcmp(a.data, b.data, a.nbytes()) != 0) return ::testing::AssertionFailure() << "not bit-identical";
  return ::testing::AssertionSuccess();
}

TEST(CpuQuantWeights, SupportsEveryBlockFormat) {
  CpuOps ops;
  for (DType d : kBlockTypes) EXPECT_TRUE(ops.supports_weight_dtype(d)) << dtype_name(d);
  for (DType d : {DType::kBF16, DType::kF16, DType::kF32}) EXPECT_TRUE(ops.supports_weight_dtype(d));
  EXPECT_FALSE(ops.supports_weight_dtype(DType::kI32));
}

// matmul with block weights == matmul with the dequantized F32 weights, bit for bit, for
// T = 1, 3, 7, 13 (every remainder of the 4-row groups) and N = 19 (not a multiple of the tile).
TEST(CpuQuantWeights, MatmulEqualsDequantizedMatmul) {
  for (DType act : {DType::kF32, DType::kF64}) {
    CpuOps ops(act);
    for (DType d : kBlockTypes) {
      SCOPED_TRACE(std::string(dtype_name(d)) + " activations " + std::string(dtype_name(act)));
      // 3 or 11 blocks: whole and partial 256-value chunks of the decode path (T <= 4), tiles above
      const int64_t K = dtype_block_elems(d) == 256 ? 768 : 352, N = 19;
      const QuantMatrix w = random_matrix(d, N, K, 11);
      for (int64_t T : {1, 2, 3, 4, 5, 7, 13}) {
        const Buffer x = random_activations(act, T, K, uint32_t(T));
        Buffer got = ops.alloc(act, T, N), want = ops.alloc(act, T, N);
        ops.matmul(got, x, w.q);
        ops.matmul(want, x, w.f32);
        EXPECT_TRUE(same_bytes(got, want)) << "T = " << T;
        // and the values are the products: against a plain double dot of the dequantized weights
        for (int64_t t = 0; t < T; ++t) {
          double ref = 0.0;
          for (int64_t k = 0; k < K; ++k) {
            const double xv = act == DType::kF64 ? x.view().as<double>()[t * K + k] : x.view().f32()[t * K + k];
            ref += xv * double(w.f32.view().f32()[k]);
          }
          const double v = act == DType::kF64 ? got.view().as<double>()[t * N] : got.view().f32()[t * N];
          EXPECT_NEAR(v, ref, 1e-5 * std::sqrt(double(K)));
        }
      }
    }
  }
}

// The result does not depend on how many threads split the output rows.
TEST(CpuQuantWeights, MatmulIndependentOfThreads) {
  CpuOps ops;
  const QuantMatrix w = random_matrix(DType::kQ4_K, 37, 512, 5);
  const Buffer x = random_activations(DType::kF32, 5, 512, 6);
  Buffer a = ops.alloc(DType::kF32, 5, 37), b = ops.alloc(DType::kF32, 5, 37);
  ops.matmul(a, x, w.q);
  const int threads = ThreadPool::global().size();
  ThreadPool::set_global_threads(3);
  ops.matmul(b, x, w.q);
  ThreadPool::set_global_threads(threads);
  EXPECT_TRUE(same_bytes(a, b));
}

// matmul_multi over targets of different block formats: each exactly its own F32 matmul.
TEST(CpuQuantWeights, MatmulMultiMixedFormats) {
  CpuOps ops;
  const int64_t K = 256, T = 5;
  const QuantMatrix a = random_matrix(DType::kQ6_K, 9, K, 1), b = random_matrix(DType::kQ8_0, 3, K, 2);
  const Buffer x = random_activations(DType::kF32, T, K, 3);
  Buffer oa = ops.alloc(DType::kF32, T, 9), ob = ops.alloc(DType::kF32, T, 3);
  const MatmulTarget targets[] = {{oa, a.q}, {ob, b.q}};
  ops.matmul_multi(x, targets);
  Buffer ra = ops.alloc(DType::kF32, T, 9), rb = ops.alloc(DType::kF32, T, 3);
  ops.matmul(ra, x, a.f32);
  ops.matmul(rb, x, b.f32);
  EXPECT_TRUE(same_bytes(oa, ra));
  EXPECT_TRUE(same_bytes(ob, rb));
}

// embed / embed_rows gather quantized rows as their dequantized values (scaled), in F32 and F64.
TEST(CpuQuantWeights, EmbedFromQuantizedTable) {
  for (DType act : {DType::kF32, DType::kF64}) {
    CpuOps ops(act);
    for (DType d : kBlockTypes) {
      SCOPED_TRACE(std::string(dtype_name(d)) + " activations " + std::string(dtype_name(act)));
      const int64_t V = 11, H = 256;
      const QuantMatrix table = random_matrix(d, V, H, 9);
      std::vector<int32_t> toks = {3, 0, 10, 3, 7};
      StepPlan plan;
      plan.add_sequence(toks.data(), int32_t(toks.size()), 0, 0, {0}, true, true);
      Buffer got = ops.alloc(act, 5, H), want = ops.alloc(act, 5, H);
      ops.embed(got, table.q, plan, 1.5);
      ops.embed(want, table.f32, plan, 1.5);
      EXPECT_TRUE(same_bytes(got, want));
      // row shards: rows [0, 4) and [4, 11) of the table
      const std::vector<Tensor> qs = {table.q.view().rows_slice(0, 4), table.q.view().rows_slice(4, 7)};
      const std::vector<Tensor> fs = {table.f32.view().rows_slice(0, 4), table.f32.view().rows_slice(4, 7)};
      Buffer rq = ops.alloc(act, 5, H), rf = ops.alloc(act, 5, H);
      ops.embed_rows(rq, qs, toks);
      ops.embed_rows(rf, fs, toks);
      EXPECT_TRUE(same_bytes(rq, rf));
    }
  }
}

// Routed experts with quantized gate/up/down (row ranges of stacked tensors, as a fused gate_up
// is split at load) equal the same experts in F32.
TEST(CpuQuantWeights, MoeExpertsWithQuantizedExperts) {
  for (DType act : {DType::kF32, DType::kF64}) {
    CpuOps ops(act);
    for (DType d : {DType::kQ8_0, DType::kQ4_K, DType::kMXFP4}) {
      SCOPED_TRACE(std::string(dtype_name(d)) + " activations " + std::string(dtype_name(act)));
      const int64_t E = 4, H = 256, F = 256, T = 7;
      const int k = 2;
      const QuantMatrix gate_up = random_matrix(d, E * 2 * F, H, 21), down = random_matrix(d, E * H, F, 22);
      ExpertWeights q{.act = Activation::kGeluTanh}, f{.act = Activation::kGeluTanh};
      for (int64_t e = 0; e < E; ++e) {
        q.gate.push_back(gate_up.q.view().rows_slice(e * 2 * F, F));
        q.up.push_back(gate_up.q.view().rows_slice(e * 2 * F + F, F));
        q.down.push_back(down.q.view().rows_slice(e * H, H));
        f.gate.push_back(gate_up.f32.view().rows_slice(e * 2 * F, F));
        f.up.push_back(gate_up.f32.view().rows_slice(e * 2 * F + F, F));
        f.down.push_back(down.f32.view().rows_slice(e * H, H));
      }
      const Buffer x = random_activations(act, T, H, 23);
      Buffer ids = ops.alloc(DType::kI32, T, k);
      Buffer weights = random_activations(act, T, k, 24);
      for (int64_t i = 0; i < T * k; ++i) ids.view().as<int32_t>()[i] = int32_t((i * 3 + i / k) % E);
      Buffer got = ops.alloc(act, T, H), want = ops.alloc(act, T, H);
      ops.moe_experts(got, x, ids, weights, q);
      ops.moe_experts(want, x, ids, weights, f);
      EXPECT_TRUE(same_bytes(got, want));
    }
  }
}

}  // namespace
}  // namespace kestrel::test
