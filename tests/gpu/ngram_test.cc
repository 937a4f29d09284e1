// token_windows and ngram_embed on the GPU against the CPU backend, bit for bit: windows and the
// contexts they leave over several steps (new and continuing sequences, eos everywhere: tokens
// below 4 with eos = 1), then the hashed rows of a table in shards (plain dtypes here, block
// formats in quant_matmul_test.cc).
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "gpu_test_util.h"
#include "model/arch/qwen4_exp.h"
#include "support/paths.h"

namespace kestrel::test {
namespace {

#ifdef KESTREL_HAVE_CUDA
std::vector<int32_t> ints_down(Ops& ops, const Tensor& t) {
  std::vector<int32_t> v(size_t(t.numel()));
  ops.to_host(t, v.data());
  return v;
}
std::vector<int32_t> ints(const Tensor& t) {
  return std::vector<int32_t>(t.as<const int32_t>(), t.as<const int32_t>() + t.numel());
}

TEST_F(GpuTest, TokenWindowsEqualTheCpu) {
  const int32_t eos = 1;
  for (int n : {2, 3, 6}) {
    Buffer ctx = cpu_.alloc(DType::kI32, 4, n - 1);
    for (int64_t i = 0; i < ctx.view().numel(); ++i) ctx.view().as<int32_t>()[i] = int32_t(i % 3);  // stale rows
    Buffer dctx = up(ctx);
    // steps of (n_past, n_tokens) per slot 0..: prefill chunks, then decode, new sequences among them
    const std::vector<std::vector<std::pair<int, int>>> steps = {
        {{0, 7}, {0, 1}, {0, 30}}, {{7, 1}, {1, 3}, {30, 1}, {0, 2}}, {{8, 1}, {4, 1}, {31, 1}, {2, 1}},
        {{9, 40}, {5, 1}, {32, 1}, {3, 1}}, {{0, 1}}};
    for (size_t i = 0; i < steps.size(); ++i) {
      const StepPlan plan = make_plan(steps[i], 4, rng_);
      Buffer w = cpu_.alloc(DType::kI32, plan.n_rows(), n), dw = gpu().alloc(DType::kI32, plan.n_rows(), n);
      cpu_.token_windows(w, ctx, eos, plan);
      gpu().begin_step(plan);
      gpu().token_windows(dw, dctx, eos, plan);
      EXPECT_EQ(ints_down(gpu(), dw), ints(w)) << "n " << n << " step " << i;
      EXPECT_EQ(ints_down(gpu(), dctx), ints(ctx)) << "n " << n << " context after step " << i;
    }
  }
}

nlohmann::json fixture_config() {
  std::ifstream in(data_path("fixtures/qwen4_exp/config.json"));
  return nlohmann::json::parse(in);
}

TEST_F(GpuTest, NgramEmbedEqualsTheCpu) {
  const ModelConfig cfg = parse_qwen4_exp_config(fixture_config(), "config.json");
  const NgramHash hash = ngram_hash(cfg, 0);
  const int n = cfg.q4.ngram_size, heads = cfg.q4.ngram_heads();
  const std::vector<int64_t> packed = hash.packed();
  Buffer hp = cpu_.alloc(DType::kI64, 1, int64_t(packed.size()));
  std::memcpy(hp.view().data, packed.data(), packed.size() * 8);
  Buffer dhp = up(hp);
  const StepPlan plan = make_plan({{0, 9}, {3, 1}, {0, 1}, {12, 20}}, int(cfg.vocab_size), rng_);
  Buffer ctx = cpu_.alloc(DType::kI32, 4, n - 1);
  for (int64_t i = 0; i < ctx.view().numel(); ++i) ctx.view().as<int32_t>()[i] = int32_t(i * 7 % cfg.vocab_size);
  Buffer w = cpu_.alloc(DType::kI32, plan.n_rows(), n);
  cpu_.token_windows(w, ctx, cfg.q4.eos, plan);
  Buffer dw = up(w);
  for (DType dt : {DType::kBF16, DType::kF32, DType::kF16}) {
    for (int64_t per : {hash.padded_rows, int64_t(1000), int64_t(64)}) {  // one table, shards, many shards
      const int64_t D = 24;
      std::vector<Buffer> hs, ds;
      std::vector<Tensor> ht, dt_shards;
      for (int64_t left = hash.padded_rows; left > 0; left -= per) {
        hs.push_back(random(dt, std::min(per, left), D));
        ds.push_back(up(hs.back()));
        ht.push_back(hs.back());
        dt_shards.push_back(ds.back());
      }
      Buffer ref = cpu_.alloc(DType::kF32, plan.n_rows() * heads, D);
      Buffer out = gpu().alloc(DType::kF32, plan.n_rows() * heads, D);
      cpu_.ngram_embed(ref, ht, w, hp);
      gpu().ngram_embed(out, dt_shards, dw, dhp);
      EXPECT_EQ(down(out), host(ref)) << dtype_name(dt) << ", shards of " << per << " rows";
    }
  }
}
#endif

}  // namespace
}  // namespace kestrel::test
