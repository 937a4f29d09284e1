// quant-quality: a model against itself (or its bf16 GGUF) drifts by exactly nothing; its q8_0
// GGUF drifts a little, with the two top-1 tokens mostly agreeing; bad input is refused by name.
#include <gtest/gtest.h>

#include "backend/cpu/cpu_ops.h"
#include "convert/hf_to_gguf.h"
#include "core/error.h"
#include "engine/quant_quality.h"
#include "support/fixture_model.h"

namespace kestrel {
namespace {

std::vector<int32_t> text_tokens() {
  std::vector<int32_t> t;
  for (int p = 2; p < 5; ++p) {
    auto ids = test::reference_prompt("qwen3", p);
    t.insert(t.end(), ids.begin(), ids.end());
  }
  return t;  // 437 tokens
}

TEST(QuantQuality, IdenticalModelsDoNotDrift) {
  test::FixtureModel a("qwen3"), b("qwen3");
  const QuantQuality q = measure_quant_quality(a.model(), b.model(), text_tokens(), {.ctx = 128, .max_tokens = 437});
  EXPECT_EQ(q.windows, 4);
  EXPECT_EQ(q.positions, 127 * 3 + 52);
  EXPECT_EQ(q.kl_mean, 0.0);
  EXPECT_EQ(q.kl_max, 0.0);
  EXPECT_EQ(q.top1_agreement, 1.0);
  EXPECT_EQ(q.ppl_source, q.ppl_quant);
  EXPECT_GT(q.ppl_source, 1.0);
}

TEST(QuantQuality, Q8GgufDriftsALittle) {
  const std::string src = test::data_path("fixtures/qwen3");
  for (const char* type : {"bf16", "q8_0"}) {
    SCOPED_TRACE(type);
    ConvertOptions o;
    o.model_dir = src;
    o.output = test::work_path(std::string("qq-qwen3-") + type + ".gguf");
    o.progress = false;
    ASSERT_TRUE(ggml_type_from_name(type, &o.type));
    convert_hf_to_gguf(o);
    CpuOps ops;
    LoadedModel quant = load_model(o.output, ops);
    test::FixtureModel source("qwen3");
    const QuantQuality q = measure_quant_quality(*quant.model, source.model(), text_tokens(), {.ctx = 256});
    if (std::string(type) == "bf16") {
      EXPECT_EQ(q.kl_max, 0.0) << "bf16 GGUF holds the same weights";
      EXPECT_EQ(q.top1_agreement, 1.0);
    } else {
      EXPECT_GT(q.kl_mean, 0.0);
      EXPECT_LT(q.kl_mean, 1e-2);
      EXPECT_GT(q.top1_agreement, 0.9);
      EXPECT_LE(q.kl_p90, q.kl_p99);
      EXPECT_LE(q.kl_p99, q.kl_max);
      EXPECT_NEAR(q.ppl_quant / q.ppl_source, 1.0, 0.05);
    }
  }
}

TEST(QuantQuality, RefusesBadInput) {
  test::FixtureModel a("qwen3"), b("qwen3");
  auto refused = [&](const std::vector<int32_t>& t, QuantQualityOptions o, const char* says) {
    try {
      measure_quant_quality(a.model(), b.model(), t, o);
      ADD_FAILURE() << "accepted (" << says << ")";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  refused({5}, {}, "at least 2 are needed");
  refused({5, 9999}, {}, "outside the vocabulary");
  refused({5, 6, 7}, {.ctx = 1}, "--ctx");
}

}  // namespace
}  // namespace kestrel
