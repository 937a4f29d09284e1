// The gated delta rule with the value heads in llama.cpp's tiled order (DeltaNetConfig::
// tiled_value_heads, how a Qwen3.5 GGUF with a block-format ssm_out runs) is the grouped
// computation with every value-indexed input and output permuted: bit for bit, since each value
// head computes alone and only which key head it reads changes.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "backend/cpu/cpu_ops.h"
#include "ops/step_plan.h"

namespace kestrel {
namespace {

std::vector<float> random_floats(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Copies the value-indexed blocks of `src` ([rows, prefix + nv * width] row-major) into tiled
// order: stored head n is grouped head (n mod nk) * r + n / nk.
std::vector<float> to_tiled(const std::vector<float>& src, int64_t rows, int64_t prefix, int nk, int nv, int64_t width) {
  const int r = nv / nk;
  const int64_t cols = prefix + int64_t(nv) * width;
  std::vector<float> out = src;
  for (int64_t row = 0; row < rows; ++row)
    for (int n = 0; n < nv; ++n) {
      const int g = (n % nk) * r + n / nk;
      std::memcpy(&out[size_t(row * cols + prefix + n * width)], &src[size_t(row * cols + prefix + g * width)],
                  size_t(width) * sizeof(float));
    }
  return out;
}

Tensor view(std::vector<float>& v, int64_t rows, int64_t cols) {
  return Tensor{.dtype = DType::kF32, .device = Device::kCpu, .data = v.data(), .rows = rows, .cols = cols};
}

struct Case {
  int nk, nv, dk, dv;
  std::vector<std::pair<int, int>> seqs;  // (n_past, n_tokens)
};

void check(const Case& c) {
  SCOPED_TRACE(std::to_string(c.nk) + "/" + std::to_string(c.nv) + " heads");
  std::mt19937 rng(7);
  StepPlan plan;
  int slot = 0;
  for (auto [past, n] : c.seqs) {
    std::vector<int32_t> toks(size_t(n), 1), blocks(size_t((past + n + 15) / 16));
    for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = int32_t(i);
    plan.add_sequence(toks.data(), n, past, slot++, blocks, false, true);
  }
  const int64_t T = plan.n_rows(), S = slot, qk = 2 * int64_t(c.nk) * c.dk;
  DeltaNetConfig grouped{.n_k_heads = c.nk, .n_v_heads = c.nv, .k_head_dim = c.dk, .v_head_dim = c.dv, .conv_kernel = 4};
  DeltaNetConfig tiled = grouped;
  tiled.tiled_value_heads = true;
  const int64_t C = grouped.conv_dim(), state_w = int64_t(c.dk) * c.dv;

  std::vector<float> qkv = random_floats(size_t(T * C), rng), a = random_floats(size_t(T * c.nv), rng),
                     b = random_floats(size_t(T * c.nv), rng), a_neg = random_floats(size_t(c.nv), rng),
                     dt = random_floats(size_t(c.nv), rng, 0.5f), ssm = random_floats(size_t(S * c.nv * state_w), rng, 0.1f);
  for (float& x : a_neg) x = -std::exp(0.5f * x);
  std::vector<float> qkv_t = to_tiled(qkv, T, qk, c.nk, c.nv, c.dv), a_t = to_tiled(a, T, 0, c.nk, c.nv, 1),
                     b_t = to_tiled(b, T, 0, c.nk, c.nv, 1), an_t = to_tiled(a_neg, 1, 0, c.nk, c.nv, 1),
                     dt_t = to_tiled(dt, 1, 0, c.nk, c.nv, 1), ssm_t = to_tiled(ssm, S, 0, c.nk, c.nv, state_w);
  std::vector<float> out(size_t(T * c.nv * c.dv)), out_t(out.size());

  CpuOps ops;
  ops.begin_step(plan);
  ops.gated_delta_rule(view(out, T, c.nv * c.dv), view(qkv, T, C), view(a, T, c.nv), view(b, T, c.nv),
                       view(a_neg, 1, c.nv), view(dt, 1, c.nv), {.conv = {}, .ssm = view(ssm, S, c.nv * state_w)},
                       grouped, plan);
  ops.gated_delta_rule(view(out_t, T, c.nv * c.dv), view(qkv_t, T, C), view(a_t, T, c.nv), view(b_t, T, c.nv),
                       view(an_t, 1, c.nv), view(dt_t, 1, c.nv), {.conv = {}, .ssm = view(ssm_t, S, c.nv * state_w)},
                       tiled, plan);
  const std::vector<float> want_out = to_tiled(out, T, 0, c.nk, c.nv, c.dv), want_ssm = to_tiled(ssm, S, 0, c.nk, c.nv, state_w);
  EXPECT_EQ(0, std::memcmp(out_t.data(), want_out.data(), out_t.size() * sizeof(float))) << "outputs differ";
  EXPECT_EQ(0, std::memcmp(ssm_t.data(), want_ssm.data(), ssm_t.size() * sizeof(float))) << "states differ";
  // The check has teeth: the grouped and the tiled orders read different key heads.
  EXPECT_NE(0, std::memcmp(out_t.data(), out.data(), out.size() * sizeof(float)));
}

TEST(GatedDeltaRuleOrder, TiledIsGroupedPermuted) {
  // Prefills across the 64-position chunk grid (on and off it) and decode rows in one step.
  const std::vector<std::pair<int, int>> seqs = {{0, 150}, {37, 100}, {5, 1}, {64, 1}};
  check({2, 4, 32, 32, seqs});
  check({2, 8, 16, 24, seqs});
  check({3, 6, 8, 8, seqs});
}

TEST(GatedDeltaRuleOrder, KeyHeadMapping) {
  const DeltaNetConfig grouped{.n_k_heads = 16, .n_v_heads = 32, .k_head_dim = 128, .v_head_dim = 128};
  DeltaNetConfig tiled = grouped;
  tiled.tiled_value_heads = true;
  for (int h = 0; h < 32; ++h) {
    EXPECT_EQ(grouped.key_head(h), h / 2);
    EXPECT_EQ(tiled.key_head(h), h % 16);
  }
  DeltaNetConfig same = grouped;  // as many key as value heads: both orders are the identity
  same.n_v_heads = 16;
  for (int h = 0; h < 16; ++h) EXPECT_EQ(same.key_head(h), h);
}

}  // namespace
}  // namespace kestrel
