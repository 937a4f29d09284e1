// Sliding-window attention over a per-sequence ring gives bit-identical outputs to the same
// attention over paged blocks, for any chunking of the sequence (including chunks longer than the
// ring), and sparse selection attends exactly the listed positions. A BF16 cache attends exactly
// what an F32 cache of BF16-rounded keys and values does, the step's own rows included.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backend/cpu/cpu_ops.h"
#include "core/dtype.h"
#include "ops/ops.h"

namespace kestrel::test {
namespace {

constexpr int kHeads = 4, kKv = 2, kDim = 8, kWindow = 5, kBlock = 4;

struct Inputs {
  Buffer q, k, v;  // [N, heads * dim], [N, kv * dim]
};

Inputs random_inputs(CpuOps& ops, int n) {
  std::mt19937 rng(7);
  std::normal_distribution<float> d(0.0f, 1.0f);
  Inputs in{ops.alloc(DType::kF32, n, kHeads * kDim), ops.alloc(DType::kF32, n, kKv * kDim),
            ops.alloc(DType::kF32, n, kKv * kDim)};
  for (Buffer* b : {&in.q, &in.k, &in.v}) {
    for (int64_t i = 0; i < b->view().numel(); ++i) b->view().f32()[i] = d(rng);
  }
  return in;
}

// Runs the whole sequence through attention in the given chunks; returns out [N, heads * dim].
std::vector<float> run(CpuOps& ops, const Inputs& in, int n, const std::vector<int>& chunks, bool ring,
                       const std::vector<std::vector<int32_t>>* select = nullptr, DType cache_dtype = DType::kF32) {
  const int ring_rows = 2 * kBlock;  // ceil(5 / 4) + 1 blocks
  const int64_t rows = ring ? ring_rows : (n + kBlock - 1) / kBlock * kBlock;
  Buffer ck = ops.alloc(cache_dtype, rows, kKv * kDim), cv = ops.alloc(cache_dtype, rows, kKv * kDim);
  KvLayerView cache{.k = ck, .v = cv, .index_k = {}, .ring_rows = ring ? ring_rows : 0};
  std::vector<int32_t> blocks;
  for (int b = 0; b < (n + kBlock - 1) / kBlock; ++b) blocks.push_back(b);
  std::vector<float> out;
  int pos = 0;
  for (size_t c = 0; pos < n; ++c) {
    const int t = std::min(n - pos, chunks[c % chunks.size()]);
    StepPlan plan;
    plan.block_size = kBlock;
    std::vector<int32_t> toks(size_t(t), 0);
    plan.add_sequence(toks.data(), t, pos, /*state_slot=*/0, blocks, true, true);
    Tensor q = in.q.view().rows_slice(pos, t), k = in.k.view().rows_slice(pos, t), v = in.v.view().rows_slice(pos, t);
    Buffer o = ops.alloc(DType::kF32, t, kHeads * kDim);
    Buffer sel;
    if (select) {
      sel = ops.alloc(DType::kI32, t, 3);
      for (int r = 0; r < t; ++r)
        for (int j = 0; j < 3; ++j) sel.view().as<int32_t>()[r * 3 + j] = (*select)[size_t(pos + r)][size_t(j)];
    }
    ops.attention(o, q, k, v, cache,
                  {.n_heads = kHeads, .n_kv_heads = kKv, .head_dim = kDim, .scale = 0.3f,
                   .window = select ? 0 : kWindow, .select = sel.view()},
                  plan);
    out.insert(out.end(), o.view().f32(), o.view().f32() + o.view().numel());
    pos += t;
  }
  return out;
}

TEST(AttentionRing, RingEqualsPagedForAnyChunking) {
  CpuOps ops;
  const int n = 37;
  Inputs in = random_inputs(ops, n);
  const auto paged = run(ops, in, n, {n}, false);
  for (const auto& chunks : std::vector<std::vector<int>>{{1}, {3}, {7, 2}, {20, 1}, {n}}) {
    EXPECT_EQ(run(ops, in, n, chunks, true), paged) << "chunks starting with " << chunks[0];
    EXPECT_EQ(run(ops, in, n, chunks, false), paged) << "paged, chunks starting with " << chunks[0];
  }
}

TEST(AttentionRing, Bf16CacheAttendsRoundedKeysAndValues) {
  CpuOps ops;
  const int n = 37;
  Inputs in = random_inputs(ops, n);
  Inputs rounded = random_inputs(ops, n);  // q as in; k, v rounded to BF16
  for (auto [src, dst] : {std::pair{&in.q, &rounded.q}, std::pair{&in.k, &rounded.k}, std::pair{&in.v, &rounded.v}}) {
    const bool round = src != &in.q;
    for (int64_t i = 0; i < src->view().numel(); ++i) {
      const float x = src->view().f32()[i];
      dst->view().f32()[i] = round ? bf16_to_f32(f32_to_bf16(x)) : x;
    }
  }
  std::vector<std::vector<int32_t>> sel(n);
  for (int p = 0; p < n; ++p) sel[size_t(p)] = {0, p / 3 == 0 ? -1 : p / 3, p == 0 || p == p / 3 ? -1 : p};
  const auto want = run(ops, rounded, n, {n}, false);
  EXPECT_NE(run(ops, in, n, {n}, false), want) << "rounding must change something for this test to mean anything";
  for (const auto& chunks : std::vector<std::vector<int>>{{1}, {3}, {7, 2}, {20, 1}, {n}}) {
    EXPECT_EQ(run(ops, in, n, chunks, false, nullptr, DType::kBF16), want) << "paged, chunks of " << chunks[0];
    EXPECT_EQ(run(ops, in, n, chunks, true, nullptr, DType::kBF16), want) << "ring, chunks of " << chunks[0];
    EXPECT_EQ(run(ops, in, n, chunks, false, &sel, DType::kBF16), run(ops, rounded, n, {n}, false, &sel))
        << "selection, chunks of " << chunks[0];
  }
}

TEST(AttentionRing, SelectionAttendsExactlyTheListedPositions) {
  CpuOps ops;
  const int n = 12;
  Inputs in = random_inputs(ops, n);
  // row p attends {0, p/2, p} (as a set; -1 pads when they coincide)
  std::vector<std::vector<int32_t>> sel(n);
  for (int p = 0; p < n; ++p) {
    sel[size_t(p)] = {0, p / 2 == 0 ? -1 : p / 2, p == 0 || p == p / 2 ? -1 : p};
  }
  const auto got = run(ops, in, n, {5}, false, &sel);
  // reference: explicit softmax over the listed positions, in double
  for (int p = 0; p < n; ++p) {
    std::vector<int> pos;
    for (int32_t s : sel[size_t(p)]) if (s >= 0) pos.push_back(s);
    for (int h = 0; h < kHeads; ++h) {
      const int kvh = h / (kHeads / kKv);
      std::vector<double> w;
      double mx = -1e30, sum = 0;
      for (int j : pos) {
        double d = 0;
        for (int i = 0; i < kDim; ++i)
          d += double(in.q.view().f32()[p * kHeads * kDim + h * kDim + i]) * in.k.view().f32()[j * kKv * kDim + kvh * kDim + i];
        w.push_back(d * 0.3);
        mx = std::max(mx, d * 0.3);
      }
      for (double& x : w) sum += x = std::exp(x - mx);
      for (int i = 0; i < kDim; ++i) {
        double o = 0;
        for (size_t z = 0; z < pos.size(); ++z) o += w[z] / sum * in.v.view().f32()[pos[z] * kKv * kDim + kvh * kDim + i];
        EXPECT_NEAR(got[size_t(p * kHeads * kDim + h * kDim + i)], o, 1e-5) << "row " << p << " head " << h;
      }
    }
  }
}

}  // namespace
}  // namespace kestrel::test
