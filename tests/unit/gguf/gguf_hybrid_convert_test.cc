// kestrel convert on the hybrid fixtures (qwen3next, qwen35, qwen35moe, gemma4): every tensor of
// the GGUF traced back to the checkpoint under the documented transform (docs/gguf.md), written
// here independently of src/convert/gguf_names.cc, plus the metadata llama.cpp reads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>

#include "convert/hf_to_gguf.h"
#include "core/error.h"
#include "core/files.h"
#include "io/gguf.h"
#include "io/safetensors.h"
#include "model/loader.h"
#include "quant/quant.h"
#include "support/paths.h"

namespace kestrel {
namespace {

using test::data_path;
using test::work_path;

std::string convert(const std::string& fixture, GgmlType type) {
  const std::string out = work_path("hybrid-" + fixture + "-" + std::string(ggml_type_name(type)) + ".gguf");
  convert_hf_to_gguf({.model_dir = data_path("fixtures/" + fixture), .output = out, .type = type, .progress = false});
  return out;
}

// Checks GGUF tensors against values computed from the checkpoint, and that none is left out.
class Trace {
 public:
  Trace(const std::string& fixture, const GgufFile& f, GgmlType type)
      : ck_(Checkpoint::open_dir(data_path("fixtures/" + fixture))), f_(f), type_(type) {}

  // The checkpoint tensor's values (F32), row-major.
  std::vector<float> hf(const std::string& name) const {
    const TensorInfo* t = ck_.find(name);
    EXPECT_NE(t, nullptr) << name;
    if (!t) return {};
    std::vector<float> v(size_t(t->numel()));
    quant::dequantize_row(*dtype_to_ggml(t->dtype), t->data, t->numel(), v.data());
    return v;
  }

  // The stored bytes of `name` are `values` [shape] stored in the expected type: F32 for 1-D
  // tensors, norms, routers, conv1d kernels, biases and scales; the requested type otherwise.
  void check(const std::string& name, const std::vector<int64_t>& shape, const std::vector<float>& values,
             bool f32 = false) {
    SCOPED_TRACE(name);
    seen_.insert(name);
    const GgufTensor* t = f_.find_tensor(name);
    ASSERT_NE(t, nullptr);
    ASSERT_EQ(t->shape, shape);
    GgmlType want = f32 || shape.size() == 1 ? GgmlType::kF32 : type_;
    if (shape.back() % ggml_block_size(want) != 0) want = GgmlType::kBF16;  // rows not whole blocks
    ASSERT_EQ(t->type, want);
    const int64_t n = shape.back(), rows = int64_t(values.size()) / n;
    ASSERT_EQ(int64_t(values.size()), t->numel());
    std::vector<uint8_t> expect(ggml_row_bytes(want, n) * uint64_t(rows));
    for (int64_t r = 0; r < rows; ++r)
      quant::quantize_row(want, values.data() + r * n, n, expect.data() + uint64_t(r) * ggml_row_bytes(want, n));
    ASSERT_EQ(expect.size(), t->nbytes);
    EXPECT_EQ(0, std::memcmp(expect.data(), t->data, expect.size()));
  }
  // A tensor that is the checkpoint tensor unchanged (but for the stored type).
  void same(const std::string& name, const std::string& hf_name, const std::vector<int64_t>& shape, bool f32 = false) {
    check(name, shape, hf(hf_name), f32);
  }
  void absent(const std::string& name) const { EXPECT_EQ(f_.find_tensor(name), nullptr) << name; }
  void all_seen() const { EXPECT_EQ(seen_.size(), f_.tensors().size()) << "tensors the test did not trace"; }

 private:
  Checkpoint ck_;
  const GgufFile& f_;
  GgmlType type_;
  std::set<std::string> seen_;
};

std::vector<float> add_one(std::vector<float> v) {
  for (float& x : v) x = 1.0f + x;
  return v;
}

// Rows [first, first + n) of a row-major matrix with `cols` columns.
std::vector<float> rows_of(const std::vector<float>& m, int64_t cols, int64_t first, int64_t n) {
  return std::vector<float>(m.begin() + first * cols, m.begin() + (first + n) * cols);
}

void append(std::vector<float>& a, const std::vector<float>& b) { a.insert(a.end(), b.begin(), b.end()); }

// llama.cpp's tiled order of Qwen3.5's value heads: stored head n is checkpoint head
// (n mod n_k) * (n_v / n_k) + n / n_k.
int64_t tiled_source_head(int64_t n, int64_t n_k, int64_t n_v) { return (n % n_k) * (n_v / n_k) + n / n_k; }

// ---------------------------------------------------------------------------------------------

void trace_qwen_hybrid(const std::string& fixture, GgmlType type) {
  SCOPED_TRACE(fixture + " " + std::string(ggml_type_name(type)));
  const ModelConfig cfg = load_config(data_path("fixtures/" + fixture));
  const GgufFile f = GgufFile::open(convert(fixture, type));
  Trace t(fixture, f, type);
  const bool next = fixture == "qwen3_next";
  const std::string arch = next ? "qwen3next" : cfg.has_moe() ? "qwen35moe" : "qwen35";
  const std::string m = next ? "model." : "model.language_model.";
  EXPECT_EQ(f.get_string("general.architecture"), arch);
  const std::string a = arch + ".";
  const int64_t H = 128, V = 512, nk = 2, nv = 4, dk = 32, dv = 32, r = nv / nk, K = 4, C = 2 * nk * dk + nv * dv;
  EXPECT_EQ(f.get_int(a + "block_count"), 4);
  EXPECT_EQ(f.get_int(a + "embedding_length"), H);
  EXPECT_EQ(f.get_int(a + "attention.head_count"), 4);
  EXPECT_EQ(f.get_int(a + "attention.head_count_kv"), 2);
  EXPECT_EQ(f.get_int(a + "attention.key_length"), 64);
  EXPECT_EQ(f.get_int(a + "attention.value_length"), 64);
  EXPECT_EQ(f.get_int(a + "ssm.conv_kernel"), K);
  EXPECT_EQ(f.get_int(a + "ssm.state_size"), dk);
  EXPECT_EQ(f.get_int(a + "ssm.group_count"), nk);
  EXPECT_EQ(f.get_int(a + "ssm.time_step_rank"), nv);
  EXPECT_EQ(f.get_int(a + "ssm.inner_size"), nv * dv);
  EXPECT_EQ(f.get_int(a + "full_attention_interval"), 4);
  EXPECT_EQ(f.get_int(a + "rope.dimension_count"), 16);  // head_dim 64 x partial_rotary_factor 0.25
  EXPECT_EQ(f.get_float(a + "rope.freq_base"), 10000.0);
  if (next) {
    EXPECT_EQ(f.find(a + "rope.dimension_sections"), nullptr);
  } else {
    const GgufValue* sec = f.find(a + "rope.dimension_sections");
    ASSERT_NE(sec, nullptr);
    ASSERT_EQ(sec->size(), 4u);  // llama.cpp's default for Qwen3.5 when the config has no mrope_section
    EXPECT_EQ(*sec->int_at(0), 11);
    EXPECT_EQ(*sec->int_at(1), 11);
    EXPECT_EQ(*sec->int_at(2), 10);
    EXPECT_EQ(*sec->int_at(3), 0);
  }
  if (cfg.has_moe()) {
    EXPECT_EQ(f.get_int(a + "expert_count"), 8);
    EXPECT_EQ(f.get_int(a + "expert_used_count"), 3);
    EXPECT_EQ(f.get_int(a + "expert_feed_forward_length"), 64);
    EXPECT_EQ(f.get_int(a + "expert_shared_feed_forward_length"), 64);
  }

  t.same("token_embd.weight", m + "embed_tokens.weight", {V, H});
  t.check("output_norm.weight", {H}, add_one(t.hf(m + "norm.weight")));
  if (cfg.tie_embeddings) t.absent("output.weight");
  else t.same("output.weight", "lm_head.weight", {V, H});

  // Value heads: grouped (the checkpoint's order) for Qwen3-Next, tiled for Qwen3.5.
  auto v_head = [&](int64_t n) { return next ? n : tiled_source_head(n, nk, nv); };
  for (int l = 0; l < 4; ++l) {
    SCOPED_TRACE("layer " + std::to_string(l));
    const std::string g = "blk." + std::to_string(l) + ".", p = m + "layers." + std::to_string(l) + ".";
    t.check(g + "attn_norm.weight", {H}, add_one(t.hf(p + "input_layernorm.weight")));
    t.check(g + "post_attention_norm.weight", {H}, add_one(t.hf(p + "post_attention_layernorm.weight")));
    t.absent(g + "ffn_norm.weight");
    if (l == 3) {
      t.same(g + "attn_q.weight", p + "self_attn.q_proj.weight", {512, H});  // [query, gate] per head, as stored
      t.same(g + "attn_k.weight", p + "self_attn.k_proj.weight", {128, H});
      t.same(g + "attn_v.weight", p + "self_attn.v_proj.weight", {128, H});
      t.same(g + "attn_output.weight", p + "self_attn.o_proj.weight", {H, 256});
      t.check(g + "attn_q_norm.weight", {64}, add_one(t.hf(p + "self_attn.q_norm.weight")));
      t.check(g + "attn_k_norm.weight", {64}, add_one(t.hf(p + "self_attn.k_norm.weight")));
    } else {
      const std::string la = p + "linear_attn.";
      std::vector<float> qkv, z;
      if (next) {
        // in_proj_qkvz: per key head [q (dk), k (dk), v (r dv), z (r dv)].
        const std::vector<float> w = t.hf(la + "in_proj_qkvz.weight");
        const int64_t group = 2 * dk + 2 * r * dv;
        for (int64_t i = 0; i < nk; ++i) append(qkv, rows_of(w, H, i * group, dk));
        for (int64_t i = 0; i < nk; ++i) append(qkv, rows_of(w, H, i * group + dk, dk));
        for (int64_t i = 0; i < nk; ++i) append(qkv, rows_of(w, H, i * group + 2 * dk, r * dv));
        for (int64_t i = 0; i < nk; ++i) append(z, rows_of(w, H, i * group + 2 * dk + r * dv, r * dv));
        t.same(g + "ssm_ba.weight", la + "in_proj_ba.weight", {2 * nv, H});
        t.absent(g + "ssm_in.weight");
      } else {
        const std::vector<float> w = t.hf(la + "in_proj_qkv.weight"), wz = t.hf(la + "in_proj_z.weight");
        qkv = rows_of(w, H, 0, 2 * nk * dk);
        for (int64_t n = 0; n < nv; ++n) {
          append(qkv, rows_of(w, H, 2 * nk * dk + v_head(n) * dv, dv));
          append(z, rows_of(wz, H, v_head(n) * dv, dv));
        }
        for (const char* ba : {"b", "a"}) {
          const std::vector<float> wb = t.hf(la + "in_proj_" + ba + ".weight");
          std::vector<float> out;
          for (int64_t n = 0; n < nv; ++n) append(out, rows_of(wb, H, v_head(n), 1));
          t.check(g + (std::string(ba) == "b" ? "ssm_beta.weight" : "ssm_alpha.weight"), {nv, H}, out);
        }
      }
      t.check(g + "attn_qkv.weight", {C, H}, qkv);
      t.check(g + "attn_gate.weight", {nv * dv, H}, z);
      // conv1d [C, 1, K] -> [C, K], value channels following the value heads; F32.
      const std::vector<float> conv = t.hf(la + "conv1d.weight");
      std::vector<float> c = rows_of(conv, K, 0, 2 * nk * dk);
      for (int64_t n = 0; n < nv; ++n) append(c, rows_of(conv, K, 2 * nk * dk + v_head(n) * dv, dv));
      t.check(g + "ssm_conv1d.weight", {C, K}, c, /*f32=*/true);
      const std::vector<float> dt = t.hf(la + "dt_bias"), alog = t.hf(la + "A_log");
      std::vector<float> dt2, a2;
      for (int64_t n = 0; n < nv; ++n) {
        dt2.push_back(dt[size_t(v_head(n))]);
        a2.push_back(-std::exp(alog[size_t(v_head(n))]));
      }
      t.check(g + "ssm_dt.bias", {nv}, dt2);
      t.check(g + "ssm_a", {nv}, a2);
      t.same(g + "ssm_norm.weight", la + "norm.weight", {dv});  // the gated norm: no + 1
      const std::vector<float> out = t.hf(la + "out_proj.weight");
      std::vector<float> out2(out.size());
      for (int64_t row = 0; row < H; ++row)
        for (int64_t n = 0; n < nv; ++n)
          for (int64_t e = 0; e < dv; ++e)
            out2[size_t(row * nv * dv + n * dv + e)] = out[size_t(row * nv * dv + v_head(n) * dv + e)];
      t.check(g + "ssm_out.weight", {H, nv * dv}, out2);
    }
    if (cfg.has_moe()) {
      t.same(g + "ffn_gate_inp.weight", p + "mlp.gate.weight", {8, H}, /*f32=*/true);
      for (const char* proj : {"gate", "up", "down"}) {
        std::vector<float> stacked;
        for (int e = 0; e < 8; ++e) append(stacked, t.hf(p + "mlp.experts." + std::to_string(e) + "." + proj + "_proj.weight"));
        const std::vector<int64_t> shape = std::string(proj) == "down" ? std::vector<int64_t>{8, H, 64} : std::vector<int64_t>{8, 64, H};
        t.check(g + "ffn_" + proj + "_exps.weight", shape, stacked);
      }
      t.same(g + "ffn_gate_inp_shexp.weight", p + "mlp.shared_expert_gate.weight", {1, H}, /*f32=*/true);
      t.same(g + "ffn_gate_shexp.weight", p + "mlp.shared_expert.gate_proj.weight", {64, H});
      t.same(g + "ffn_up_shexp.weight", p + "mlp.shared_expert.up_proj.weight", {64, H});
      t.same(g + "ffn_down_shexp.weight", p + "mlp.shared_expert.down_proj.weight", {H, 64});
    } else {
      t.same(g + "ffn_gate.weight", p + "mlp.gate_proj.weight", {256, H});
      t.same(g + "ffn_up.weight", p + "mlp.up_proj.weight", {256, H});
      t.same(g + "ffn_down.weight", p + "mlp.down_proj.weight", {H, 256});
    }
  }
  t.all_seen();
}

TEST(GgufHybridConvert, QwenHybridsTraceToTheCheckpoint) {
  for (const std::string fixture : {"qwen3_next", "qwen3_5", "qwen3_5_tied", "qwen3_5_moe"})
    for (GgmlType type : {GgmlType::kBF16, GgmlType::kQ8_0}) trace_qwen_hybrid(fixture, type);
}

// ---------------------------------------------------------------------------------------------

void trace_gemma4(const std::string& fixture, GgmlType type) {
  SCOPED_TRACE(fixture + " " + std::string(ggml_type_name(type)));
  const GgufFile f = GgufFile::open(convert(fixture, type));
  Trace t(fixture, f, type);
  const std::string a = "gemma4.", m = "model.";
  const bool moe = fixture == "gemma4_text_moe", shared = fixture == "gemma4_text_kvshared",
             keqv = fixture == "gemma4_text_keqv";
  const int64_t H = 128, V = 512, P = keqv ? 0 : 16, L = 6, hd_swa = 32, hd_full = keqv ? 64 : 512;
  const std::vector<bool> full = {false, false, true, false, false, true};
  EXPECT_EQ(f.get_string("general.architecture"), "gemma4");
  EXPECT_EQ(f.get_int(a + "block_count"), L);
  EXPECT_EQ(f.get_int(a + "context_length"), 512);
  EXPECT_EQ(f.get_int(a + "attention.head_count"), 4);
  EXPECT_EQ(f.get_int(a + "attention.key_length"), hd_full);
  EXPECT_EQ(f.get_int(a + "attention.value_length"), hd_full);
  EXPECT_EQ(f.get_int(a + "attention.key_length_swa"), hd_swa);
  EXPECT_EQ(f.get_int(a + "attention.value_length_swa"), hd_swa);
  EXPECT_EQ(f.get_int(a + "attention.sliding_window"), 16);
  EXPECT_EQ(f.get_int(a + "attention.shared_kv_layers"), shared ? 2 : 0);
  EXPECT_EQ(f.get_int(a + "embedding_length_per_layer_input"), P);
  EXPECT_EQ(f.get_float(a + "final_logit_softcapping"), 30.0);
  EXPECT_EQ(f.get_float(a + "rope.freq_base"), 1e6);
  EXPECT_EQ(f.get_float(a + "rope.freq_base_swa"), 1e4);
  EXPECT_EQ(f.get_int(a + "rope.dimension_count"), hd_full);
  EXPECT_EQ(f.get_int(a + "rope.dimension_count_swa"), hd_swa);
  EXPECT_EQ(f.get_int("tokenizer.ggml.bos_token_id"), 2);
  EXPECT_EQ(f.get_int("tokenizer.ggml.eos_token_id"), 1);
  const GgufValue* pattern = f.find(a + "attention.sliding_window_pattern");
  ASSERT_NE(pattern, nullptr);
  ASSERT_EQ(pattern->elem_type(), GgufValueType::kBool);
  ASSERT_EQ(pattern->size(), 6u);
  for (int l = 0; l < L; ++l) EXPECT_EQ(pattern->raw()[size_t(l)], full[size_t(l)] ? 0 : 1) << l;
  if (keqv) {  // the full layers' own KV-head count: an array
    const GgufValue* kv = f.find(a + "attention.head_count_kv");
    ASSERT_TRUE(kv && kv->is_array());
    for (int l = 0; l < L; ++l) EXPECT_EQ(*kv->int_at(uint64_t(l)), full[size_t(l)] ? 1 : 2) << l;
  } else {
    EXPECT_EQ(f.get_int(a + "attention.head_count_kv"), 2);
  }
  if (shared) {  // double-wide MLP on the KV-shared layers: an array
    const GgufValue* ff = f.find(a + "feed_forward_length");
    ASSERT_TRUE(ff && ff->is_array());
    for (int l = 0; l < L; ++l) EXPECT_EQ(*ff->int_at(uint64_t(l)), l >= 4 ? 512 : 256) << l;
  } else {
    EXPECT_EQ(f.get_int(a + "feed_forward_length"), 256);
  }
  if (moe) {
    EXPECT_EQ(f.get_int(a + "expert_count"), 8);
    EXPECT_EQ(f.get_int(a + "expert_used_count"), 3);
    EXPECT_EQ(f.get_int(a + "expert_feed_forward_length"), 64);
  } else {
    EXPECT_EQ(f.find(a + "expert_count"), nullptr);
  }

  t.same("token_embd.weight", m + "embed_tokens.weight", {V, H});
  t.absent("output.weight");  // tied
  t.same("output_norm.weight", m + "norm.weight", {H});  // Gemma 4 norms are x * w: no + 1
  if (P > 0) {
    t.same("per_layer_token_embd.weight", m + "embed_tokens_per_layer.weight", {V, L * P});
    t.same("per_layer_model_proj.weight", m + "per_layer_model_projection.weight", {L * P, H});
    t.same("per_layer_proj_norm.weight", m + "per_layer_projection_norm.weight", {P});
  }
  // Proportional RoPE (partial_rotary_factor 0.25): factor 1 for the first 0.25 * hd / 2 pairs,
  // 1e30 for the rest.
  std::vector<float> freqs(size_t(hd_full / 2), 1e30f);
  for (int64_t i = 0; i < hd_full / 8; ++i) freqs[size_t(i)] = 1.0f;
  t.check("rope_freqs.weight", {hd_full / 2}, freqs);
  for (int l = 0; l < L; ++l) {
    SCOPED_TRACE("layer " + std::to_string(l));
    const std::string g = "blk." + std::to_string(l) + ".", p = m + "layers." + std::to_string(l) + ".";
    const int64_t hd = full[size_t(l)] ? hd_full : hd_swa, kv = keqv && full[size_t(l)] ? 1 : 2;
    const int64_t F = shared && l >= 4 ? 512 : 256;
    t.same(g + "attn_norm.weight", p + "input_layernorm.weight", {H});
    t.same(g + "attn_q.weight", p + "self_attn.q_proj.weight", {4 * hd, H});
    t.same(g + "attn_q_norm.weight", p + "self_attn.q_norm.weight", {hd});
    if (shared && l >= 4) {
      t.absent(g + "attn_k.weight");
      t.absent(g + "attn_v.weight");
      t.absent(g + "attn_k_norm.weight");
    } else {
      t.same(g + "attn_k.weight", p + "self_attn.k_proj.weight", {kv * hd, H});
      t.same(g + "attn_k_norm.weight", p + "self_attn.k_norm.weight", {hd});
      if (keqv && full[size_t(l)]) t.absent(g + "attn_v.weight");
      else t.same(g + "attn_v.weight", p + "self_attn.v_proj.weight", {kv * hd, H});
    }
    t.same(g + "attn_output.weight", p + "self_attn.o_proj.weight", {H, 4 * hd});
    t.same(g + "post_attention_norm.weight", p + "post_attention_layernorm.weight", {H});
    t.same(g + "ffn_norm.weight", p + "pre_feedforward_layernorm.weight", {H});
    t.same(g + "ffn_gate.weight", p + "mlp.gate_proj.weight", {F, H});
    t.same(g + "ffn_up.weight", p + "mlp.up_proj.weight", {F, H});
    t.same(g + "ffn_down.weight", p + "mlp.down_proj.weight", {H, F});
    t.same(g + "post_ffw_norm.weight", p + "post_feedforward_layernorm.weight", {H});
    t.same(g + "layer_output_scale.weight", p + "layer_scalar", {1});
    if (moe) {
      t.same(g + "ffn_gate_inp.weight", p + "router.proj.weight", {8, H}, /*f32=*/true);
      t.same(g + "ffn_gate_inp.scale", p + "router.scale", {H});
      t.same(g + "ffn_down_exps.scale", p + "router.per_expert_scale", {8});
      t.same(g + "ffn_gate_up_exps.weight", p + "experts.gate_up_proj", {8, 128, H});
      t.same(g + "ffn_down_exps.weight", p + "experts.down_proj", {8, H, 64});
      t.same(g + "post_ffw_norm_1.weight", p + "post_feedforward_layernorm_1.weight", {H});
      t.same(g + "pre_ffw_norm_2.weight", p + "pre_feedforward_layernorm_2.weight", {H});
      t.same(g + "post_ffw_norm_2.weight", p + "post_feedforward_layernorm_2.weight", {H});
    }
    if (P > 0) {
      t.same(g + "inp_gate.weight", p + "per_layer_input_gate.weight", {P, H});
      t.same(g + "proj.weight", p + "per_layer_projection.weight", {H, P});
      t.same(g + "post_norm.weight", p + "post_per_layer_input_norm.weight", {H});
    }
  }
  t.all_seen();
}

TEST(GgufHybridConvert, Gemma4TracesToTheCheckpoint) {
  for (const std::string fixture : {"gemma4_text", "gemma4_text_moe", "gemma4_text_kvshared", "gemma4_text_keqv"})
    for (GgmlType type : {GgmlType::kBF16, GgmlType::kQ8_0}) trace_gemma4(fixture, type);
}

// ---------------------------------------------------------------------------------------------

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

// A copy of a fixture directory whose config.json `edit` changes.
std::string edited_fixture(const std::string& fixture, const std::string& name,
                           const std::function<void(nlohmann::json&)>& edit) {
  namespace fs = std::filesystem;
  const std::string dir = work_path(name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const char* f : {"generation_config.json", "model.safetensors"})
    fs::copy_file(data_path("fixtures/" + fixture + "/" + f), dir + "/" + f);
  nlohmann::json c = nlohmann::json::parse(read_file(data_path("fixtures/" + fixture + "/config.json")));
  edit(c);
  write_file_atomic(dir + "/config.json", c.dump());
  return dir;
}

TEST(GgufHybridConvert, RefusesWhatLlamaCppCannotHoldByName) {
  const std::string out = work_path("refused.gguf");
  auto conv = [&](const std::string& dir) {
    return [dir, out] { convert_hf_to_gguf({.model_dir = dir, .output = out, .progress = false}); };
  };
  // qwen4_exp: no llama.cpp architecture.
  expect_error(conv(data_path("fixtures/qwen4_exp")), ErrorKind::kUnsupported,
               "model_type 'qwen4_exp' has no llama.cpp architecture");
  // A layer pattern full_attention_interval cannot describe.
  expect_error(conv(edited_fixture("qwen3_5", "qwen35-pattern",
                                   [](nlohmann::json& c) {
                                     c["text_config"]["layer_types"] = {"linear_attention", "full_attention",
                                                                        "linear_attention", "linear_attention"};
                                   })),
               ErrorKind::kUnsupported, "layer 3 is linear_attention, but the pattern of the first full-attention layer (qwen35.full_attention_interval = 2)");
  // Qwen3-Next with a dense layer: llama.cpp's qwen3next has MoE blocks only.
  expect_error(conv(edited_fixture("qwen3_next", "qwen3next-dense",
                                   [](nlohmann::json& c) { c["mlp_only_layers"] = {1}; })),
               ErrorKind::kUnsupported, "qwen3_next layer 1 has a dense MLP");
  // Gemma's tokenizer must be of the shape tokenizer.ggml.model "gemma4" stands for (the real one is
  // tested in tokenizer_gguf_gemma_test.cc); a refusal leaves no file, --no-tokenizer writes the weights.
  const std::string dir = edited_fixture("gemma4_text", "gemma4-tok", [](nlohmann::json&) {});
  write_file_atomic(dir + "/tokenizer.json", "{}");
  expect_error(conv(dir), ErrorKind::kBadInput, "tokenizer.json: expected an object with a 'model' object");
  EXPECT_FALSE(std::filesystem::exists(out));
  write_file_atomic(dir + "/tokenizer.json", R"({"model": {"type": "BPE", "vocab": {}, "merges": []}, "decoder": {"type": "ByteLevel"}})");
  expect_error(conv(dir), ErrorKind::kUnsupported, "Gemma's tokenizer must be BPE with byte_fallback");
  EXPECT_FALSE(std::filesystem::exists(out));
  const ConvertReport r = convert_hf_to_gguf({.model_dir = dir, .output = out, .progress = false, .tokenizer = false});
  EXPECT_EQ(r.arch, "gemma4");
  EXPECT_FALSE(r.has_tokenizer);
  EXPECT_EQ(GgufFile::open(out).find("tokenizer.ggml.model"), nullptr);
}

}  // namespace
}  // namespace kestrel
