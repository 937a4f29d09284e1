// Malformed model directories: broken config.json values and checkpoints that do not hold what
// the model needs. Each gives an Error naming the file and the field or tensor at fault.
#include <gtest/gtest.h>

#include "backend/cpu/cpu_ops.h"
#include "engine/runner.h"
#include "malformed_support.h"
#include "model/loader.h"

namespace kestrel {
namespace {

using nlohmann::json;
using test::copy_fixture;
using test::drop_tensor;
using test::edit_config;
using test::edit_safetensors;
using test::expect_error;

void expect_load_error(const std::string& dir, std::initializer_list<std::string> needles) {
  CpuOps ops;
  expect_error([&] { load_model(dir, ops); }, needles);
}

void expect_config_error(const std::string& dir, std::initializer_list<std::string> needles) {
  expect_error([&] { load_config(dir); }, needles);
}

// ---- checkpoint contents vs the model ----------------------------------------------------------

TEST(LoaderMalformed, FixtureBaselineLoads) {
  CpuOps ops;
  LoadedModel lm = load_model(copy_fixture("qwen3", "loader-baseline"), ops);
  EXPECT_EQ(lm.config().n_layers, 4);
}

TEST(LoaderMalformed, MissingTensor) {
  const std::string dir = copy_fixture("qwen3", "loader-missing");
  edit_safetensors(path_join(dir, "model.safetensors"), [](json& h, std::string& d) {
    drop_tensor(h, d, "model.layers.2.mlp.up_proj.weight");
  });
  expect_load_error(dir, {dir, "tensor 'model.layers.2.mlp.up_proj.weight' is missing", "[256, 128]"});
}

TEST(LoaderMalformed, MissingTensorInAMultimodalCheckpoint) {
  const std::string dir = copy_fixture("qwen3_5", "loader-missing-mm");
  edit_safetensors(path_join(dir, "model.safetensors"), [](json& h, std::string& d) {
    drop_tensor(h, d, "model.language_model.layers.1.linear_attn.A_log");
  });
  expect_load_error(dir, {"tensor 'model.language_model.layers.1.linear_attn.A_log' is missing"});
}

TEST(LoaderMalformed, WrongTensorShape) {
  const std::string dir = copy_fixture("qwen3", "loader-shape");
  edit_safetensors(path_join(dir, "model.safetensors"), [](json& h, std::string&) {
    h["model.layers.0.self_attn.o_proj.weight"]["shape"] = {64, 256};  // same bytes, wrong shape
  });
  expect_load_error(dir, {"model.safetensors", "tensor 'model.layers.0.self_attn.o_proj.weight'",
                          "has shape [64, 256], expected [128, 128]"});
}

TEST(LoaderMalformed, WrongTensorDtype) {
  const std::string dir = copy_fixture("qwen3", "loader-dtype");
  edit_safetensors(path_join(dir, "model.safetensors"), [](json& h, std::string&) {
    auto& t = h["model.layers.1.self_attn.q_proj.weight"];  // BF16 [128, 128] -> I32 [64, 128], same bytes
    t["dtype"] = "I32";
    t["shape"] = {64, 128};
  });
  expect_load_error(dir, {"model.safetensors", "tensor 'model.layers.1.self_attn.q_proj.weight'", "has dtype I32"});
}

std::vector<float> first_logits(const std::string& dir) {
  CpuOps ops;
  LoadedModel lm = load_model(dir, ops);
  Runner runner(*lm.model, cpu_cache_sizing(lm.config(), 1, 16));
  SequenceState seq;
  runner.start(seq);
  std::vector<int32_t> tokens = {1, 2, 3};
  return runner.step({{.seq = &seq, .tokens = tokens, .all_logits = true}});
}

// Not malformed: safetensors does not require aligned tensors (writers that do not pad the header
// leave every tensor at an odd address). It must load, without misaligned reads, to the same model.
TEST(LoaderMalformed, UnalignedTensorDataStillLoads) {
  const std::string dir = copy_fixture("qwen3", "loader-unaligned");
  const std::string path = path_join(dir, "model.safetensors");
  json header;
  std::string data;
  test::split_safetensors(path, &header, &data);
  std::string text = header.dump();
  if ((8 + text.size()) % 2 == 0) text.push_back(' ');
  test::write_bytes(path, test::safetensors_bytes(text, data));
  EXPECT_EQ(first_logits(dir), first_logits(test::data_path("fixtures/qwen3")));
}

TEST(LoaderMalformed, MissingExpert) {
  const std::string dir = copy_fixture("qwen3_moe", "loader-expert");
  edit_safetensors(path_join(dir, "model.safetensors"), [](json& h, std::string& d) {
    drop_tensor(h, d, "model.layers.3.mlp.experts.5.down_proj.weight");
  });
  expect_load_error(dir, {"tensor 'model.layers.3.mlp.experts.5.down_proj.weight' is missing"});
}

TEST(LoaderMalformed, NoWeightsAtAll) {
  const std::string dir = copy_fixture("qwen3", "loader-noweights");
  std::filesystem::remove(path_join(dir, "model.safetensors"));
  expect_load_error(dir, {dir, "no model.safetensors"});
}

// ---- config.json ----------------------------------------------------------------------------

TEST(ConfigMalformed, MissingConfigJson) {
  const std::string dir = copy_fixture("qwen3", "config-missing");
  std::filesystem::remove(path_join(dir, "config.json"));
  expect_config_error(dir, {dir, "no config.json"});
}

TEST(ConfigMalformed, NotADirectory) {
  expect_config_error(test::work_path("malformed/does-not-exist"), {"does-not-exist", "not a model directory"});
}

TEST(ConfigMalformed, ConfigNotJson) {
  const std::string dir = copy_fixture("qwen3", "config-notjson");
  test::write_bytes(path_join(dir, "config.json"), "{\"model_type\": \"qwen3\",");
  expect_config_error(dir, {"config.json", "not valid JSON"});
}

TEST(ConfigMalformed, ConfigNotAnObject) {
  const std::string dir = copy_fixture("qwen3", "config-array");
  test::write_bytes(path_join(dir, "config.json"), "[\"qwen3\"]");
  expect_config_error(dir, {"config.json", "expected a JSON object"});
}

TEST(ConfigMalformed, UnknownModelType) {
  const std::string dir = copy_fixture("qwen3", "config-type");
  edit_config(dir, [](json& c) { c["model_type"] = "llama9"; });
  expect_config_error(dir, {"config.json", "model_type 'llama9' is not supported", "qwen3_5"});
}

TEST(ConfigMalformed, MissingModelType) {
  const std::string dir = copy_fixture("qwen3", "config-notype");
  edit_config(dir, [](json& c) { c.erase("model_type"); });
  expect_config_error(dir, {"config.json", "'model_type'"});
}

TEST(ConfigMalformed, HiddenSizeZero) {
  const std::string dir = copy_fixture("qwen3", "config-hidden0");
  edit_config(dir, [](json& c) { c["hidden_size"] = 0; });
  expect_config_error(dir, {"config.json", "field 'hidden_size'", "out of range"});
}

TEST(ConfigMalformed, HiddenSizeNotANumber) {
  const std::string dir = copy_fixture("qwen3", "config-hidden-str");
  edit_config(dir, [](json& c) { c["hidden_size"] = "128"; });
  expect_config_error(dir, {"config.json", "field 'hidden_size'", "must be an integer"});
}

TEST(ConfigMalformed, BillionLayers) {
  const std::string dir = copy_fixture("qwen3", "config-layers");
  edit_config(dir, [](json& c) {
    c["num_hidden_layers"] = 1000000000;
    c.erase("layer_types");
  });
  expect_config_error(dir, {"config.json", "field 'num_hidden_layers'", "out of range"});
}

TEST(ConfigMalformed, HeadCountsDoNotDivide) {
  const std::string dir = copy_fixture("qwen3", "config-heads");
  edit_config(dir, [](json& c) { c["num_key_value_heads"] = 3; });
  expect_config_error(dir, {"config.json", "num_attention_heads", "not a multiple of num_key_value_heads = 3"});
}

TEST(ConfigMalformed, DeltaNetHeadCountsDoNotDivide) {
  const std::string dir = copy_fixture("qwen3_next", "config-gdn-heads");
  edit_config(dir, [](json& c) { c["linear_num_value_heads"] = 3; });
  expect_config_error(dir, {"config.json", "linear_num_value_heads", "not a multiple of linear_num_key_heads"});
}

TEST(ConfigMalformed, LayerTypesLengthMismatch) {
  const std::string dir = copy_fixture("qwen3_5", "config-lt-len");
  edit_config(dir, [](json& c) { c["text_config"]["layer_types"].erase(0); });
  expect_config_error(dir, {"config.json: text_config", "field 'layer_types'", "one type per layer (4)"});
}

TEST(ConfigMalformed, UnknownLayerType) {
  const std::string dir = copy_fixture("qwen3_5", "config-lt-kind");
  edit_config(dir, [](json& c) { c["text_config"]["layer_types"][2] = "mamba2"; });
  expect_config_error(dir, {"config.json: text_config", "layer_types", "[2] = 'mamba2'"});
}

TEST(ConfigMalformed, TopKAboveExpertCount) {
  const std::string dir = copy_fixture("qwen3_5_moe", "config-topk");
  edit_config(dir, [](json& c) { c["text_config"]["num_experts_per_tok"] = 9; });
  expect_config_error(dir, {"config.json: text_config", "num_experts_per_tok", "exceeds the number of experts 8"});
}

TEST(ConfigMalformed, VocabZero) {
  const std::string dir = copy_fixture("qwen3", "config-vocab0");
  edit_config(dir, [](json& c) { c["vocab_size"] = 0; });
  expect_config_error(dir, {"config.json", "field 'vocab_size'", "out of range"});
}

TEST(ConfigMalformed, NegativeHeadDim) {
  const std::string dir = copy_fixture("qwen3", "config-headdim");
  edit_config(dir, [](json& c) { c["head_dim"] = -32; });
  expect_config_error(dir, {"config.json", "field 'head_dim'"});
}

TEST(ConfigMalformed, UnsupportedRopeType) {
  const std::string dir = copy_fixture("qwen3", "config-rope");
  edit_config(dir, [](json& c) { c["rope_parameters"]["rope_type"] = "yarn"; });
  expect_config_error(dir, {"config.json", "rope_type", "'yarn' is not supported"});
}

TEST(ConfigMalformed, MropeSectionDoesNotMatchRotaryDim) {
  const std::string dir = copy_fixture("qwen3_5", "config-mrope");
  edit_config(dir, [](json& c) { c["text_config"]["rope_parameters"]["mrope_section"] = {11, 11, 10}; });
  expect_config_error(dir, {"config.json: text_config", "mrope_section", "sums to 32"});
}

TEST(ConfigMalformed, MropeSectionHugeEntries) {  // would overflow the sum (UBSan) before the fix
  const std::string dir = copy_fixture("qwen3_5", "config-mrope-huge");
  edit_config(dir, [](json& c) {
    c["text_config"]["rope_parameters"]["mrope_section"] = {int64_t(9e18), int64_t(9e18), 4};
  });
  expect_config_error(dir, {"config.json: text_config", "mrope_section", "[0, 1024]"});
}

TEST(ConfigMalformed, TextConfigNotAnObject) {
  const std::string dir = copy_fixture("qwen3_5", "config-textcfg");
  edit_config(dir, [](json& c) { c["text_config"] = "qwen3_5_text"; });
  expect_config_error(dir, {"config.json: text_config", "expected a JSON object"});
}

TEST(ConfigMalformed, EosOutsideVocabulary) {
  const std::string dir = copy_fixture("qwen3", "config-eos");
  edit_config(dir, [](json& c) { c["eos_token_id"] = 100000; });
  expect_config_error(dir, {"config.json", "eos_token_id", "outside the vocabulary"});
}

TEST(ConfigMalformed, GenerationConfigEosOutsideVocabulary) {
  const std::string dir = copy_fixture("qwen3", "config-geneos");
  test::write_bytes(path_join(dir, "generation_config.json"), "{\"eos_token_id\": [1, 99999]}");
  expect_config_error(dir, {"generation_config.json", "eos_token_id 99999"});
}

TEST(ConfigMalformed, UnsupportedActivation) {
  const std::string dir = copy_fixture("qwen3", "config-act");
  edit_config(dir, [](json& c) { c["hidden_act"] = "gelu"; });
  expect_config_error(dir, {"config.json", "hidden_act", "'gelu' is not supported"});
}

TEST(ConfigMalformed, MlpOnlyLayerOutOfRange) {
  const std::string dir = copy_fixture("qwen3_next", "config-mlponly");
  edit_config(dir, [](json& c) { c["mlp_only_layers"] = {7}; });
  expect_config_error(dir, {"config.json", "mlp_only_layers", "not a layer index"});
}

}  // namespace
}  // namespace kestrel
