// Model::weight_bytes_per_step, the bytes `kestrel bench` divides by the copy bandwidth: gather-only
// tables give the rows a step gathers, routed experts the expected touched share, the rest is read
// whole.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/files.h"
#include "support/fixture_model.h"

namespace kestrel {
namespace {

using test::FixtureModel;

// The text model's config of a fixture.
nlohmann::json text_config(const FixtureModel& f) {
  const nlohmann::json cfg = nlohmann::json::parse(read_file(f.dir + "/config.json"));
  return cfg.contains("text_config") ? cfg["text_config"] : cfg;
}

// Every fixture keeps its weights in BF16 on the CPU backend.
constexpr double kBf16 = 2.0;

// Bytes of every routed expert of a MoE config (each layer has them), and the share a step over
// `rows` rows is expected to touch.
double expert_bytes(const nlohmann::json& t) {
  const double H = t["hidden_size"], F = t["moe_intermediate_size"], E = t["num_experts"];
  return double(t["num_hidden_layers"]) * E * 3 * H * F * kBf16;
}
double touched(const nlohmann::json& t, int64_t rows) {
  const double E = t["num_experts"], k = t["num_experts_per_tok"];
  return 1.0 - std::pow(1.0 - k / E, double(rows));
}

TEST(WeightBytesPerStep, UntiedEmbeddingCountsOnlyTheRowsGathered) {
  FixtureModel f("qwen3_5");
  const Model& m = f.model();
  const nlohmann::json t = text_config(f);
  const double V = t["vocab_size"], H = t["hidden_size"];
  const double all = double(m.weight_bytes());
  EXPECT_DOUBLE_EQ(m.weight_bytes_per_step(1), all - V * H * kBf16 + H * kBf16);
  EXPECT_DOUBLE_EQ(m.weight_bytes_per_step(5), all - V * H * kBf16 + 5 * H * kBf16);
  // A step cannot gather more than the table.
  EXPECT_DOUBLE_EQ(m.weight_bytes_per_step(int64_t(V) * 4), all);
}

TEST(WeightBytesPerStep, TiedEmbeddingIsReadWholeByTheHead) {
  FixtureModel f("qwen3_5_tied");
  const Model& m = f.model();
  EXPECT_DOUBLE_EQ(m.weight_bytes_per_step(1), double(m.weight_bytes()));
  EXPECT_DOUBLE_EQ(m.weight_bytes_per_step(64), double(m.weight_bytes()));
}

TEST(WeightBytesPerStep, RoutedExpertsCountTheExpectedTouchedShare) {
  FixtureModel f("qwen3_5_moe");
  const Model& m = f.model();
  const nlohmann::json t = text_config(f);
  const double V = t["vocab_size"], H = t["hidden_size"];
  const double experts = expert_bytes(t);
  const double rest = double(m.weight_bytes()) - experts - V * H * kBf16;
  for (int64_t rows : {1, 2, 8}) {
    EXPECT_NEAR(m.weight_bytes_per_step(rows), rest + double(rows) * H * kBf16 + experts * touched(t, rows),
                1e-6 * experts)
        << rows << " rows";
  }
  EXPECT_NEAR(m.weight_bytes_per_step(1 << 20), double(m.weight_bytes()), 1e-9 * double(m.weight_bytes()));
}

TEST(WeightBytesPerStep, PerLayerEmbeddingsCountTheRowsGathered) {
  FixtureModel f("gemma4_text");  // tied token embedding; per-layer inputs [V_ple, L * P]
  const Model& m = f.model();
  const nlohmann::json t = text_config(f);
  const double V = t["vocab_size_per_layer_input"], P = t["hidden_size_per_layer_input"];
  const double L = t["num_hidden_layers"];
  const double all = double(m.weight_bytes());
  EXPECT_DOUBLE_EQ(m.weight_bytes_per_step(1), all - V * L * P * kBf16 + L * P * kBf16);
  EXPECT_DOUBLE_EQ(m.weight_bytes_per_step(3), all - V * L * P * kBf16 + 3 * L * P * kBf16);
}

TEST(WeightBytesPerStep, NgramTablesCountOneRowAHashHead) {
  FixtureModel f("qwen4_exp");  // untied token embedding; n-gram tables in its PLE layers
  const Model& m = f.model();
  const nlohmann::json t = text_config(f);
  const double H = t["hidden_size"];
  // A hash head's row is ple_embed_dim / heads wide, so a token reads ple_embed_dim values a layer.
  const double ple = t["ple_embed_dim"], ple_layers = double(t["ple_layer_ids"].size());
  const double per_row = H * kBf16 + ple_layers * ple * kBf16, experts = expert_bytes(t);
  for (int64_t rows : {2, 9}) {
    const double want = double(rows - 1) * per_row + experts * (touched(t, rows) - touched(t, 1));
    EXPECT_NEAR(m.weight_bytes_per_step(rows) - m.weight_bytes_per_step(1), want, 1e-6 * per_row) << rows << " rows";
  }
  EXPECT_NEAR(m.weight_bytes_per_step(1 << 24), double(m.weight_bytes()), 1e-9 * double(m.weight_bytes()));
}

}  // namespace
}  // namespace kestrel
