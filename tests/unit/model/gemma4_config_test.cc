// Gemma 4 config validation: each inconsistency is refused with an error naming the field.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "backend/cpu/cpu_ops.h"
#include "cache/model_cache.h"
#include "model/arch/gemma4.h"
#include "support/paths.h"

namespace kestrel::test {
namespace {

nlohmann::json fixture_config(const std::string& family) {
  std::ifstream in(data_path("fixtures/" + family + "/config.json"));
  return nlohmann::json::parse(in);
}

// Expects parse_gemma4_config to throw an Error of `kind` whose message names `field`.
void expect_refused(const nlohmann::json& j, ErrorKind kind, const std::string& field) {
  try {
    parse_gemma4_config(j, "config.json");
    ADD_FAILURE() << "accepted a config that should be refused for '" << field << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
  }
}

TEST(Gemma4Config, FixturesParse) {
  ModelConfig c = parse_gemma4_config(fixture_config("gemma4_text"), "config.json");
  EXPECT_EQ(c.n_layers, 6);
  EXPECT_EQ(c.attn_for(0).head_dim, 32);
  EXPECT_EQ(c.attn_for(2).head_dim, 512);
  EXPECT_EQ(c.window_for(0), 16);
  EXPECT_EQ(c.window_for(2), 0);
  EXPECT_TRUE(c.attn_for(2).rope.whole_head_pairs);
  EXPECT_EQ(c.attn_for(2).rope.rotary_dim, 128);  // 0.25 x 512
  EXPECT_EQ(c.per_layer_input_dim, 16);
  EXPECT_FLOAT_EQ(c.final_logit_softcap, 30.0f);

  ModelConfig kv = parse_gemma4_config(fixture_config("gemma4_text_kvshared"), "config.json");
  EXPECT_EQ(kv.kv_source(4), 3);  // last non-shared sliding layer
  EXPECT_EQ(kv.kv_source(5), 2);  // last non-shared full layer
  EXPECT_EQ(kv.ffn_for(4), 512);  // double-wide MLP on the shared layers
  EXPECT_EQ(kv.ffn_for(3), 256);

  ModelConfig keqv = parse_gemma4_config(fixture_config("gemma4_text_keqv"), "config.json");
  EXPECT_TRUE(keqv.attn_for(2).k_eq_v);
  EXPECT_FALSE(keqv.attn_for(0).k_eq_v);
  EXPECT_EQ(keqv.attn_for(2).n_kv_heads, 1);
  EXPECT_EQ(keqv.attn_for(2).head_dim, 64);
}

TEST(Gemma4Config, ReleasedGlobalFieldsEqualPerLayerConfig) {
  auto j = fixture_config("gemma4_text_keqv");
  j.erase("per_layer_config");
  j["global_head_dim"] = 64;
  j["num_global_key_value_heads"] = 1;
  ModelConfig c = parse_gemma4_config(j, "config.json");
  EXPECT_EQ(c.attn_for(2).head_dim, 64);
  EXPECT_EQ(c.attn_for(2).n_kv_heads, 1);
  EXPECT_EQ(c.attn_for(0).head_dim, 32);
  EXPECT_EQ(c.attn_for(0).n_kv_heads, 2);
}

TEST(Gemma4Config, MultimodalWrapperUsesLanguageModelPrefix) {
  nlohmann::json j = {{"model_type", "gemma4"}, {"text_config", fixture_config("gemma4_text")}};
  ModelConfig c = parse_gemma4_config(j, "config.json");
  EXPECT_EQ(c.weight_prefix, "model.language_model.");
}

TEST(Gemma4Config, LayerTypesMustMatchLayerCount) {
  auto j = fixture_config("gemma4_text");
  j["num_hidden_layers"] = 7;
  expect_refused(j, ErrorKind::kBadInput, "layer_types");
}

TEST(Gemma4Config, UnknownLayerTypeRefused) {
  auto j = fixture_config("gemma4_text");
  j["layer_types"][1] = "linear_attention";
  expect_refused(j, ErrorKind::kBadInput, "layer_types");
}

TEST(Gemma4Config, SlidingLayersNeedAWindow) {
  auto j = fixture_config("gemma4_text");
  j.erase("sliding_window");
  expect_refused(j, ErrorKind::kBadInput, "sliding_window");
}

TEST(Gemma4Config, EveryLayerTypeNeedsRopeParameters) {
  auto j = fixture_config("gemma4_text");
  j["rope_parameters"].erase("full_attention");
  expect_refused(j, ErrorKind::kBadInput, "rope_parameters");
}

TEST(Gemma4Config, KvSharingBeyondLayerCountRefused) {
  auto j = fixture_config("gemma4_text_kvshared");
  j["num_kv_shared_layers"] = 6;
  expect_refused(j, ErrorKind::kBadInput, "num_kv_shared_layers");
}

TEST(Gemma4Config, KvSharedLayerWithoutSourceOfItsTypeRefused) {
  auto j = fixture_config("gemma4_text_kvshared");
  j["num_kv_shared_layers"] = 4;  // layers 2..5 shared: no full layer left before them
  expect_refused(j, ErrorKind::kBadInput, "num_kv_shared_layers");
}

TEST(Gemma4Config, PerLayerConfigIndexOutOfRangeRefused) {
  auto j = fixture_config("gemma4_text");
  j["per_layer_config"]["9"] = {{"head_dim", 64}};
  expect_refused(j, ErrorKind::kBadInput, "per_layer_config");
}

TEST(Gemma4Config, PerLayerConfigUnknownKeyRefused) {
  auto j = fixture_config("gemma4_text");
  j["per_layer_config"]["2"]["sliding_window"] = 8;
  expect_refused(j, ErrorKind::kUnsupported, "sliding_window");
}

TEST(Gemma4Config, KvHeadsMustDivideHeads) {
  auto j = fixture_config("gemma4_text_keqv");
  j["per_layer_config"]["2"]["num_key_value_heads"] = 3;
  expect_refused(j, ErrorKind::kBadInput, "num_key_value_heads");
}

TEST(Gemma4Config, TopKBeyondExpertsRefused) {
  auto j = fixture_config("gemma4_text_moe");
  j["top_k_experts"] = 9;
  expect_refused(j, ErrorKind::kBadInput, "top_k_experts");
}

TEST(Gemma4Config, OtherActivationRefused) {
  auto j = fixture_config("gemma4_text");
  j["hidden_activation"] = "relu";
  expect_refused(j, ErrorKind::kUnsupported, "hidden_activation");
}

TEST(Gemma4Config, ScaledRopeRefused) {
  auto j = fixture_config("gemma4_text");
  j["rope_parameters"]["full_attention"]["factor"] = 8.0;
  expect_refused(j, ErrorKind::kUnsupported, "factor");
}

TEST(Gemma4Config, UnknownRopeTypeRefused) {
  auto j = fixture_config("gemma4_text");
  j["rope_parameters"]["sliding_attention"]["rope_type"] = "yarn";
  expect_refused(j, ErrorKind::kUnsupported, "rope_type");
}

TEST(Gemma4Config, BidirectionalAttentionRefused) {
  auto j = fixture_config("gemma4_text");
  j["use_bidirectional_attention"] = "all";
  expect_refused(j, ErrorKind::kUnsupported, "use_bidirectional_attention");
}

}  // namespace
}  // namespace kestrel::test

namespace kestrel::test {
namespace {

// Sliding layers keep a ring of ceil(window / block) + 1 blocks per sequence, outside the pool.
TEST(Gemma4Config, SlidingLayersUseARingNotThePool) {
  ModelConfig c = parse_gemma4_config(fixture_config("gemma4_text"), "config.json");
  CacheCosts costs = cache_costs(c, 16);
  // only the two full layers (2 KV heads x 512) take pool blocks: K and V, fp32, 16 rows
  EXPECT_EQ(costs.bytes_per_block, uint64_t(2) * 2 * (2 * 512) * 4 * 16);
  EXPECT_EQ(ring_rows(16, 16), 32);
  // and each sequence's state slot holds the four sliding layers' rings (2 KV heads x 32, K and V)
  EXPECT_EQ(costs.bytes_per_slot, uint64_t(4) * 2 * (2 * 32) * 4 * 32);
  CpuOps ops;
  ModelCache cache(c, ops, {.n_blocks = 4, .block_size = 16, .n_slots = 3});
  EXPECT_EQ(cache.kv(0).ring_rows, 32);
  EXPECT_EQ(cache.kv(0).k.rows, 3 * 32);
  EXPECT_EQ(cache.kv(2).ring_rows, 0);
  EXPECT_EQ(cache.kv(2).k.rows, 4 * 16);
  EXPECT_TRUE(cache.needs_slots());

  ModelConfig kv = parse_gemma4_config(fixture_config("gemma4_text_kvshared"), "config.json");
  ModelCache shared(kv, ops, {.n_blocks = 4, .block_size = 16, .n_slots = 1});
  EXPECT_EQ(shared.kv(4).k.data, shared.kv(3).k.data);  // layer 4 reads layer 3's ring
  EXPECT_EQ(shared.kv(5).k.data, shared.kv(2).k.data);  // layer 5 reads layer 2's blocks
}

}  // namespace
}  // namespace kestrel::test
