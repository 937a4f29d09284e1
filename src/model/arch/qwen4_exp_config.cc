// config.json -> ModelConfig for Qwen4-Exp (qwen4_exp wrapper with text_config, or qwen4_exp_text),
// validated field by field with the invariants transformers' configuration enforces.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "io/json_fields.h"
#include "model/arch/config_common.h"
#include "model/arch/qwen4_exp.h"

namespace kestrel {
namespace {

constexpr int64_t kMaxDim = 1 << 16;

// The first of a token id or list of token ids (JsonFields::get_token_ids); -1 when absent.
int first_token_id(const JsonFields& f, const std::string& key) {
  const std::vector<int> ids = f.get_token_ids(key);
  if (ids.empty() && f.has(key)) bad_input(f.field(key), " must be a token id or a list of token ids, got []");
  return ids.empty() ? -1 : ids[0];
}

// eos_token_id from the text config, else from the wrapper; -1 when neither gives one.
int eos_token_id(const JsonFields& f, const JsonFields& top) {
  const int eos = first_token_id(f, "eos_token_id");
  return eos >= 0 ? eos : first_token_id(top, "eos_token_id");
}

}  // namespace

ModelConfig parse_qwen4_exp_config(const nlohmann::json& root, const std::string& path) {
  JsonFields top(root, path);
  ModelConfig cfg;
  const JsonFields f = text_config_fields(top, path, "qwen4_exp", cfg);

  cfg.vocab_size = f.get_int("vocab_size", 1, 1 << 24);
  cfg.hidden_size = f.get_int("hidden_size", 1, kMaxDim);
  cfg.n_layers = int(f.get_int("num_hidden_layers", 1, 1024));
  cfg.max_positions = int(f.get_int("max_position_embeddings", 262144, 1, 1 << 24));
  cfg.norm_eps = float(f.get_double("rms_norm_eps", 1e-6, 1e-12, 1e-1));
  cfg.zero_centered_norm = true;  // every RMSNorm but DeltaNet's gated one scales by (1 + w)
  cfg.tie_embeddings = f.get_bool("tie_word_embeddings", top.get_bool("tie_word_embeddings", false));
  const std::string act = f.get_string("hidden_act", "silu");
  if (act != "silu") unsupported(f.field("hidden_act"), " = '", act, "' is not supported (expected silu)");
  if (f.get_bool("attention_bias", false)) unsupported(f.field("attention_bias"), " = true is not supported");

  // ---- layer pattern ----
  if (!f.has("layer_types")) bad_input(f.field("layer_types"), " is required (linear_attention / qwen_sparse_attention)");
  const auto& lt = f.get("layer_types");
  if (!lt.is_array() || int(lt.size()) != cfg.n_layers)
    bad_input(f.field("layer_types"), " must list one type per layer (num_hidden_layers = ", cfg.n_layers, "), got ",
              lt.dump().substr(0, 200));
  cfg.layer_kinds.resize(size_t(cfg.n_layers));
  for (int i = 0; i < cfg.n_layers; ++i) {
    std::string t = lt[size_t(i)].is_string() ? lt[size_t(i)].get<std::string>() : lt[size_t(i)].dump();
    if (t == "linear_attention") cfg.layer_kinds[size_t(i)] = LayerKind::kLinearAttention;
    else if (t == "qwen_sparse_attention" || t == "full_attention") cfg.layer_kinds[size_t(i)] = LayerKind::kFullAttention;
    else bad_input(f.field("layer_types"), "[", i, "] = '", t, "' is not a Qwen4-Exp layer type");
  }

  // ---- attention (gated, q/k norms, partial RoPE) and the QSA indexer ----
  auto& at = cfg.attn;
  at.n_heads = int(f.get_int("num_attention_heads", 1, 1024));
  at.n_kv_heads = int(f.get_int("num_key_value_heads", at.n_heads, 1, 1024));
  if (at.n_heads % at.n_kv_heads != 0)
    bad_input(f.field("num_attention_heads"), " = ", at.n_heads, " is not a multiple of num_key_value_heads = ",
              at.n_kv_heads);
  at.head_dim = int(f.get_int("head_dim", cfg.hidden_size / at.n_heads, 2, 1024));
  at.output_gate = true;
  at.qk_norm = true;
  at.scale = float(1.0 / std::sqrt(double(at.head_dim)));
  double partial = 1.0;
  if (f.has("rope_parameters")) {
    JsonFields rp(f.get("rope_parameters"), f.field("rope_parameters"));
    const std::string type = rp.get_string("rope_type", "default");
    if (type != "default") unsupported(rp.field("rope_type"), " = '", type, "' is not supported (only default RoPE)");
    at.rope.theta = rp.get_double("rope_theta", 10000.0, 1.0, 1e12);
    partial = rp.get_double("partial_rotary_factor", 1.0, 0.0, 1.0);
  }
  at.rope.rotary_dim = int(double(at.head_dim) * partial);
  if (at.rope.rotary_dim % 2 != 0)
    bad_input(f.field("rope_parameters"), ": rotary dimension head_dim x partial_rotary_factor = ", at.rope.rotary_dim,
              " must be even");

  auto& q4 = cfg.q4;
  const bool has_attention = cfg.count_layers(LayerKind::kFullAttention) > 0;
  if (has_attention) {
    q4.index_heads = int(f.get_int("indexer_n_heads", 1, 1024));
    const int kv = int(f.get_int("indexer_kv_heads", 1, 1024));
    if (kv != 1) unsupported(f.field("indexer_kv_heads"), " = ", kv, " is not supported (QSA has one indexer key head)");
    q4.index_head_dim = int(f.get_int("indexer_head_dim", 2, 4096));
    q4.index_budget = int(f.get_int("indexer_budget", 1, 1 << 24));
    q4.index_ratio = int(f.get_int("indexer_compress_ratio", 1, 1 << 16));
    if (q4.index_budget % q4.index_ratio != 0)
      bad_input(f.field("indexer_budget"), " = ", q4.index_budget, " is not divisible by indexer_compress_ratio = ",
                q4.index_ratio);
    if (at.rope.rotary_dim > q4.index_head_dim)
      bad_input(f.field("indexer_head_dim"), " = ", q4.index_head_dim, " is smaller than the rotary dimension ",
                at.rope.rotary_dim, " the indexer shares with attention");
  }
  cfg.layer_attn.resize(size_t(cfg.n_layers));
  for (int i = 0; i < cfg.n_layers; ++i) {
    cfg.layer_attn[size_t(i)].attn = at;
    cfg.layer_attn[size_t(i)].kv_source = i;
    if (cfg.layer_kinds[size_t(i)] == LayerKind::kFullAttention)
      cfg.layer_attn[size_t(i)].index_key_dim = q4.index_head_dim;
  }

  // ---- Gated DeltaNet ----
  if (cfg.count_layers(LayerKind::kLinearAttention) > 0) {
    auto& g = cfg.gdn;
    read_deltanet_config(f, g);
    const std::string gate = f.has("output_gate_type") ? f.get_string("output_gate_type", "") : act;
    if (gate == "silu") g.gate_act = Activation::kSilu;
    else if (gate == "sigmoid") g.gate_act = Activation::kSigmoid;
    else unsupported(f.field("output_gate_type"), " = '", gate, "' is not supported (silu or sigmoid)");
  }

  // ---- MoE on every layer (softmax top-k, sigmoid-gated shared expert) ----
  auto& m = cfg.moe;
  m.n_experts = int(f.get_int("num_experts", 1, 4096));
  m.top_k = int(f.get_int("num_experts_per_tok", 1, 4096));
  if (m.top_k > m.n_experts)
    bad_input(f.field("num_experts_per_tok"), " = ", m.top_k, " exceeds num_experts = ", m.n_experts);
  m.expert_ffn = int(f.get_int("moe_intermediate_size", 1, kMaxDim * 4));
  m.shared_ffn = int(f.get_int("shared_expert_intermediate_size", 1, kMaxDim * 4));
  m.shared_gate = true;
  m.norm_topk_prob = f.get_bool("norm_topk_prob", true);
  cfg.layer_moe.assign(size_t(cfg.n_layers), true);
  cfg.ffn_size = 0;

  // ---- hyper-connections ----
  q4.hc_count = int(f.get_int("hc_count", 4, 1, 64));
  if (q4.hc_count <= 1) bad_input(f.field("hc_count"), " = ", q4.hc_count, ": Qwen4-Exp needs more than one stream");
  q4.hc_lowrank = int(f.get_int("hc_lowrank", 320, 1, kMaxDim));

  // ---- PLE: hashed n-gram embeddings on the listed (one-indexed) linear-attention layers ----
  q4.ple_index.assign(size_t(cfg.n_layers), -1);
  cfg.layer_aux_state.assign(size_t(cfg.n_layers), 0);
  if (f.has("ple_layer_ids")) {
    const auto& ids = f.get("ple_layer_ids");
    if (!ids.is_array()) bad_input(f.field("ple_layer_ids"), " must be a list of one-indexed layer ids");
    std::vector<int> layers;
    for (const auto& x : ids) {
      if (!x.is_number_integer() || x.get<int64_t>() < 1 || x.get<int64_t>() > cfg.n_layers)
        bad_input(f.field("ple_layer_ids"), " holds ", x.dump(), ", not a one-indexed layer id in [1, ", cfg.n_layers, "]");
      const int l = int(x.get<int64_t>()) - 1;
      if (cfg.layer_kinds[size_t(l)] != LayerKind::kLinearAttention)
        bad_input(f.field("ple_layer_ids"), " holds ", l + 1, ", which is not a linear_attention layer");
      layers.push_back(l);
    }
    std::sort(layers.begin(), layers.end());
    layers.erase(std::unique(layers.begin(), layers.end()), layers.end());
    for (size_t k = 0; k < layers.size(); ++k) q4.ple_index[size_t(layers[k])] = int(k);
    if (!layers.empty()) {
      q4.ngram_size = int(f.get_int("ngram_size", 3, 2, 16));
      q4.heads_per_ngram = int(f.get_int("heads_per_ngram", 8, 1, 1024));
      q4.ple_embed_dim = int(f.get_int("ple_embed_dim", cfg.hidden_size, 1, kMaxDim));
      if (q4.ple_embed_dim % q4.ngram_heads() != 0)
        bad_input(f.field("ple_embed_dim"), " = ", q4.ple_embed_dim, " is not divisible by the ", q4.ngram_heads(),
                  " n-gram heads ((ngram_size - 1) x heads_per_ngram)");
      q4.ple_conv_kernel = int(f.get_int("ple_conv_kernel_size", 4, 1, 64));
      q4.ngram_vocab_base = f.get_int("ngram_vocab_size_base", 20000000, 2, int64_t(1) << 40);
      q4.ngram_vocab_divisor = f.get_int("make_ngram_vocab_size_divisible_by", 128, 1, 1 << 20);
      q4.seed = uint64_t(f.get_int("seed", 1234, 0, INT64_MAX));
      q4.ngram_shards = int(f.get_int("split_ngram_parts", 512, 1, 1 << 20));
      q4.eos = eos_token_id(f, top);
      if (q4.eos < 0 || q4.eos >= cfg.vocab_size)
        bad_input(f.field("eos_token_id"), " must be a token id in the vocabulary when ple_layer_ids is set");
      cfg.token_context = q4.ngram_size - 1;
      const int64_t streams = int64_t(q4.hc_count) * cfg.hidden_size;
      for (int l : layers)
        cfg.layer_aux_state[size_t(l)] = streams * int64_t(q4.ple_conv_kernel - 1) * q4.ngram_size;
    }
  }

  const int eos = eos_token_id(f, top);
  if (eos >= 0) {
    if (eos >= cfg.vocab_size) bad_input(f.field("eos_token_id"), " = ", eos, " is outside the vocabulary");
    cfg.eos_token_ids = {eos};
  }
  cfg.bos_token_id = first_token_id(f, "bos_token_id");
  return cfg;
}

}  // namespace kestrel
