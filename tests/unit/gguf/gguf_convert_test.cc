// kestrel convert on the fixture checkpoints: llama.cpp names, shapes, types and metadata, the
// bytes of every tensor traced back to the checkpoint, and refusals by name.
#include <gtest/gtest.h>

#include <cstring>

#include "convert/hf_to_gguf.h"
#include "core/error.h"
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

TEST(GgufConvert, RefusesByName) {
  try {
    convert("qwen3_5", GgmlType::kBF16);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("model_type 'qwen3_5'"), std::string::npos) << e.what();
  }
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
