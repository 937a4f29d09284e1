// config.json -> ModelConfig for Gemma 4, validated field by field before anything is sized.
//
// Full-attention layers may have their own head size and KV-head count, written either the
// released way (`global_head_dim`, `num_global_key_value_heads` with `attention_k_eq_v`) or the
// way transformers 5.17 saves them (`per_layer_config`: {"<layer index>": {"head_dim": ..,
// "num_key_value_heads": ..}}, also accepted keyed by layer type).
#include <cmath>
#include <cstdlib>

#include "core/error.h"
#include "io/json_fields.h"
#include "model/arch/config_common.h"
#include "model/arch/gemma4.h"

namespace kestrel {
namespace {

constexpr int64_t kMaxDim = 1 << 16;


// RoPE of one layer type from rope_parameters[type].
RopeConfig parse_rope(const JsonFields& f, const std::string& type, int head_dim) {
  if (!f.has("rope_parameters")) bad_input(f.field("rope_parameters"), " is required (one entry per layer type)");
  const auto& all = f.get("rope_parameters");
  if (!all.is_object() || !all.contains(type) || !all[type].is_object())
    bad_input(f.field("rope_parameters"), " has no entry for layer type '", type, "'");
  JsonFields rp(all[type], f.field("rope_parameters") + "['" + type + "']");
  const std::string kind = rp.get_string("rope_type", "default");
  RopeConfig r;
  r.theta = rp.get_double("rope_theta", 10000.0, 1.0, 1e12);
  const double partial = rp.get_double("partial_rotary_factor", 1.0, 0.0, 1.0);
  if (rp.has("factor") && rp.get_double("factor", 0.0, 1e6) != 1.0)
    unsupported(rp.field("factor"), " != 1 (scaled RoPE) is not supported");
  if (kind == "default") {
    r.rotary_dim = int(double(head_dim) * partial);
    if (r.rotary_dim % 2 != 0) bad_input(rp.field("partial_rotary_factor"), ": rotary dimension ", r.rotary_dim, " is odd");
  } else if (kind == "proportional") {
    // Frequencies theta^(-2i/head_dim) for the first partial*head_dim/2 pairs, 0 for the rest,
    // rotate_half over the whole head.
    r.rotary_dim = 2 * int(partial * double(head_dim) / 2.0);
    r.freq_dim = head_dim;
    r.whole_head_pairs = true;
  } else {
    unsupported(rp.field("rope_type"), " = '", kind, "' is not supported (default or proportional)");
  }
  return r;
}

}  // namespace

ModelConfig parse_gemma4_config(const nlohmann::json& root, const std::string& path) {
  JsonFields top(root, path);
  ModelConfig cfg;
  const JsonFields f = text_config_fields(top, path, "gemma4", cfg);

  cfg.vocab_size = f.get_int("vocab_size", 1, 1 << 24);
  cfg.hidden_size = f.get_int("hidden_size", 1, kMaxDim);
  cfg.n_layers = int(f.get_int("num_hidden_layers", 1, 1024));
  cfg.max_positions = int(f.get_int("max_position_embeddings", 131072, 1, 1 << 24));
  cfg.norm_eps = float(f.get_double("rms_norm_eps", 1e-6, 1e-12, 1e-1));
  cfg.zero_centered_norm = false;  // Gemma 4 RMSNorm is x * w (not Gemma 1-3's 1 + w)
  cfg.tie_embeddings = f.get_bool("tie_word_embeddings", top.get_bool("tie_word_embeddings", true));
  // transformers scales by hidden**0.5 cast to the weights' dtype; in fp32 (our activations)
  // that is the fp32 value of sqrt(hidden). (A bf16 run rounds it, e.g. sqrt(3072) -> 55.5.)
  cfg.embed_scale = std::sqrt(double(cfg.hidden_size));
  if (f.has("final_logit_softcapping"))
    cfg.final_logit_softcap = float(f.get_double("final_logit_softcapping", 1e-3, 1e6));

  std::string act = f.get_string("hidden_activation", f.get_string("hidden_act", "gelu_pytorch_tanh"));
  if (act != "gelu_pytorch_tanh")
    unsupported(f.field("hidden_activation"), " = '", act, "' is not supported (expected gelu_pytorch_tanh)");
  if (f.get_bool("attention_bias", false)) unsupported(f.field("attention_bias"), " = true is not supported");
  if (f.has("attn_logit_softcapping"))
    unsupported(f.field("attn_logit_softcapping"), " is not supported (Gemma 4 has no attention softcap)");
  if (f.has("use_bidirectional_attention")) {
    const auto& b = f.get("use_bidirectional_attention");
    if (!(b.is_boolean() && !b.get<bool>()))
      unsupported(f.field("use_bidirectional_attention"), " = ", b.dump(), " is not supported (causal text only)");
  }

  // ---- attention: the sliding-layer geometry, then the full layers' overrides ----
  AttentionConfig base;
  base.n_heads = int(f.get_int("num_attention_heads", 1, 1024));
  base.n_kv_heads = int(f.get_int("num_key_value_heads", base.n_heads, 1, 1024));
  base.head_dim = int(f.get_int("head_dim", 2, 4096));
  base.qk_norm = true;
  base.v_norm = true;
  base.scale = 1.0f;  // q and k are RMS-normalized; no 1/sqrt(d)
  if (base.n_heads % base.n_kv_heads != 0)
    bad_input(f.field("num_attention_heads"), " = ", base.n_heads, " is not a multiple of num_key_value_heads = ",
              base.n_kv_heads);
  const bool k_eq_v = f.get_bool("attention_k_eq_v", false);

  if (!f.has("layer_types")) bad_input(f.field("layer_types"), " is required (sliding_attention / full_attention per layer)");
  const auto& lt = f.get("layer_types");
  if (!lt.is_array() || int(lt.size()) != cfg.n_layers)
    bad_input(f.field("layer_types"), " must list one type per layer (num_hidden_layers = ", cfg.n_layers, "), got ",
              lt.dump().substr(0, 200));
  cfg.layer_kinds.resize(size_t(cfg.n_layers));
  for (int i = 0; i < cfg.n_layers; ++i) {
    std::string t = lt[size_t(i)].is_string() ? lt[size_t(i)].get<std::string>() : lt[size_t(i)].dump();
    if (t == "full_attention") cfg.layer_kinds[size_t(i)] = LayerKind::kFullAttention;
    else if (t == "sliding_attention") cfg.layer_kinds[size_t(i)] = LayerKind::kSlidingAttention;
    else bad_input(f.field("layer_types"), "[", i, "] = '", t, "' is not a Gemma 4 layer type (sliding_attention or full_attention)");
  }
  const int n_sliding = cfg.count_layers(LayerKind::kSlidingAttention);
  const int window = n_sliding > 0 ? int(f.get_int("sliding_window", 1, 1 << 24)) : 0;

  // Full-layer geometry: released form first, per_layer_config overrides per layer.
  std::vector<int> head_dim(size_t(cfg.n_layers), base.head_dim), kv_heads(size_t(cfg.n_layers), base.n_kv_heads);
  const int global_hd = f.has("global_head_dim") ? int(f.get_int("global_head_dim", 2, 4096)) : base.head_dim;
  const int global_kv = k_eq_v && f.has("num_global_key_value_heads")
                            ? int(f.get_int("num_global_key_value_heads", 1, 1024))
                            : base.n_kv_heads;
  for (int i = 0; i < cfg.n_layers; ++i) {
    if (cfg.layer_kinds[size_t(i)] != LayerKind::kFullAttention) continue;
    head_dim[size_t(i)] = global_hd;
    kv_heads[size_t(i)] = global_kv;
  }
  if (f.has("per_layer_config")) {
    const auto& plc = f.get("per_layer_config");
    if (!plc.is_object()) bad_input(f.field("per_layer_config"), " must be an object keyed by layer index");
    for (auto it = plc.begin(); it != plc.end(); ++it) {
      const std::string where = f.field("per_layer_config") + "['" + it.key() + "']";
      std::vector<int> layers;
      if (it.key() == "full_attention" || it.key() == "sliding_attention") {
        for (int i = 0; i < cfg.n_layers; ++i)
          if (layer_kind_name(cfg.layer_kinds[size_t(i)]) == it.key()) layers.push_back(i);
      } else {
        char* end = nullptr;
        long idx = std::strtol(it.key().c_str(), &end, 10);
        if (it.key().empty() || *end != '\0' || idx < 0 || idx >= cfg.n_layers)
          bad_input(where, ": not a layer index in [0, ", cfg.n_layers, ") or a layer type");
        layers.push_back(int(idx));
      }
      if (!it.value().is_object()) bad_input(where, " must be an object");
      JsonFields lf(it.value(), where);
      for (auto kv = it.value().begin(); kv != it.value().end(); ++kv) {
        if (kv.key() != "head_dim" && kv.key() != "num_key_value_heads")
          unsupported(lf.field(kv.key()), " is not supported in per_layer_config (head_dim, num_key_value_heads)");
      }
      for (int l : layers) {
        head_dim[size_t(l)] = int(lf.get_int("head_dim", head_dim[size_t(l)], 2, 4096));
        kv_heads[size_t(l)] = int(lf.get_int("num_key_value_heads", kv_heads[size_t(l)], 1, 1024));
        if (base.n_heads % kv_heads[size_t(l)] != 0)
          bad_input(lf.field("num_key_value_heads"), " = ", kv_heads[size_t(l)], " does not divide num_attention_heads = ",
                    base.n_heads);
      }
    }
  }

  // ---- KV sharing ----
  const int n_shared = int(f.get_int("num_kv_shared_layers", 0, 0, 1 << 20));
  if (n_shared >= cfg.n_layers)
    bad_input(f.field("num_kv_shared_layers"), " = ", n_shared, " leaves no layer to compute K/V (num_hidden_layers = ",
              cfg.n_layers, ")");
  const int first_shared = cfg.n_layers - n_shared;
  cfg.layer_attn.resize(size_t(cfg.n_layers));
  for (int i = 0; i < cfg.n_layers; ++i) {
    const LayerKind kind = cfg.layer_kinds[size_t(i)];
    const std::string type = layer_kind_name(kind);
    LayerAttention& la = cfg.layer_attn[size_t(i)];
    la.attn = base;
    la.attn.head_dim = head_dim[size_t(i)];
    la.attn.n_kv_heads = kv_heads[size_t(i)];
    la.attn.k_eq_v = k_eq_v && kind == LayerKind::kFullAttention;
    la.attn.rope = parse_rope(f, type, la.attn.head_dim);
    la.window = kind == LayerKind::kSlidingAttention ? window : 0;
    la.kv_source = i;
    if (i >= first_shared) {
      // the last non-shared layer of the same type
      int src = -1;
      for (int j = first_shared - 1; j >= 0; --j) {
        if (cfg.layer_kinds[size_t(j)] == kind) {
          src = j;
          break;
        }
      }
      if (src < 0)
        bad_input(f.field("num_kv_shared_layers"), " = ", n_shared, ": shared layer ", i, " (", type,
                  ") has no earlier non-shared ", type, " layer to take K/V from");
      if (head_dim[size_t(src)] != head_dim[size_t(i)] || kv_heads[size_t(src)] != kv_heads[size_t(i)])
        bad_input(f.field("per_layer_config"), ": KV-shared layer ", i, " has head_dim ", head_dim[size_t(i)], " x ",
                  kv_heads[size_t(i)], " KV heads but its source layer ", src, " has ", head_dim[size_t(src)], " x ",
                  kv_heads[size_t(src)]);
      la.kv_source = src;
    }
  }
  cfg.attn = cfg.layer_attn[0].attn;

  // ---- feed-forward ----
  cfg.ffn_size = f.get_int("intermediate_size", 1, kMaxDim * 4);
  const bool double_wide = f.get_bool("use_double_wide_mlp", false);
  cfg.layer_ffn.assign(size_t(cfg.n_layers), cfg.ffn_size);
  if (double_wide) {
    for (int i = first_shared; i < cfg.n_layers && n_shared > 0; ++i) cfg.layer_ffn[size_t(i)] = 2 * cfg.ffn_size;
  }
  cfg.layer_moe.assign(size_t(cfg.n_layers), false);
  if (f.get_bool("enable_moe_block", false)) {
    auto& m = cfg.moe;
    m.n_experts = int(f.get_int("num_experts", 1, 4096));
    m.top_k = int(f.get_int("top_k_experts", 1, 4096));
    if (m.top_k > m.n_experts)
      bad_input(f.field("top_k_experts"), " = ", m.top_k, " exceeds num_experts = ", m.n_experts);
    m.expert_ffn = int(f.get_int("moe_intermediate_size", 1, kMaxDim * 4));
    m.norm_topk_prob = true;
    cfg.layer_moe.assign(size_t(cfg.n_layers), true);  // every layer: MoE beside the dense MLP
  }

  // ---- per-layer embeddings ----
  cfg.per_layer_input_dim = int(f.get_int("hidden_size_per_layer_input", 0, 0, kMaxDim));
  if (cfg.per_layer_input_dim > 0)
    cfg.per_layer_vocab = f.get_int("vocab_size_per_layer_input", cfg.vocab_size, 1, 1 << 24);

  read_eos_bos(f, top, cfg);
  return cfg;
}

}  // namespace kestrel
