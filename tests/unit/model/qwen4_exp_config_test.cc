// Qwen4-Exp config validation (the invariants transformers' configuration enforces, refused by
// name) and the n-gram hashing derived from the config.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/arch/qwen4_exp.h"
#include "support/paths.h"

namespace kestrel::test {
namespace {

nlohmann::json fixture_config() {
  std::ifstream in(data_path("fixtures/qwen4_exp/config.json"));
  return nlohmann::json::parse(in);
}

void expect_refused(const nlohmann::json& j, ErrorKind kind, const std::string& field) {
  try {
    parse_qwen4_exp_config(j, "config.json");
    ADD_FAILURE() << "accepted a config that should be refused for '" << field << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
  }
}

TEST(Qwen4ExpConfig, FixtureParses) {
  ModelConfig c = parse_qwen4_exp_config(fixture_config(), "config.json");
  EXPECT_EQ(c.weight_prefix, "model.language_model.");
  EXPECT_EQ(c.q4.hc_count, 4);
  EXPECT_EQ(c.q4.ple_index, (std::vector<int>{-1, 0, 1, -1}));  // one-indexed ids 2, 3
  EXPECT_EQ(c.layer_attn[3].index_key_dim, 32);
  EXPECT_EQ(c.attn.rope.rotary_dim, 16);
  EXPECT_EQ(c.token_context, 2);
}

TEST(Qwen4ExpConfig, NgramTablesArePrimesAfterTheBase) {
  ModelConfig c = parse_qwen4_exp_config(fixture_config(), "config.json");
  NgramHash h0 = ngram_hash(c, 0), h1 = ngram_hash(c, 1);
  EXPECT_EQ(h0.head_sizes, (std::vector<int64_t>{1009, 1013, 1019, 1021, 1031, 1033, 1039, 1049}));
  EXPECT_EQ(h1.head_sizes.front(), 1051);
  EXPECT_EQ(h0.padded_rows, 8216);  // 8214 rounded up to a multiple of 8
  EXPECT_EQ(h1.padded_rows, 8616);
  for (int64_t m : h0.multipliers) EXPECT_EQ(m % 2, 1);
}

TEST(Qwen4ExpConfig, NgramsDoNotReachAcrossEos) {
  ModelConfig c = parse_qwen4_exp_config(fixture_config(), "config.json");
  NgramHash h = ngram_hash(c, 0);
  const int eos = c.q4.eos;
  const int heads = c.q4.ngram_heads();
  // "5 eos 7": the n-grams of 7 only see eos before it, exactly as at the start of a sequence
  std::vector<int32_t> ctx = {eos, eos};
  std::vector<int32_t> a(size_t(3 * heads), 0), b(size_t(heads), 0);
  const int32_t toks[3] = {5, eos, 7}, fresh[1] = {7};
  ngram_ids(c, h, ctx.data(), toks, 3, a.data());
  ngram_ids(c, h, ctx.data(), fresh, 1, b.data());
  EXPECT_EQ(std::vector<int32_t>(a.begin() + 2 * heads, a.end()), b);
}

TEST(Qwen4ExpConfig, BudgetNotDivisibleByCompressRatioRefused) {
  auto j = fixture_config();
  j["text_config"]["indexer_budget"] = 18;
  expect_refused(j, ErrorKind::kBadInput, "indexer_budget");
}

TEST(Qwen4ExpConfig, SeveralIndexerKeyHeadsRefused) {
  auto j = fixture_config();
  j["text_config"]["indexer_kv_heads"] = 2;
  expect_refused(j, ErrorKind::kUnsupported, "indexer_kv_heads");
}

TEST(Qwen4ExpConfig, MissingIndexerFieldRefused) {
  auto j = fixture_config();
  j["text_config"].erase("indexer_compress_ratio");
  expect_refused(j, ErrorKind::kBadInput, "indexer_compress_ratio");
}

TEST(Qwen4ExpConfig, IndexerHeadSmallerThanRotaryRefused) {
  auto j = fixture_config();
  j["text_config"]["indexer_head_dim"] = 8;
  expect_refused(j, ErrorKind::kBadInput, "indexer_head_dim");
}

TEST(Qwen4ExpConfig, PleLayerOutOfRangeRefused) {
  auto j = fixture_config();
  j["text_config"]["ple_layer_ids"] = {0, 2};  // one-indexed: 0 is not a layer
  expect_refused(j, ErrorKind::kBadInput, "ple_layer_ids");
}

TEST(Qwen4ExpConfig, PleOnAttentionLayerRefused) {
  auto j = fixture_config();
  j["text_config"]["ple_layer_ids"] = {4};
  expect_refused(j, ErrorKind::kBadInput, "ple_layer_ids");
}

TEST(Qwen4ExpConfig, PleEmbedDimNotDivisibleRefused) {
  auto j = fixture_config();
  j["text_config"]["ple_embed_dim"] = 100;
  expect_refused(j, ErrorKind::kBadInput, "ple_embed_dim");
}

TEST(Qwen4ExpConfig, PleWithoutEosRefused) {
  auto j = fixture_config();
  j["text_config"]["eos_token_id"] = nullptr;
  expect_refused(j, ErrorKind::kBadInput, "eos_token_id");
}

TEST(Qwen4ExpConfig, SingleStreamRefused) {
  auto j = fixture_config();
  j["text_config"]["hc_count"] = 1;
  expect_refused(j, ErrorKind::kBadInput, "hc_count");
}

TEST(Qwen4ExpConfig, UnknownOutputGateRefused) {
  auto j = fixture_config();
  j["text_config"]["output_gate_type"] = "tanh";
  expect_refused(j, ErrorKind::kUnsupported, "output_gate_type");
}

TEST(Qwen4ExpConfig, SigmoidOutputGateAccepted) {
  auto j = fixture_config();
  j["text_config"]["output_gate_type"] = "sigmoid";
  EXPECT_EQ(parse_qwen4_exp_config(j, "config.json").gdn.gate_act, Activation::kSigmoid);
}

TEST(Qwen4ExpConfig, LayerTypesMustMatchLayerCount) {
  auto j = fixture_config();
  j["text_config"]["num_hidden_layers"] = 5;
  expect_refused(j, ErrorKind::kBadInput, "layer_types");
}

TEST(Qwen4ExpConfig, TopKBeyondExpertsRefused) {
  auto j = fixture_config();
  j["text_config"]["num_experts_per_tok"] = 9;
  expect_refused(j, ErrorKind::kBadInput, "num_experts_per_tok");
}

}  // namespace
}  // namespace kestrel::test
