// kestrel convert on the fixture checkpoints: llama.cpp names, shapes, types and metadata, the
// bytes of every tensor traced back to the checkpoint, and refusals by name.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "convert/hf_to_gguf.h"
#include "core/error.h"
#include "core/files.h"
#include "io/gguf.h"
#include "io/safetensors.h"
#include "quant/quant.h"
#include "support/paths.h"

namespace kestrel {
namespace {

using test::data_path;
using test::work_path;

GgufFile convert(const std::string& fixture, GgmlType type, ConvertReport* report = nullptr) {
  ConvertOptions opts{.model_dir = data_path("fixtures/" + fixture),
                      .output = work_path(fixture + "-" + std::string(ggml_type_name(type)) + ".gguf"),
                      .type = type,
                      .progress = false};
  ConvertReport r = convert_hf_to_gguf(opts);
  if (report) *report = r;
  return GgufFile::open(opts.output);
}

// The stored bytes of `t` equal the checkpoint tensor converted row by row to t's type.
void expect_from_source(const GgufTensor& t, const TensorInfo& src, uint64_t offset = 0) {
  const int64_t n = src.shape.back(), rows = src.numel() / n;
  const GgmlType src_type = *dtype_to_ggml(src.dtype);
  std::vector<float> row(static_cast<size_t>(n));
  std::vector<uint8_t> expect(ggml_row_bytes(t.type, n) * uint64_t(rows));
  for (int64_t r = 0; r < rows; ++r) {
    quant::dequantize_row(src_type, src.data + uint64_t(r) * uint64_t(n) * dtype_size(src.dtype), n, row.data());
    quant::quantize_row(t.type, row.data(), n, expect.data() + uint64_t(r) * ggml_row_bytes(t.type, n));
  }
  ASSERT_LE(offset + expect.size(), t.nbytes) << t.name;
  EXPECT_EQ(0, std::memcmp(t.data + offset, expect.data(), expect.size())) << t.name << " from " << src.name;
}

TEST(GgufConvert, Qwen3DenseBf16AndQ8_0) {
  const Checkpoint ck = Checkpoint::open_dir(data_path("fixtures/qwen3"));
  for (GgmlType type : {GgmlType::kBF16, GgmlType::kQ8_0}) {
    SCOPED_TRACE(ggml_type_name(type));
    ConvertReport r;
    const GgufFile f = convert("qwen3", type, &r);
    EXPECT_EQ(f.get_string("general.architecture"), "qwen3");
    EXPECT_EQ(f.get_int("general.file_type"), type == GgmlType::kBF16 ? 32 : 7);
    const int64_t layers = f.get_int("qwen3.block_count");
    EXPECT_EQ(f.get_int("qwen3.embedding_length"), 128);
    EXPECT_EQ(f.get_int("qwen3.attention.head_count"), 4);
    EXPECT_EQ(f.get_int("qwen3.attention.key_length"), 32);
    EXPECT_NEAR(f.get_float("qwen3.attention.layer_norm_rms_epsilon"), 1e-6, 1e-12);
    EXPECT_EQ(int64_t(f.tensors().size()), 3 + 11 * layers);
    EXPECT_EQ(r.n_tensors, f.tensors().size());
    EXPECT_EQ(r.n_fallback, 0u);
    const GgufTensor* embd = f.find_tensor("token_embd.weight");
    ASSERT_NE(embd, nullptr);
    EXPECT_EQ(embd->type, type);
    EXPECT_EQ(embd->shape, (std::vector<int64_t>{512, 128}));
    expect_from_source(*embd, *ck.find("model.embed_tokens.weight"));
    expect_from_source(*f.find_tensor("output.weight"), *ck.find("lm_head.weight"));
    const GgufTensor* q = f.find_tensor("blk.1.attn_q.weight");
    ASSERT_NE(q, nullptr);
    expect_from_source(*q, *ck.find("model.layers.1.self_attn.q_proj.weight"));
    expect_from_source(*f.find_tensor("blk.1.ffn_down.weight"), *ck.find("model.layers.1.mlp.down_proj.weight"));
    const GgufTensor* norm = f.find_tensor("blk.1.attn_k_norm.weight");
    ASSERT_NE(norm, nullptr);
    EXPECT_EQ(norm->type, GgmlType::kF32);
    expect_from_source(*norm, *ck.find("model.layers.1.self_attn.k_norm.weight"));
    EXPECT_EQ(f.find_tensor("output_norm.weight")->type, GgmlType::kF32);
  }
}

TEST(GgufConvert, Qwen3MoeStacksExperts) {
  const Checkpoint ck = Checkpoint::open_dir(data_path("fixtures/qwen3_moe"));
  for (GgmlType type : {GgmlType::kBF16, GgmlType::kQ8_0}) {
    SCOPED_TRACE(ggml_type_name(type));
    const GgufFile f = convert("qwen3_moe", type);
    EXPECT_EQ(f.get_string("general.architecture"), "qwen3moe");
    EXPECT_EQ(f.get_int("qwen3moe.expert_count"), 8);
    EXPECT_EQ(f.get_int("qwen3moe.expert_used_count"), 3);
    EXPECT_EQ(f.get_int("qwen3moe.expert_feed_forward_length"), 64);
    const GgufTensor* router = f.find_tensor("blk.2.ffn_gate_inp.weight");
    ASSERT_NE(router, nullptr);
    EXPECT_EQ(router->type, GgmlType::kF32);
    const GgufTensor* down = f.find_tensor("blk.2.ffn_down_exps.weight");
    ASSERT_NE(down, nullptr);
    EXPECT_EQ(down->type, type);
    EXPECT_EQ(down->shape, (std::vector<int64_t>{8, 128, 64}));
    const uint64_t per_expert = down->nbytes / 8;
    for (int e = 0; e < 8; ++e)
      expect_from_source(*down, *ck.find("model.layers.2.mlp.experts." + std::to_string(e) + ".down_proj.weight"),
                         per_expert * uint64_t(e));
    EXPECT_EQ(f.find_tensor("blk.2.ffn_gate.weight"), nullptr);
  }
}

// A checkpoint directory with a tokenizer: tokens in id order padded to vocab_size, token
// types, merges from either JSON form, the chat template and the padding id.
TEST(GgufConvert, TokenizerMetadata) {
  namespace fs = std::filesystem;
  const std::string dir = work_path("qwen3_with_tokenizer");
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const char* f : {"config.json", "generation_config.json", "model.safetensors"})
    fs::copy_file(data_path(std::string("fixtures/qwen3/") + f), dir + "/" + f);
  nlohmann::json vocab = nlohmann::json::object();
  for (int i = 0; i < 500; ++i) vocab["t" + std::to_string(i)] = i;
  nlohmann::json tok = {
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array({"t1 t2", {"t3", "t4"}})}}},
      {"added_tokens",
       nlohmann::json::array({{{"id", 510}, {"content", "<|im_end|>"}, {"special", true}},
                              {{"id", 511}, {"content", "<tool>"}, {"special", false}}})}};
  write_file_atomic(dir + "/tokenizer.json", tok.dump());
  write_file_atomic(dir + "/tokenizer_config.json",
                    nlohmann::json({{"chat_template", "{{ messages }}"}, {"pad_token", "<|im_end|>"}}).dump());
  const std::string out = work_path("qwen3_with_tokenizer.gguf");
  const ConvertReport r = convert_hf_to_gguf({.model_dir = dir, .output = out, .type = GgmlType::kBF16, .progress = false});
  EXPECT_TRUE(r.has_tokenizer);
  const GgufFile f = GgufFile::open(out);
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(f.get_string("tokenizer.ggml.pre"), "qwen2");
  const auto& tokens = f.find("tokenizer.ggml.tokens")->strings();
  ASSERT_EQ(tokens.size(), 512u);
  EXPECT_EQ(tokens[7], "t7");
  EXPECT_EQ(tokens[505], "[PAD505]");
  EXPECT_EQ(tokens[510], "<|im_end|>");
  const GgufValue* types = f.find("tokenizer.ggml.token_type");
  EXPECT_EQ(*types->int_at(7), 1);
  EXPECT_EQ(*types->int_at(505), 4);
  EXPECT_EQ(*types->int_at(510), 3);
  EXPECT_EQ(*types->int_at(511), 4);
  EXPECT_EQ(f.find("tokenizer.ggml.merges")->strings(), (std::vector<std::string>{"t1 t2", "t3 t4"}));
  EXPECT_EQ(f.get_string("tokenizer.chat_template"), "{{ messages }}");
  EXPECT_EQ(f.get_int("tokenizer.ggml.padding_token_id"), 510);

  // A token id outside the model's vocabulary is refused by name.
  tok["added_tokens"].push_back({{"id", 600}, {"content", "<late>"}, {"special", true}});
  write_file_atomic(dir + "/tokenizer.json", tok.dump());
  try {
    convert_hf_to_gguf({.model_dir = dir, .output = out, .type = GgmlType::kBF16, .progress = false});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'<late>' has id 600 outside the model's vocabulary of 512"), std::string::npos)
        << e.what();
  }
}

TEST(GgufConvert, RefusesByName) {
  try {
    convert("qwen3", GgmlType::kQ4_K);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("Q4_K"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kestrel
