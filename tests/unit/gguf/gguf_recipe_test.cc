// llama.cpp's mixed K-quant recipes in kestrel convert: the type chosen for every tensor of
// released model shapes (the layouts of presets, no weights needed), and end to end on a fixture.
// The expected types are spelled out from llama.cpp's rules (docs/gguf.md), not computed by the
// code under test.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <set>

#include "backend/cpu/cpu_ops.h"
#include "convert/gguf_names.h"
#include "convert/hf_to_gguf.h"
#include "convert/quant_recipe.h"
#include "core/error.h"
#include "engine/parity.h"
#include "io/gguf.h"
#include "model/loader.h"
#include "model/presets.h"
#include "model/registry.h"
#include "support/paths.h"

namespace kestrel {
namespace {

using test::data_path;
using test::work_path;

ModelConfig preset(const std::string& name) {
  const ModelPreset& p = find_preset(name);
  const nlohmann::json c = preset_config(p, 0);
  return find_architecture(preset_model_type(p.family))->parse_config(c, name);
}

// Every tensor's recipe type, by GGUF name.
std::map<std::string, GgmlType> recipe(const ModelConfig& cfg, QuantRecipe r) {
  const GgufLayout layout = gguf_layout(cfg, [](const std::string&, const std::string&) { return true; });
  std::vector<RecipeTensor> ts;
  for (const GgufTensorPlan& p : layout.tensors)
    ts.push_back({p.name, p.shape, p.keep_f32 ? GgmlType::kF32 : GgmlType::kBF16});
  const std::vector<GgmlType> types = quant_recipe_types(r, ts, cfg.has_moe() ? cfg.moe.n_experts : 0, cfg.n_layers);
  std::map<std::string, GgmlType> out;
  for (size_t i = 0; i < ts.size(); ++i) out[ts[i].name] = types[i];
  return out;
}

std::string blk(int l, const std::string& t) { return "blk." + std::to_string(l) + "." + t + ".weight"; }

// Checks every tensor: `special` by name, norms/1-D/routers/conv F32, the rest `base`.
void expect_types(const std::map<std::string, GgmlType>& got, const std::map<std::string, GgmlType>& special,
                  GgmlType base, const std::set<std::string>& keep_bf16 = {}) {
  for (const auto& [name, type] : got) {
    SCOPED_TRACE(name);
    if (auto it = special.find(name); it != special.end()) {
      EXPECT_EQ(type, it->second);
    } else if (keep_bf16.count(name)) {
      EXPECT_EQ(type, GgmlType::kBF16);
    } else if (name.find("norm") != std::string::npos || (name.size() > 6 && name.compare(name.size() - 6, 6, ".ssm_a") == 0) ||
               name.find("ssm_dt") != std::string::npos || name.find("ssm_conv1d") != std::string::npos ||
               name.find("ffn_gate_inp") != std::string::npos || name.find(".scale") != std::string::npos ||
               name == "rope_freqs.weight" || name.find("layer_output_scale") != std::string::npos) {
      EXPECT_EQ(type, GgmlType::kF32);
    } else {
      EXPECT_EQ(type, base);
    }
  }
}

// use_more_bits(i, n) for n = 24: the first and last eighth and every third layer in between.
const std::set<int> kMoreBits24 = {0, 1, 2, 5, 8, 11, 14, 17, 20, 21, 22, 23};

TEST(GgufRecipe, Qwen35DenseTied) {
  const ModelConfig cfg = preset("Qwen3.5-0.8B");  // 24 layers, 3 linear : 1 full, tied embeddings
  ASSERT_EQ(cfg.n_layers, 24);
  ASSERT_TRUE(cfg.tie_embeddings);
  for (QuantRecipe r : {QuantRecipe::kQ4_K_M, QuantRecipe::kQ5_K_M, QuantRecipe::kQ4_K_S, QuantRecipe::kQ6_K}) {
    SCOPED_TRACE(quant_recipe_name(r));
    const GgmlType base = r == QuantRecipe::kQ5_K_M ? GgmlType::kQ5_K : r == QuantRecipe::kQ6_K ? GgmlType::kQ6_K : GgmlType::kQ4_K;
    std::map<std::string, GgmlType> special = {{"token_embd.weight", GgmlType::kQ6_K}};  // tied: the output's type
    for (int l = 0; l < 24; ++l) {
      // every layer has one attn_v-like tensor: attn_qkv (DeltaNet) or attn_v (full attention)
      const std::string v = blk(l, (l + 1) % 4 == 0 ? "attn_v" : "attn_qkv");
      const bool more = kMoreBits24.count(l) > 0;
      if (r == QuantRecipe::kQ4_K_M || r == QuantRecipe::kQ5_K_M) {
        special[v] = more ? GgmlType::kQ6_K : base;
        special[blk(l, "ffn_down")] = more ? GgmlType::kQ6_K : base;
      } else if (r == QuantRecipe::kQ4_K_S) {
        special[v] = l < 4 ? GgmlType::kQ5_K : base;
        special[blk(l, "ffn_down")] = l < 3 ? GgmlType::kQ5_K : base;  // first eighth of 24
      }
    }
    expect_types(recipe(cfg, r), special, base);
  }
}

TEST(GgufRecipe, Qwen35MoeUntied) {
  const ModelConfig cfg = preset("Qwen3.5-35B-A3B");  // 40 layers, 256 experts, untied
  ASSERT_EQ(cfg.n_layers, 40);
  ASSERT_FALSE(cfg.tie_embeddings);
  // use_more_bits(l, 40): l < 5, l >= 35, or (l - 5) % 3 == 2
  auto more = [](int l) { return l < 5 || l >= 35 || (l - 5) % 3 == 2; };
  std::map<std::string, GgmlType> special = {{"output.weight", GgmlType::kQ6_K}, {"token_embd.weight", GgmlType::kQ4_K}};
  for (int l = 0; l < 40; ++l) {
    const GgmlType t = more(l) ? GgmlType::kQ6_K : GgmlType::kQ4_K;
    special[blk(l, (l + 1) % 4 == 0 ? "attn_v" : "attn_qkv")] = t;
    special[blk(l, "ffn_down_exps")] = t;   // every ffn_down* of the layer, by the layer in its name
    special[blk(l, "ffn_down_shexp")] = t;
  }
  expect_types(recipe(cfg, QuantRecipe::kQ4_K_M), special, GgmlType::kQ4_K);
}

TEST(GgufRecipe, Gemma4KvSharedLayersAreNotCounted) {
  const ModelConfig cfg = preset("Gemma4-E2B");  // 35 layers, the last 20 KV-shared, tied, PLE 256
  ASSERT_EQ(cfg.n_layers, 35);
  // attn_v exists on the 15 layers with their own K/V: use_more_bits(i, 15) over their index i:
  // i < 1, i >= 13, or (i - 1) % 3 == 2.
  const std::set<int> v_more = {0, 3, 6, 9, 12, 13, 14};
  // ffn_down on every layer (dense: counted in order): use_more_bits(l, 35): l < 4, l >= 30, or (l - 4) % 3 == 2.
  auto more = [](int l) { return l < 4 || l >= 30 || (l - 4) % 3 == 2; };
  std::map<std::string, GgmlType> special = {{"token_embd.weight", GgmlType::kQ6_K},
                                             {"per_layer_token_embd.weight", GgmlType::kQ6_K}};
  for (int l = 0; l < 35; ++l) {
    if (l < 15) special[blk(l, "attn_v")] = v_more.count(l) ? GgmlType::kQ6_K : GgmlType::kQ4_K;
    special[blk(l, "ffn_down")] = more(l) ? GgmlType::kQ6_K : GgmlType::kQ4_K;
  }
  const auto got = recipe(cfg, QuantRecipe::kQ4_K_M);
  EXPECT_EQ(got.count(blk(20, "attn_v")), 0u);
  expect_types(got, special, GgmlType::kQ4_K, {"per_layer_model_proj.weight"});  // llama-quantize leaves it alone
}

// Exactly 8 experts: llama.cpp gives attn_v, attn_qkv and attn_k Q8_0 and, for Q4_K_M, attn_output Q5_K.
TEST(GgufRecipe, EightExperts) {
  std::vector<RecipeTensor> ts = {
      {"blk.0.attn_qkv.weight", {1024, 512}, GgmlType::kBF16}, {"blk.3.attn_v.weight", {256, 512}, GgmlType::kBF16},
      {"blk.3.attn_k.weight", {256, 512}, GgmlType::kBF16},    {"blk.3.attn_output.weight", {512, 1024}, GgmlType::kBF16},
      {"blk.3.attn_q.weight", {2048, 512}, GgmlType::kBF16},   {"blk.3.ffn_down_exps.weight", {8, 512, 256}, GgmlType::kBF16},
      {"output.weight", {1000, 512}, GgmlType::kBF16},         {"token_embd.weight", {1000, 512}, GgmlType::kBF16},
      {"blk.3.ffn_gate_inp.weight", {8, 512}, GgmlType::kF32}, {"blk.3.ffn_gate_inp_shexp.weight", {1, 512}, GgmlType::kF32},
      {"blk.3.attn_gate.weight", {512, 100}, GgmlType::kBF16},
  };
  const std::vector<GgmlType> got = quant_recipe_types(QuantRecipe::kQ4_K_M, ts, 8, 4);
  const std::vector<GgmlType> want = {GgmlType::kQ8_0, GgmlType::kQ8_0, GgmlType::kQ8_0, GgmlType::kQ5_K,
                                      GgmlType::kQ4_K, GgmlType::kQ6_K,  // layer 3 of 4 is in the last eighth
                                      GgmlType::kQ6_K, GgmlType::kQ4_K,  // untied: token_embd keeps Q4_K
                                      GgmlType::kF32,  GgmlType::kF32,
                                      GgmlType::kF16};  // rows of 100: neither Q4_K nor its Q5_0 fallback fits
  EXPECT_EQ(got, want);
}

// End to end on the qwen3_5 fixture (hidden 128, 4 layers: use_more_bits(l, 4) holds for layers
// 2 and 3): whole 256-blocks only in ffn_down and attn_output rows, so the rest takes llama.cpp's
// fallbacks (Q6_K -> Q8_0, Q4_K -> Q5_0). The files load and stay near transformers.
TEST(GgufRecipe, ConvertOnFixture) {
  const std::string ref = data_path("fixtures/qwen3_5/reference.safetensors");
  {
    const std::string out = work_path("recipe-qwen3_5-q6_k.gguf");
    const ConvertReport r = convert_hf_to_gguf(
        {.model_dir = data_path("fixtures/qwen3_5"), .output = out, .recipe = QuantRecipe::kQ6_K, .progress = false});
    const GgufFile f = GgufFile::open(out);
    EXPECT_EQ(f.get_int("general.file_type"), 18);
    EXPECT_EQ(f.find_tensor("blk.0.ffn_down.weight")->type, GgmlType::kQ6_K);
    EXPECT_EQ(f.find_tensor("blk.0.attn_qkv.weight")->type, GgmlType::kQ8_0);
    EXPECT_EQ(f.find_tensor("output.weight")->type, GgmlType::kQ8_0);
    EXPECT_EQ(f.find_tensor("blk.0.ssm_conv1d.weight")->type, GgmlType::kF32);
    EXPECT_EQ(f.find_tensor("blk.3.attn_output.weight")->type, GgmlType::kQ6_K);  // [128, 256]
    EXPECT_EQ(r.tensors_by_type.at(GgmlType::kQ6_K), 5u);                          // 4 ffn_down + that one
    CpuOps ops;
    LoadedModel lm = load_model(out, ops);
    const ParityReport p = run_parity(*lm.model, ref, {});
    ASSERT_EQ(p.prompts.size(), 5u);
    EXPECT_LE(p.prompts[0].rel_err, 0.4);  // measured 0.092 at one token (docs/gguf.md)
  }
  {
    const std::string out = work_path("recipe-qwen3_5-q4_k_m.gguf");
    convert_hf_to_gguf(
        {.model_dir = data_path("fixtures/qwen3_5"), .output = out, .recipe = QuantRecipe::kQ4_K_M, .progress = false});
    const GgufFile f = GgufFile::open(out);
    EXPECT_EQ(f.get_int("general.file_type"), 15);
    EXPECT_EQ(f.find_tensor("token_embd.weight")->type, GgmlType::kQ5_0);   // untied: Q4_K, rows of 128
    EXPECT_EQ(f.find_tensor("output.weight")->type, GgmlType::kQ8_0);
    EXPECT_EQ(f.find_tensor("blk.0.ffn_down.weight")->type, GgmlType::kQ4_K);
    EXPECT_EQ(f.find_tensor("blk.2.ffn_down.weight")->type, GgmlType::kQ6_K);
    EXPECT_EQ(f.find_tensor("blk.1.attn_qkv.weight")->type, GgmlType::kQ5_0);
    EXPECT_EQ(f.find_tensor("blk.2.attn_qkv.weight")->type, GgmlType::kQ8_0);  // Q6_K's fallback
    EXPECT_EQ(f.find_tensor("blk.3.attn_v.weight")->type, GgmlType::kQ8_0);
    EXPECT_EQ(f.find_tensor("blk.3.attn_output.weight")->type, GgmlType::kQ4_K);
    CpuOps ops;
    LoadedModel lm = load_model(out, ops);
    const ParityReport p = run_parity(*lm.model, ref, {});
    ASSERT_EQ(p.prompts.size(), 5u);
    EXPECT_LE(p.prompts[0].rel_err, 0.8);
    for (const auto& pp : p.prompts) EXPECT_TRUE(std::isfinite(pp.rel_err));
  }
}

// llama.cpp's pipeline, convert to bf16 and then quantize with a recipe (kestrel quantize --recipe),
// gives the same file as converting with the recipe in one pass.
TEST(GgufRecipe, QuantizeCommandEqualsConvert) {
  const std::string bf16 = work_path("recipe-qwen3_5_moe-bf16.gguf"), two = work_path("recipe-two-pass.gguf"),
                    one = work_path("recipe-one-pass.gguf");
  convert_hf_to_gguf({.model_dir = data_path("fixtures/qwen3_5_moe"), .output = bf16, .progress = false});
  convert_hf_to_gguf(
      {.model_dir = data_path("fixtures/qwen3_5_moe"), .output = one, .recipe = QuantRecipe::kQ6_K, .progress = false});
  const std::string cmd = test::kestrel_binary() + " quantize -i " + bf16 + " -o " + two + " --recipe q6_k 2>/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const GgufFile a = GgufFile::open(one), b = GgufFile::open(two);
  EXPECT_EQ(b.get_int("general.file_type"), 18);
  ASSERT_EQ(a.tensors().size(), b.tensors().size());
  for (const GgufTensor& t : a.tensors()) {
    SCOPED_TRACE(t.name);
    const GgufTensor* u = b.find_tensor(t.name);
    ASSERT_NE(u, nullptr);
    EXPECT_EQ(u->type, t.type);
    ASSERT_EQ(u->nbytes, t.nbytes);
    EXPECT_EQ(0, std::memcmp(u->data, t.data, t.nbytes));
  }
  // 8 experts: attn_v, attn_qkv and attn_k are Q8_0 under every recipe.
  EXPECT_EQ(a.find_tensor("blk.3.attn_k.weight")->type, GgmlType::kQ8_0);
  EXPECT_EQ(a.find_tensor("blk.0.attn_qkv.weight")->type, GgmlType::kQ8_0);
}

}  // namespace
}  // namespace kestrel
