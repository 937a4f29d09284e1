// token_windows and ngram_embed on the CPU backend: windows against a brute-force reading of each
// sequence's whole history, the context they leave, invariance to where a prefill's chunks fall,
// and ngram_embed against the host reference (ngram_ids + embed_rows) over a sharded table.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "backend/cpu/cpu_ops.h"
#include "core/error.h"
#include "model/arch/qwen4_exp.h"
#include "ops/ngram.h"
#include "support/paths.h"

namespace kestrel::test {
namespace {

constexpr int32_t kEos = 1;

// The window of place i of a whole history (no context: places before 0 are eos), by definition:
// window[k] is the token k back unless one of the k tokens before the row is eos or lies before 0.
std::vector<int32_t> brute_window(const std::vector<int32_t>& hist, int64_t i, int n) {
  std::vector<int32_t> w(size_t(n), kEos);
  w[0] = hist[size_t(i)];
  for (int k = 1; k < n; ++k) {
    bool cut = false;
    for (int j = 1; j <= k; ++j) cut = cut || i - j < 0 || hist[size_t(i - j)] == kEos;
    if (!cut) w[size_t(k)] = hist[size_t(i - k)];
  }
  return w;
}

// A plan of one step: each (slot, n_past, tokens) a sequence, rows in order.
struct Item {
  int32_t slot;
  int32_t n_past;
  std::vector<int32_t> tokens;
};
StepPlan plan_of(const std::vector<Item>& items) {
  StepPlan p;
  for (const Item& it : items) {
    SeqStep s;
    s.row_begin = p.n_rows();
    s.n_tokens = int32_t(it.tokens.size());
    s.n_past = it.n_past;
    s.state_slot = it.slot;
    for (size_t t = 0; t < it.tokens.size(); ++t) {
      p.tokens.push_back(it.tokens[t]);
      p.positions.push_back(it.n_past + int32_t(t));
      p.row_seq.push_back(int32_t(p.seqs.size()));
    }
    p.seqs.push_back(s);
  }
  return p;
}

std::vector<int32_t> ints(const Tensor& t) {
  const int32_t* p = t.as<const int32_t>();
  return std::vector<int32_t>(p, p + t.numel());
}

// Each sequence's history fed in steps of the given sizes; every row's window must be the brute
// force's over the whole history, and the context after each step its last n - 1 tokens.
void check_steps(int n, const std::vector<std::vector<int32_t>>& hists, const std::vector<int>& chunk) {
  CpuOps ops;
  const int slots = 5;
  Buffer context = ops.alloc(DType::kI32, slots, n - 1);
  for (int64_t i = 0; i < context.view().numel(); ++i) context.view().as<int32_t>()[i] = 777;  // stale: ignored
  std::vector<size_t> done(hists.size(), 0);
  for (bool more = true; more;) {
    more = false;
    std::vector<Item> items;
    std::vector<size_t> which;
    for (size_t s = 0; s < hists.size(); ++s) {
      if (done[s] == hists[s].size()) continue;
      const size_t len = std::min(hists[s].size() - done[s], size_t(chunk[s % chunk.size()]));
      items.push_back({int32_t(2 * s % slots), int32_t(done[s]),
                       std::vector<int32_t>(hists[s].begin() + long(done[s]), hists[s].begin() + long(done[s] + len))});
      which.push_back(s);
    }
    if (items.empty()) break;
    more = true;
    const StepPlan plan = plan_of(items);
    Buffer windows = ops.alloc(DType::kI32, plan.n_rows(), n);
    ops.token_windows(windows, context, kEos, plan);
    const std::vector<int32_t> got = ints(windows);
    for (size_t j = 0; j < items.size(); ++j) {
      const size_t s = which[j];
      for (size_t t = 0; t < items[j].tokens.size(); ++t) {
        const int64_t row = plan.seqs[j].row_begin + int64_t(t);
        const std::vector<int32_t> want = brute_window(hists[s], int64_t(done[s] + t), n);
        EXPECT_EQ(std::vector<int32_t>(got.begin() + row * n, got.begin() + (row + 1) * n), want)
            << "sequence " << s << " place " << done[s] + t << " (n " << n << ")";
      }
      done[s] += items[j].tokens.size();
      // the context: the last n - 1 places of the history so far (eos before its start)
      const int32_t* c = context.view().as<const int32_t>() + int64_t(items[j].slot) * (n - 1);
      for (int k = 0; k < n - 1; ++k) {
        const int64_t place = int64_t(done[s]) - (n - 1) + k;
        EXPECT_EQ(c[k], place < 0 ? kEos : hists[s][size_t(place)]) << "sequence " << s << " context " << k;
      }
    }
  }
}

const std::vector<std::vector<int32_t>> kHists = {
    {5, 9, kEos, 7, 8, 8, 3, kEos, kEos, 4, 6, 2, 11},  // eos inside, twice in a row
    {kEos, 3, 4},                                      // eos first
    {12},                                              // one token
    {6, 6, 6, 6, 6, 6, 6, 6, 6, 6},
};

TEST(TokenWindows, OnePassMatchesTheWholeHistory) {
  for (int n : {2, 3, 5}) check_steps(n, kHists, {100});
}

TEST(TokenWindows, AnyChunkingMatchesTheWholeHistory) {
  for (int n : {2, 3, 5}) {
    check_steps(n, kHists, {1});
    check_steps(n, kHists, {2, 3, 1, 4});
    check_steps(n, kHists, {3});
  }
}

// Wrong arguments are kestrel bugs (KCHECK: the process stops, naming the op).
TEST(TokenWindows, BadShapesStopNamingTheOp) {
  CpuOps ops;
  const StepPlan plan = plan_of({{0, 0, {3, 4}}});
  Buffer ctx = ops.alloc(DType::kI32, 2, 2);
  Buffer wide = ops.alloc(DType::kI32, 2, 4);  // n 4 needs a context 3 wide
  EXPECT_DEATH(ops.token_windows(wide, ctx, kEos, plan), "token_windows: windows \\[2, 4\\] and context");
  Buffer floats = ops.alloc(DType::kF32, 2, 3);
  EXPECT_DEATH(ops.token_windows(floats, ctx, kEos, plan), "token_windows: windows and context must be I32");
  Buffer windows = ops.alloc(DType::kI32, 2, 3);
  EXPECT_DEATH(ops.token_windows(windows, ctx, kEos, plan_of({{2, 0, {3, 4}}})), "sequence slot 2 outside");
}

nlohmann::json fixture_config() {
  std::ifstream in(data_path("fixtures/qwen4_exp/config.json"));
  return nlohmann::json::parse(in);
}

// ngram_embed's rows are those of the host reference's ids (ngram_ids) gathered by embed_rows,
// over a table in equal shards and a shorter last one.
TEST(NgramEmbed, EqualsTheHostIdsGathered) {
  CpuOps ops;
  const ModelConfig cfg = parse_qwen4_exp_config(fixture_config(), "config.json");
  const NgramHash hash = ngram_hash(cfg, 1);
  const int n = cfg.q4.ngram_size, heads = cfg.q4.ngram_heads();
  const int64_t D = 8, per = 1000;
  std::vector<Buffer> shard_bufs;
  std::vector<Tensor> shards;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int64_t left = hash.padded_rows; left > 0; left -= per) {
    shard_bufs.push_back(ops.alloc(DType::kF32, std::min(per, left), D));
    for (int64_t i = 0; i < shard_bufs.back().view().numel(); ++i) shard_bufs.back().view().f32()[i] = u(rng);
    shards.push_back(shard_bufs.back());
  }
  const std::vector<int64_t> packed_v = hash.packed();
  Buffer packed = ops.alloc(DType::kI64, 1, int64_t(packed_v.size()));
  std::copy(packed_v.begin(), packed_v.end(), packed.view().as<int64_t>());
  // one sequence continuing from a context, one new
  const std::vector<int32_t> context = {40, 41};
  const StepPlan plan = plan_of({{0, 9, {5, kEos, 7, 300}}, {1, 0, {200, 201}}});
  Buffer ctx = ops.alloc(DType::kI32, 2, n - 1);
  std::copy(context.begin(), context.end(), ctx.view().as<int32_t>());
  Buffer windows = ops.alloc(DType::kI32, plan.n_rows(), n);
  ops.token_windows(windows, ctx, cfg.q4.eos, plan);
  Buffer out = ops.alloc(DType::kF32, plan.n_rows() * heads, D);
  ops.ngram_embed(out, shards, windows, packed);

  std::vector<int32_t> ids(size_t(plan.n_rows() * heads));
  const std::vector<int32_t> fresh(size_t(n - 1), cfg.q4.eos);
  ngram_ids(cfg, hash, context.data(), plan.tokens.data(), 4, ids.data());
  ngram_ids(cfg, hash, fresh.data(), plan.tokens.data() + 4, 2, ids.data() + 4 * heads);
  Buffer ref = ops.alloc(DType::kF32, plan.n_rows() * heads, D);
  ops.embed_rows(ref, shards, ids);
  const float* a = out.view().f32();
  const float* b = ref.view().f32();
  EXPECT_EQ(std::vector<float>(a, a + out.view().numel()), std::vector<float>(b, b + ref.view().numel()));
}

TEST(NgramEmbed, BadArgumentsStopNamingTheOp) {
  CpuOps ops;
  Buffer windows = ops.alloc(DType::kI32, 2, 3);
  Buffer hash = ops.alloc(DType::kI64, 1, 3 + 2 * 4);  // n 3, 4 heads
  Buffer s0 = ops.alloc(DType::kF32, 10, 8), s1 = ops.alloc(DType::kF32, 12, 8), s2 = ops.alloc(DType::kF32, 4, 8);
  Buffer out = ops.alloc(DType::kF32, 8, 8);
  EXPECT_DEATH(ops.ngram_embed(out, {s0, s1, s2}, windows, hash), "ngram_embed: shard 1 has 12 rows");
  Buffer odd = ops.alloc(DType::kI64, 1, 3 + 7);
  EXPECT_DEATH(ops.ngram_embed(out, {s0}, windows, odd), "ngram_embed: hash must be I64");
  Buffer short_out = ops.alloc(DType::kF32, 7, 8);
  EXPECT_DEATH(ops.ngram_embed(short_out, {s0}, windows, hash), "ngram_embed: out has 7 rows");
}

}  // namespace
}  // namespace kestrel::test
