// Loading hybrid GGUFs the way llama.cpp writes them besides what kestrel writes: the legacy fused
// ssm_in of older Qwen3-Next files, multi-token-prediction blocks after the model's layers,
// attention.recurrent_layers instead of full_attention_interval; the checkpoint the loader
// rebuilds equals the original bytes; malformed metadata and tensors are refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>

#include "backend/cpu/cpu_ops.h"
#include "convert/gguf_model.h"
#include "convert/hf_to_gguf.h"
#include "core/error.h"
#include "engine/runner.h"
#include "io/gguf.h"
#include "io/safetensors.h"
#include "model/loader.h"
#include "quant/quant.h"
#include "support/fixture_model.h"
#include "support/paths.h"

namespace kestrel {
namespace {

using test::data_path;
using test::work_path;

std::string convert(const std::string& fixture, GgmlType type = GgmlType::kBF16) {
  const std::string out = work_path("load-" + fixture + "-" + std::string(ggml_type_name(type)) + ".gguf");
  convert_hf_to_gguf({.model_dir = data_path("fixtures/" + fixture), .output = out, .type = type, .progress = false});
  return out;
}

struct OutTensor {
  std::string name;
  GgmlType type;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;
};

// `in` rewritten to `out` after `edit` changes its metadata and tensors.
std::string rewrite(const std::string& in, const std::string& out,
                    const std::function<void(std::vector<std::pair<std::string, GgufValue>>&, std::vector<OutTensor>&)>& edit) {
  const GgufFile f = GgufFile::open(in);
  std::vector<std::pair<std::string, GgufValue>> kv = f.metadata();
  std::vector<OutTensor> ts;
  for (const GgufTensor& t : f.tensors()) ts.push_back({t.name, t.type, t.shape, std::vector<uint8_t>(t.data, t.data + t.nbytes)});
  edit(kv, ts);
  GgufWriter w(out);
  for (auto& [k, v] : kv) w.set(k, v);
  for (const OutTensor& t : ts) w.declare(t.name, t.type, t.shape);
  w.begin();
  for (const OutTensor& t : ts) w.write_tensor(t.name, t.data.data(), t.data.size());
  w.finish();
  return out;
}

void set_kv(std::vector<std::pair<std::string, GgufValue>>& kv, const std::string& key, GgufValue v) {
  for (auto& [k, old] : kv)
    if (k == key) {
      old = std::move(v);
      return;
    }
  kv.emplace_back(key, std::move(v));
}

void erase_kv(std::vector<std::pair<std::string, GgufValue>>& kv, const std::string& key) {
  std::erase_if(kv, [&](const auto& p) { return p.first == key; });
}

OutTensor* find(std::vector<OutTensor>& ts, const std::string& name) {
  for (OutTensor& t : ts)
    if (t.name == name) return &t;
  return nullptr;
}

void expect_same_logits(const std::string& gguf, const std::string& family) {
  test::FixtureModel dir(family);
  CpuOps ops;
  LoadedModel lm = load_model(gguf, ops);
  EXPECT_EQ(test::prompt_logits(*lm.model, family, 3), test::prompt_logits(dir.model(), family, 3));
}

template <typename F>
void expect_error(F&& f, ErrorKind kind, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing: " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

void expect_load_error(const std::string& path, ErrorKind kind, const std::string& needle) {
  expect_error(
      [&] {
        CpuOps ops;
        load_model(path, ops);
      },
      kind, needle);
}

// The checkpoint the loader rebuilds from a bf16 GGUF holds the original bytes of every tensor
// (rows of split and reordered tensors back in place), except the two transforms llama.cpp
// applies, which it keeps: (1 + w) norms and A = -exp(A_log).
TEST(GgufHybridLoad, RebuiltCheckpointIsTheOriginal) {
  for (const std::string family : {"qwen3_next", "qwen3_5", "qwen3_5_moe", "gemma4_text_moe", "gemma4_text_keqv"}) {
    SCOPED_TRACE(family);
    const Checkpoint ck = Checkpoint::open_dir(data_path("fixtures/" + family));
    auto file = std::make_shared<const GgufFile>(GgufFile::open(convert(family)));
    const ModelConfig cfg = gguf_model_config(*file);
    const Checkpoint got = gguf_checkpoint(file, cfg);
    const bool qwen = family.rfind("qwen", 0) == 0;
    EXPECT_EQ(cfg.zero_centered_norm, false);
    int same = 0;
    for (const auto& [name, t] : got.tensors()) {
      SCOPED_TRACE(name);
      const bool norm = name.find("norm.weight") != std::string::npos && name.find("linear_attn.norm") == std::string::npos;
      // The GGUF's config has no multimodal wrapper: the text weights are under "model.".
      const std::string prefix = ck.find("model.language_model.embed_tokens.weight") ? "model.language_model." : "model.";
      const std::string hf_name = name.rfind("model.", 0) == 0 ? prefix + name.substr(6) : name;
      if (name.size() > 2 && name.compare(name.size() - 2, 2, ".A") == 0) {  // A = -exp(A_log), F32
        const TensorInfo* a_log = ck.find(hf_name + "_log");
        ASSERT_NE(a_log, nullptr);
        ASSERT_EQ(t->dtype, DType::kF32);
        std::vector<float> x(size_t(a_log->numel()));
        quant::dequantize_row(GgmlType::kBF16, a_log->data, a_log->numel(), x.data());
        for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(reinterpret_cast<const float*>(t->data)[i], -std::exp(x[i]));
        continue;
      }
      const TensorInfo* src = ck.find(hf_name);
      ASSERT_NE(src, nullptr);
      ASSERT_EQ(t->shape, src->shape);
      std::vector<float> want(size_t(src->numel())), have(size_t(src->numel()));
      quant::dequantize_row(*dtype_to_ggml(src->dtype), src->data, src->numel(), want.data());
      quant::dequantize_row(*dtype_to_ggml(t->dtype), t->data, t->numel(), have.data());
      if (qwen && norm)
        for (float& w : want) w = 1.0f + w;
      EXPECT_EQ(have, want);
      ++same;
    }
    // Every checkpoint tensor the model reads came back (not the vision tower, which is not converted).
    int text = 0;
    for (const auto& [name, t] : ck.tensors()) text += name.find("visual.") == std::string::npos;
    EXPECT_EQ(int(got.tensors().size()), text);
    EXPECT_GT(same, 0);
  }
}

// Older llama.cpp Qwen3-Next files keep in_proj_qkvz fused as blk.N.ssm_in (llama.cpp still
// loads them): the same model.
TEST(GgufHybridLoad, Qwen3NextLegacyFusedSsmIn) {
  const Checkpoint ck = Checkpoint::open_dir(data_path("fixtures/qwen3_next"));
  const std::string path = rewrite(convert("qwen3_next"), work_path("qwen3next-ssm_in.gguf"), [&](auto&, auto& ts) {
    for (int l = 0; l < 3; ++l) {
      const std::string g = "blk." + std::to_string(l) + ".";
      std::erase_if(ts, [&](const OutTensor& t) { return t.name == g + "attn_qkv.weight" || t.name == g + "attn_gate.weight"; });
      const TensorInfo* w = ck.find("model.layers." + std::to_string(l) + ".linear_attn.in_proj_qkvz.weight");
      ts.push_back({g + "ssm_in.weight", GgmlType::kBF16, w->shape, std::vector<uint8_t>(w->data, w->data + w->nbytes)});
    }
  });
  expect_same_logits(path, "qwen3_next");
}

// llama.cpp writes Qwen3.5's MTP block as an extra block (nextn_predict_layers); kestrel skips it.
TEST(GgufHybridLoad, Qwen35SkipsMtpBlocks) {
  const std::string path = rewrite(convert("qwen3_5"), work_path("qwen35-mtp.gguf"), [](auto& kv, auto& ts) {
    set_kv(kv, "qwen35.block_count", GgufValue::u32(5));
    set_kv(kv, "qwen35.nextn_predict_layers", GgufValue::u32(1));
    std::vector<uint8_t> ones(128 * 4);
    const float one = 1.0f;
    for (size_t i = 0; i < 128; ++i) std::memcpy(ones.data() + i * 4, &one, 4);
    ts.push_back({"blk.4.attn_norm.weight", GgmlType::kF32, {128}, ones});
    ts.push_back({"blk.4.nextn.enorm.weight", GgmlType::kF32, {128}, ones});
  });
  expect_same_logits(path, "qwen3_5");
  // A per-layer array then has one entry per block, the MTP block's included.
  const std::string arr = rewrite(path, work_path("qwen35-mtp-arr.gguf"), [](auto& kv, auto&) {
    set_kv(kv, "qwen35.attention.head_count_kv", GgufValue::i32s({2, 2, 2, 2, 2}));
  });
  expect_same_logits(arr, "qwen3_5");
  const std::string bad = rewrite(path, work_path("qwen35-mtp-bad.gguf"), [](auto& kv, auto&) {
    set_kv(kv, "qwen35.attention.head_count_kv", GgufValue::i32s({2, 2, 2, 2}));
  });
  expect_load_error(bad, ErrorKind::kBadInput, "key 'qwen35.attention.head_count_kv' has 4 entries, expected one per block (5)");
}

// attention.recurrent_layers (one flag per block) instead of full_attention_interval.
TEST(GgufHybridLoad, RecurrentLayersKey) {
  const std::string conv = convert("qwen3_5_moe");
  const std::string path = rewrite(conv, work_path("qwen35moe-recurrent.gguf"), [](auto& kv, auto&) {
    erase_kv(kv, "qwen35moe.full_attention_interval");
    set_kv(kv, "qwen35moe.attention.recurrent_layers", GgufValue::array_raw(GgufValueType::kBool, 4, {1, 1, 1, 0}));
  });
  expect_same_logits(path, "qwen3_5_moe");
  // A pattern that does not match the tensors: the missing tensor is named.
  const std::string wrong = rewrite(conv, work_path("qwen35moe-recurrent-wrong.gguf"), [](auto& kv, auto&) {
    set_kv(kv, "qwen35moe.attention.recurrent_layers", GgufValue::array_raw(GgufValueType::kBool, 4, {1, 1, 0, 0}));
  });
  expect_load_error(wrong, ErrorKind::kBadInput, "tensor 'blk.2.attn_q.weight' is missing");
}

TEST(GgufHybridLoad, MalformedIsRefusedByName) {
  const std::string q = convert("qwen3_5"), g = convert("gemma4_text"), kq = convert("gemma4_text_keqv");
  auto edited = [](const std::string& in, const std::string& name,
                   const std::function<void(std::vector<std::pair<std::string, GgufValue>>&, std::vector<OutTensor>&)>& e) {
    return rewrite(in, work_path(name + ".gguf"), e);
  };
  expect_load_error(edited(q, "no-ts-rank", [](auto& kv, auto&) { erase_kv(kv, "qwen35.ssm.time_step_rank"); }),
                    ErrorKind::kBadInput, "qwen35.ssm.time_step_rank");
  expect_load_error(edited(q, "inner", [](auto& kv, auto&) { set_kv(kv, "qwen35.ssm.inner_size", GgufValue::u32(130)); }),
                    ErrorKind::kBadInput, "qwen35.ssm.inner_size = 130 is not a multiple of qwen35.ssm.time_step_rank = 4");
  expect_load_error(edited(q, "qkv-shape", [](auto&, auto& ts) { find(ts, "blk.0.attn_qkv.weight")->shape = {128, 256}; }),
                    ErrorKind::kBadInput, "tensor 'blk.0.attn_qkv.weight' has shape [ 128 256 ], expected [ 256 128 ]");
  expect_load_error(edited(q, "heads", [](auto& kv, auto&) { set_kv(kv, "qwen35.attention.head_count", GgufValue::i32s({4, 4, 4, 8})); }),
                    ErrorKind::kUnsupported, "key 'qwen35.attention.head_count' varies by layer");
  expect_load_error(edited(g, "freqs",
                           [](auto&, auto& ts) {
                             const float half = 0.5f;
                             std::memcpy(find(ts, "rope_freqs.weight")->data.data() + 4 * 100, &half, 4);
                           }),
                    ErrorKind::kUnsupported, "tensor 'rope_freqs.weight'[100] = 0.5");
  expect_load_error(edited(g, "no-freqs", [](auto&, auto& ts) { std::erase_if(ts, [](const OutTensor& t) { return t.name == "rope_freqs.weight"; }); }),
                    ErrorKind::kBadInput, "tensor 'rope_freqs.weight' is missing");
  expect_load_error(edited(g, "pattern",
                           [](auto& kv, auto&) {
                             set_kv(kv, "gemma4.attention.sliding_window_pattern",
                                    GgufValue::array_raw(GgufValueType::kBool, 5, {1, 1, 0, 1, 1}));
                           }),
                    ErrorKind::kBadInput, "key 'gemma4.attention.sliding_window_pattern' must be an array with one entry per block (6)");
  expect_load_error(edited(g, "ffn", [](auto& kv, auto&) { set_kv(kv, "gemma4.feed_forward_length", GgufValue::i32s({256, 256, 256, 256, 256, 512})); }),
                    ErrorKind::kUnsupported, "gemma4.feed_forward_length varies by layer in a way Gemma 4 does not (layer 5");
  // K = V on one full layer only.
  expect_load_error(edited(kq, "half-keqv",
                           [](auto&, auto& ts) {
                             OutTensor v = *find(ts, "blk.2.attn_k.weight");
                             v.name = "blk.2.attn_v.weight";
                             ts.push_back(v);
                           }),
                    ErrorKind::kUnsupported, "some full-attention layers have attn_v and some do not");
}

}  // namespace
}  // namespace kestrel
