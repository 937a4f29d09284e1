// kestrel info: the report on a fixture and on a tiny random model, through the library and the CLI.
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_ops.h"
#include "cache/model_cache.h"
#include "model/loader.h"
#include "model/model_info.h"
#include "model/random_model.h"
#include "support/paths.h"

namespace kestrel {
namespace {

using test::data_path;
using test::run_cli;
using test::work_path;

TEST(LayerPattern, CompactForms) {
  using K = LayerKind;
  const K L = K::kLinearAttention, F = K::kFullAttention;
  EXPECT_EQ(layer_pattern({L, L, L, F, L, L, L, F, L, L, L, F}), "3×linear_attention + full_attention, ×3");
  EXPECT_EQ(layer_pattern({L, L, L, F}), "3×linear_attention + full_attention");
  EXPECT_EQ(layer_pattern({F, F, F, F}), "full_attention, ×4");
  EXPECT_EQ(layer_pattern({L, F, F}), "linear_attention + 2×full_attention");
  EXPECT_EQ(layer_pattern({}), "");
}

TEST(ModelInfo, Qwen35FixtureCountsTextWeightsOnly) {
  const std::string dir = data_path("fixtures/qwen3_5");
  ModelInfo info = model_info(dir, {.ctx = 1000, .seqs = 3});
  EXPECT_EQ(info.architecture, "Qwen3_5ForConditionalGeneration");
  EXPECT_EQ(info.config.model_type, "qwen3_5");
  EXPECT_EQ(info.text_model_type, "qwen3_5_text");
  EXPECT_EQ(info.layer_pattern, "3×linear_attention + full_attention");
  EXPECT_EQ(info.weight_dtypes, "BF16");
  EXPECT_GT(info.n_other_tensors, 0u) << "the vision tower is not text weights";
  // The parameter count matches what the loader actually takes from the checkpoint.
  CpuOps ops;
  LoadedModel lm = load_model(dir, ops);
  EXPECT_EQ(info.n_params, lm.model->parameter_count());
  EXPECT_EQ(info.weight_bytes, lm.model->weight_bytes());
  // Memory plan: 1000 tokens = 63 blocks of 16 per sequence, 3 sequences.
  const CacheCosts costs = cache_costs(info.config, 16);
  EXPECT_EQ(info.kv_bytes, 63u * 3u * costs.bytes_per_block);
  EXPECT_EQ(info.state_bytes, 3u * costs.bytes_per_slot);
  EXPECT_EQ(info.total_bytes, info.weight_bytes + info.kv_bytes + info.state_bytes);
  // One full-attention layer: K and V, 2 KV heads x 64, F32.
  EXPECT_EQ(info.kv_bytes_per_token, 2u * 2 * 64 * 4);
}

TEST(ModelInfo, TinyRandomModelThroughTheCli) {
  const std::string dir = work_path("info-tiny-moe");
  write_random_model({.like = "tiny-qwen3.5-moe", .out = dir, .seed = 1, .vocab = 1000, .progress = false});
  int status = 0;
  const std::string out = run_cli("info -m " + dir + " --json --ctx 2048 --seqs 2", &status);
  ASSERT_EQ(status, 0) << out;
  nlohmann::json j = nlohmann::json::parse(out);
  EXPECT_EQ(j["architecture"], "Qwen3_5MoeForConditionalGeneration");
  EXPECT_EQ(j["model_type"], "qwen3_5_moe");
  EXPECT_EQ(j["layers"], 8);
  EXPECT_EQ(j["layer_pattern"], "3×linear_attention + full_attention, ×2");
  EXPECT_EQ(j["vocab_size"], 1000);
  EXPECT_EQ(j["hidden_size"], 64);
  EXPECT_EQ(j["moe"]["experts"], 8);
  EXPECT_EQ(j["moe"]["top_k"], 2);
  EXPECT_EQ(j["gated_deltanet"]["value_heads"], 4);
  EXPECT_EQ(j["skipped_tensors"], 0);
  EXPECT_EQ(j["memory"]["ctx"], 2048);
  EXPECT_EQ(j["memory"]["seqs"], 2);
  CpuOps ops;
  LoadedModel lm = load_model(dir, ops);
  EXPECT_EQ(j["parameters"].get<uint64_t>(), lm.model->parameter_count());
  EXPECT_EQ(j["weight_bytes"].get<uint64_t>(), 2 * lm.model->parameter_count());

  const std::string text = run_cli("info -m " + dir, &status);
  ASSERT_EQ(status, 0) << text;
  EXPECT_NE(text.find("3×linear_attention + full_attention, ×2"), std::string::npos) << text;
  EXPECT_NE(text.find("8 (top-2, ffn 32, shared 32)"), std::string::npos) << text;
}

TEST(ModelInfo, PlainQwen3Fixture) {
  int status = 0;
  const std::string out = run_cli("info -m " + data_path("fixtures/qwen3") + " --json", &status);
  ASSERT_EQ(status, 0) << out;
  nlohmann::json j = nlohmann::json::parse(out);
  EXPECT_EQ(j["layer_pattern"], "full_attention, ×4");
  EXPECT_EQ(j["state_bytes_per_sequence"], 0);
  EXPECT_FALSE(j.contains("gated_deltanet"));
  EXPECT_FALSE(j.contains("moe"));
}

TEST(ModelInfo, MalformedModelIsAnErrorNotACrash) {
  int status = 0;
  const std::string out = run_cli("info -m " + work_path("no-such-model"), &status);
  EXPECT_EQ(status, 2) << out;
  EXPECT_NE(out.find("no-such-model"), std::string::npos) << out;
}

}  // namespace
}  // namespace kestrel
