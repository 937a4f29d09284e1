// Memory plan: --gpu-memory values parse or are refused by name; the KV pool takes what the limit
// leaves after what is in use, the activation reserve and the state slots; too little is refused.
#include <gtest/gtest.h>

#include "cache/memory_plan.h"
#include "core/error.h"
#include "engine/scheduler.h"
#include "model/loader.h"
#include "support/fixture_model.h"

namespace kestrel {
namespace {

constexpr uint64_t GiB = uint64_t(1) << 30;

TEST(MemoryPlan, ParsesFractionsAndSizes) {
  EXPECT_DOUBLE_EQ(parse_memory_limit("0.9", "--gpu-memory").fraction, 0.9);
  EXPECT_DOUBLE_EQ(parse_memory_limit("1", "--gpu-memory").fraction, 1.0);
  EXPECT_EQ(parse_memory_limit("60G", "--gpu-memory").bytes, 60 * GiB);
  EXPECT_EQ(parse_memory_limit("60GiB", "--gpu-memory").bytes, 60 * GiB);
  EXPECT_EQ(parse_memory_limit("512m", "--gpu-memory").bytes, uint64_t(512) << 20);
  EXPECT_EQ(parse_memory_limit("80GB", "--gpu-memory").bytes, uint64_t(80e9));
  EXPECT_EQ(parse_memory_limit("123456789", "--gpu-memory").bytes, 123456789u);
  for (const char* bad : {"", "abc", "-0.5", "0", "1.5", "60Q", "nan", "inf", "1e30G"}) {
    try {
      parse_memory_limit(bad, "--gpu-memory");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--gpu-memory"), std::string::npos) << e.what();
    }
  }
}

TEST(MemoryPlan, KvPoolTakesWhatIsLeft) {
  const ModelConfig cfg = load_config(test::data_path("fixtures/qwen3_5"));
  const CacheCosts costs = cache_costs(cfg, 16);
  ASSERT_GT(costs.bytes_per_block, 0u);
  ASSERT_GT(costs.bytes_per_slot, 0u);
  const CachePlanRequest r{.device_total = 100 * GiB, .device_free = 80 * GiB, .limit = {.fraction = 0.9},
                           .n_slots = 48, .max_context = 4096, .max_step_tokens = 512, .max_logit_rows = 16};
  const CachePlan p = plan_cache(cfg, r);
  EXPECT_EQ(p.limit, 90 * GiB);
  EXPECT_EQ(p.in_use, 20 * GiB);
  EXPECT_EQ(p.sizing.n_slots, 48);
  EXPECT_EQ(p.state_bytes, 48 * costs.bytes_per_slot);
  EXPECT_GE(p.reserve, uint64_t(512) << 20);
  const uint64_t room = 90 * GiB - 20 * GiB - p.reserve - p.state_bytes;
  EXPECT_EQ(uint64_t(p.sizing.n_blocks), std::min<uint64_t>(room / costs.bytes_per_block, INT32_MAX));
  EXPECT_LE(p.kv_bytes + p.state_bytes + p.reserve + p.in_use, p.limit);
  EXPECT_NE(p.summary().find("KV blocks"), std::string::npos);
  // a byte limit, and never more than is free
  CachePlanRequest small = r;
  small.limit = {.bytes = 21 * GiB};
  const CachePlan q = plan_cache(cfg, small);
  EXPECT_LE(q.kv_bytes, 1 * GiB);
  CachePlanRequest busy = r;
  busy.device_free = 30 * GiB;  // others use the device too
  busy.limit = {.fraction = 1.0};
  const CachePlan b = plan_cache(cfg, busy);
  EXPECT_LE(b.kv_bytes + b.state_bytes + b.reserve, 30 * GiB);
}

// The reserve counts the CUDA tiled prefill attention's scratch: the BF16 hi/lo copy of K and V
// for the keys a step attends (one sequence of max_context keys, or several within 1 GiB) and the
// per-segment partial results; nothing for steps too short to take that kernel.
TEST(MemoryPlan, ReserveCountsThePrefillAttentionScratch) {
  const ModelConfig cfg = load_config(test::data_path("fixtures/qwen3_5"));
  int64_t kv_width = 0, part_floats = 0, heads = 0;
  for (int l = 0; l < cfg.n_layers; ++l) {
    if (!cfg.is_attention(l)) continue;
    const auto& a = cfg.attn_for(l);
    kv_width = std::max<int64_t>(kv_width, int64_t(a.n_kv_heads) * a.head_dim);
    part_floats = std::max<int64_t>(part_floats, int64_t(a.n_heads) * (a.head_dim + 2));
    heads = std::max<int64_t>(heads, a.n_heads);
  }
  ASSERT_GT(kv_width, 0);
  EXPECT_EQ(prefill_attention_scratch(cfg, 63, 4096, 8), 0u);  // no step takes the tiled kernel
  EXPECT_EQ(prefill_attention_scratch(cfg, 512, 0, 8), 0u);
  const uint64_t per_key = 8 * uint64_t(kv_width);
  // one sequence of 4096 keys: a copy of its keys; 3 segments of partials (4096 / 2048 + 2 bound)
  const uint64_t slot = 512 * uint64_t(part_floats) * 4, state = 512 * uint64_t(heads) * 8;
  EXPECT_EQ(prefill_attention_scratch(cfg, 512, 4096, 1), per_key * 4096 + slot * 4 + state);
  // many sequences: the copy is grouped within 1 GiB (unless one sequence alone is larger)
  const uint64_t many = prefill_attention_scratch(cfg, 512, 4096, 100000) - (slot * 4 + state);
  EXPECT_EQ(many, std::max<uint64_t>(per_key * 4096, uint64_t(1) << 30));
  const uint64_t huge = prefill_attention_scratch(cfg, 512, int64_t(1) << 28, 4);
  EXPECT_GE(huge, per_key * (uint64_t(1) << 28));
  // and the plan keeps it out of the KV pool
  EXPECT_EQ(activation_reserve(cfg, 512, 16, 4096, 8) - activation_reserve(cfg, 512, 16),
            prefill_attention_scratch(cfg, 512, 4096, 8));
}

TEST(MemoryPlan, RefusesPlansThatCannotHoldOneSequence) {
  const ModelConfig cfg = load_config(test::data_path("fixtures/qwen3_5"));
  auto expect_refused = [&](const CachePlanRequest& r, const char* says) {
    try {
      plan_cache(cfg, r);
      ADD_FAILURE() << "accepted a plan that should fail (" << says << ")";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("--gpu-memory"), std::string::npos) << e.what();
    }
  };
  const CachePlanRequest base{.device_total = 100 * GiB, .device_free = 80 * GiB, .limit = {.fraction = 0.9},
                              .n_slots = 8, .max_context = 4096, .max_step_tokens = 512, .max_logit_rows = 8};
  CachePlanRequest r = base;
  r.limit = {.fraction = 0.2};  // 20 GiB allowed, 20 GiB already in use
  expect_refused(r, "no room for the KV cache");
  r = base;
  r.limit = {.bytes = 200 * GiB};
  expect_refused(r, "more than the device has");
  r = base;
  // a context whose KV cache (50 GiB) does not fit beside the weights and the reserve (which
  // holds the prefill attention's copy of that context's keys too)
  const CacheCosts costs = cache_costs(cfg, 16);
  r.max_context = int64_t(50 * GiB / (costs.bytes_per_block / 16));
  expect_refused(r, "fewer than --ctx");
  r.max_context = int64_t(1) << 40;  // its reserve alone is more than the limit
  expect_refused(r, "no room for the KV cache");
  expect_refused(r, "--ctx");
}

TEST(MemoryPlan, SchedulerSlotsFollowTheModelsState) {
  const SchedulerConfig sc{.max_running = 8, .prefix_cache = true, .max_checkpoints = 5};
  EXPECT_EQ(scheduler_slots(load_config(test::data_path("fixtures/qwen3")), sc), 0);
  EXPECT_EQ(scheduler_slots(load_config(test::data_path("fixtures/qwen3_5")), sc), 13);
  EXPECT_EQ(scheduler_slots(load_config(test::data_path("fixtures/gemma4_text")), sc), 13) << "sliding rings";
}

}  // namespace
}  // namespace kestrel
