// --kv-cache f32|bf16 (Ops::set_kv_cache_bf16): a bad value is refused by name on every command
// that runs a model and by info; the cache allocates BF16 key and value rows (only those: the
// recurrent state keeps the activation dtype); the memory plan and info count 2 bytes an element;
// bench, parity and quant-quality record the dtype.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "cache/memory_plan.h"
#include "cache/model_cache.h"
#include "core/files.h"
#include "model/loader.h"
#include "support/paths.h"

namespace kestrel {
namespace {

using test::data_path;
using test::run_cli;
using test::work_path;

TEST(KvCacheCli, BadValueIsRefusedByEveryCommand) {
  const std::string m = data_path("fixtures/qwen3_5");
  for (const std::string& args :
       {"run -m " + m + " --prompt-ids 1,2,3 -n 2", "bench -m " + m + " -p 16 -n 2 -r 1", "parity -m " + m,
        "serve -m " + work_path("no-such-model") + " --port 0", "chat -m " + work_path("no-such-model") + " </dev/null",
        "quant-quality -m " + m + " --source " + m + " --text " + data_path("fixtures/README.md"), "info -m " + m}) {
    int status = 0;
    const std::string out = run_cli(args + " --kv-cache f16", &status);
    EXPECT_EQ(status, 2) << args << ": " << out;
    EXPECT_NE(out.find("--kv-cache must be f32 or bf16, got 'f16'"), std::string::npos) << args << ": " << out;
  }
}

TEST(KvCache, Bf16CacheAllocatesOnlyKeyAndValueRowsAsBf16) {
  const ModelConfig cfg = load_config(data_path("fixtures/qwen3_5"));
  for (bool bf16 : {false, true}) {
    CpuOps ops;
    ops.set_kv_cache_bf16(bf16);
    EXPECT_EQ(ops.kv_cache_dtype(), bf16 ? DType::kBF16 : DType::kF32);
    ModelCache cache(cfg, ops, {.n_blocks = 4, .block_size = 16, .n_slots = 2});
    int attention = 0, linear = 0;
    for (int l = 0; l < cfg.n_layers; ++l) {
      if (cfg.is_attention(l)) {
        ++attention;
        EXPECT_EQ(cache.kv(l).k.dtype, ops.kv_cache_dtype()) << "layer " << l;
        EXPECT_EQ(cache.kv(l).v.dtype, ops.kv_cache_dtype()) << "layer " << l;
      } else {
        ++linear;
        EXPECT_EQ(cache.state(l).ssm.dtype, DType::kF32) << "layer " << l;
        EXPECT_EQ(cache.state(l).conv.dtype, DType::kF32) << "layer " << l;
      }
    }
    EXPECT_GT(attention, 0);
    EXPECT_GT(linear, 0);
  }
  // F64 activations: F64 rows unless BF16
  CpuOps f64(DType::kF64);
  EXPECT_EQ(f64.kv_cache_dtype(), DType::kF64);
  f64.set_kv_cache_bf16(true);
  EXPECT_EQ(f64.kv_cache_dtype(), DType::kBF16);
}

TEST(KvCache, PlanCountsTwoBytesAnElement) {
  const ModelConfig cfg = load_config(data_path("fixtures/qwen3_5"));  // no QSA index keys, no rings
  const CacheCosts f32 = cache_costs(cfg, 16), bf16 = cache_costs(cfg, 16, 2);
  ASSERT_GT(bf16.bytes_per_block, 0u);
  EXPECT_EQ(2 * bf16.bytes_per_block, f32.bytes_per_block);
  EXPECT_EQ(bf16.bytes_per_slot, f32.bytes_per_slot);  // recurrent state: F32 either way
  constexpr uint64_t GiB = uint64_t(1) << 30;
  CachePlanRequest r{.device_total = 100 * GiB, .device_free = 80 * GiB, .limit = {.fraction = 0.9},
                     .n_slots = 8, .max_context = 4096, .max_step_tokens = 512, .max_logit_rows = 8};
  const CachePlan p32 = plan_cache(cfg, r);
  r.kv_elem_bytes = 2;
  const CachePlan p16 = plan_cache(cfg, r);
  EXPECT_GE(p16.sizing.n_blocks, std::min<int64_t>(INT32_MAX, 2 * int64_t(p32.sizing.n_blocks)));
}

TEST(KvCacheCli, InfoBenchAndParityReportTheDtype) {
  const std::string m = data_path("fixtures/qwen3_5");
  int status = 0;
  const auto f32 = nlohmann::json::parse(run_cli("info -m " + m + " --json", &status));
  ASSERT_EQ(status, 0);
  const auto bf16 = nlohmann::json::parse(run_cli("info -m " + m + " --json --kv-cache bf16", &status));
  ASSERT_EQ(status, 0);
  EXPECT_EQ(f32["kv_cache_dtype"], "F32");
  EXPECT_EQ(bf16["kv_cache_dtype"], "BF16");
  EXPECT_EQ(2 * bf16["kv_bytes_per_token"].get<uint64_t>(), f32["kv_bytes_per_token"].get<uint64_t>());
  for (const char* kv : {"f32", "bf16"}) {
    const std::string json = work_path(std::string("kv-cache-bench-") + kv + ".json");
    const std::string out =
        run_cli("bench -m " + m + " -p 16 -n 2 -r 1 --kv-cache " + kv + " --json " + json, &status);
    ASSERT_EQ(status, 0) << out;
    EXPECT_NE(out.find(std::string("KV cache ") + (kv == std::string("f32") ? "F32" : "BF16")), std::string::npos)
        << out;
    EXPECT_EQ(nlohmann::json::parse(read_file(json))["kv_cache"], kv == std::string("f32") ? "F32" : "BF16");
  }
  // parity names a BF16 cache in its verdict and JSON (the fixture fails its F32 tolerance with it)
  const std::string out = run_cli("parity -m " + m + " --kv-cache bf16", &status);
  EXPECT_NE(out.find(", BF16 KV cache)"), std::string::npos) << out;
  const auto pj = nlohmann::json::parse(run_cli("parity -m " + m + " --json", &status));
  EXPECT_EQ(status, 0);
  EXPECT_EQ(pj["kv_cache"], "F32");
}

}  // namespace
}  // namespace kestrel
