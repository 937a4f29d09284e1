// Shared helpers for the CUDA parity tests: a fixture that skips without a GPU, random host
// tensors, device copies, relative errors (||out - ref|| / ||ref||) and step plans.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "core/dtype.h"
#include "ops/ops.h"
#ifdef KESTREL_HAVE_CUDA
#include "backend/cuda/cuda_ops.h"
#endif

namespace kestrel::test {

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
#ifdef KESTREL_HAVE_CUDA
    if (CudaOps::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    gpu_ = std::make_unique<CudaOps>();
#else
    GTEST_SKIP() << "built without the CUDA backend";
#endif
  }
  Ops& gpu() { return *gpu_; }
  CpuOps cpu_;
  std::unique_ptr<Ops> gpu_;
  std::mt19937 rng_{1234};

  // Host tensor of normal(0, scale) values in dtype (BF16/F16 values rounded from F32).
  Buffer random(DType dt, int64_t rows, int64_t cols, float scale = 1.0f) {
    Buffer b = host_buffer(dt, rows, cols);
    std::normal_distribution<float> dist(0.0f, scale);
    const int64_t n = rows * cols;
    for (int64_t i = 0; i < n; ++i) {
      const float v = dist(rng_);
      switch (dt) {
        case DType::kF32: b.view().f32()[i] = v; break;
        case DType::kBF16: b.view().as<uint16_t>()[i] = f32_to_bf16(v); break;
        case DType::kF16: b.view().as<uint16_t>()[i] = f32_to_f16(v); break;
        default: ADD_FAILURE() << "random(): dtype";
      }
    }
    return b;
  }
  Buffer random(int64_t rows, int64_t cols, float scale = 1.0f) { return random(DType::kF32, rows, cols, scale); }
  Buffer up(const Tensor& host) { return gpu().upload(host); }
  Buffer copy(const Tensor& host) { return cpu_.upload(host); }  // a second host copy
  std::vector<float> down(const Tensor& dev) {
    EXPECT_EQ(dev.dtype, DType::kF32);
    std::vector<float> v(size_t(dev.numel()));
    gpu().to_host(dev, v.data());
    return v;
  }
  static std::vector<float> host(const Tensor& t) {
    return std::vector<float>(t.f32(), t.f32() + t.numel());
  }

  // One paged attention step on both backends: sequences (n_past, n_tokens) as make_plan takes
  // them (16-row blocks, the cache already holding earlier positions: the same random contents on
  // both sides), random q (normal(0, q_scale)), k and v. Each side's output and caches after it.
  struct AttentionStep {
    int64_t rows = 0;
    std::vector<float> cpu, gpu;             // [rows, heads * head_dim]
    std::vector<float> k_cpu, k_gpu, v_cpu, v_gpu;
  };
  AttentionStep attention_step(const std::vector<std::pair<int, int>>& seqs, const AttentionParams& p,
                               float q_scale = 1.0f);
};

// ||out - ref|| / ||ref|| (0 when both are zero).
inline double rel_err(const std::vector<float>& out, const std::vector<float>& ref) {
  EXPECT_EQ(out.size(), ref.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < std::min(out.size(), ref.size()); ++i) {
    const double d = double(out[i]) - double(ref[i]);
    num += d * d;
    den += double(ref[i]) * double(ref[i]);
  }
  if (den == 0) return std::sqrt(num);
  return std::sqrt(num / den);
}

// A plan of sequences (n_past, n_tokens) with random tokens below `vocab` and shuffled,
// disjoint block tables; slots 0, 1, ... in order.
inline StepPlan make_plan(const std::vector<std::pair<int, int>>& seqs, int vocab, std::mt19937& rng,
                          int block_size = 16, int32_t* n_blocks_out = nullptr) {
  StepPlan plan;
  plan.block_size = block_size;
  int total_blocks = 0;
  for (auto [past, n] : seqs) total_blocks += (past + n + block_size - 1) / block_size;
  std::vector<int32_t> ids(static_cast<size_t>(total_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::uniform_int_distribution<int> tok(0, vocab - 1);
  size_t next = 0;
  int slot = 0;
  for (auto [past, n] : seqs) {
    const int nb = (past + n + block_size - 1) / block_size;
    std::vector<int32_t> blocks(ids.begin() + long(next), ids.begin() + long(next + size_t(nb)));
    next += size_t(nb);
    std::vector<int32_t> toks(static_cast<size_t>(n));
    for (auto& t : toks) t = tok(rng);
    plan.add_sequence(toks.data(), n, past, slot++, blocks, false, true);
  }
  if (n_blocks_out) *n_blocks_out = total_blocks;
  return plan;
}

inline GpuTest::AttentionStep GpuTest::attention_step(const std::vector<std::pair<int, int>>& seqs,
                                                     const AttentionParams& p, float q_scale) {
  int32_t n_blocks = 0;
  StepPlan plan = make_plan(seqs, 100, rng_, 16, &n_blocks);
  const int64_t T = plan.n_rows(), kvw = int64_t(p.n_kv_heads) * p.head_dim, qw = int64_t(p.n_heads) * p.head_dim;
  Buffer kc = random(int64_t(n_blocks) * 16, kvw), vc = random(int64_t(n_blocks) * 16, kvw);
  Buffer dkc = up(kc), dvc = up(vc);
  Buffer q = random(T, qw, q_scale), k = random(T, kvw), v = random(T, kvw);
  Buffer dq = up(q), dk = up(k), dv = up(v);
  Buffer ref = cpu_.alloc(DType::kF32, T, qw), out = gpu().alloc(DType::kF32, T, qw);
  cpu_.attention(ref, q, k, v, {kc, vc}, p, plan);
  gpu().begin_step(plan);
  gpu().attention(out, dq, dk, dv, {dkc, dvc}, p, plan);
  return {.rows = T, .cpu = host(ref), .gpu = down(out), .k_cpu = host(kc), .k_gpu = down(dkc),
          .v_cpu = host(vc), .v_gpu = down(dvc)};
}

}  // namespace kestrel::test
