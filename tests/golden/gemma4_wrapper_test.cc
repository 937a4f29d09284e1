// The multimodal gemma4 wrapper (Gemma4ForConditionalGeneration): the text model's weights under
// model.language_model.*, its config under text_config. Rewrites the gemma4_text fixture in that
// form (plus a stray vision tensor the text model must skip) and expects bit-identical logits.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "golden/model_invariants.h"
#include "io/safetensors.h"

namespace kestrel::test {
namespace {

std::string make_wrapped_gemma4(const std::string& family) {
  const std::string src = data_path("fixtures/" + family), dst = work_path(family + "_wrapped");
  std::filesystem::create_directories(dst);
  nlohmann::json text;
  std::ifstream(src + "/config.json") >> text;
  nlohmann::json cfg = {{"model_type", "gemma4"}, {"architectures", {"Gemma4ForConditionalGeneration"}},
                        {"text_config", text}, {"tie_word_embeddings", true}};
  std::ofstream(dst + "/config.json") << cfg.dump(1);
  SafetensorsFile in = SafetensorsFile::open(src + "/model.safetensors");
  SafetensorsWriter out(dst + "/model.safetensors");
  std::vector<std::pair<std::string, const TensorInfo*>> order;
  for (const auto& [name, info] : in.tensors()) {
    std::string renamed = name.rfind("model.", 0) == 0 ? "model.language_model." + name.substr(6) : name;
    out.declare(renamed, info.dtype, info.shape);
    order.emplace_back(renamed, &info);
  }
  const float stray[2] = {1.0f, 2.0f};
  out.declare("model.vision_tower.stray.weight", DType::kF32, {2});
  out.begin();
  for (const auto& [name, info] : order) out.write_tensor(name, info->data, info->nbytes);
  out.write_tensor("model.vision_tower.stray.weight", stray, sizeof stray);
  out.finish();
  return dst;
}

std::vector<float> prompt_logits(Model& model, const std::vector<int32_t>& ids) {
  return chunked_logits(model, ids, {int(ids.size())});
}

TEST(Gemma4Golden, MultimodalWrapperMatchesTextModel) {
  const std::string dir = make_wrapped_gemma4("gemma4_text");
  FixtureModel text("gemma4_text");
  CpuOps ops;
  LoadedModel wrapped = load_model(dir, ops);
  EXPECT_EQ(wrapped.config().weight_prefix, "model.language_model.");
  auto ids = test_prompt(40, text.model().config().vocab_size);
  EXPECT_EQ(prompt_logits(*wrapped.model, ids), prompt_logits(text.model(), ids));
}

}  // namespace
}  // namespace kestrel::test
