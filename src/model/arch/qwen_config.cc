// config.json -> ModelConfig for the Qwen line, validated field by field before anything is sized.
#include <algorithm>
#include <set>

#include "core/error.h"
#include "io/json_fields.h"
#include "model/arch/config_common.h"
#include "model/arch/qwen.h"

namespace kestrel {
namespace {

constexpr int64_t kMaxDim = 1 << 16;


void parse_rope(const JsonFields& f, ModelConfig& cfg) {
  double theta = f.get_double("rope_theta", 10000.0, 1.0, 1e12);
  double partial = f.get_double("partial_rotary_factor", 1.0, 0.0, 1.0);
  if (f.has("rope_scaling")) {
    const auto& rs = f.get("rope_scaling");
    std::string type = rs.is_object() ? rs.value("rope_type", rs.value("type", "default")) : "?";
    if (type != "default" && type != "mrope")
      unsupported(f.field("rope_scaling"), ": rope type '", type, "' is not supported (only default RoPE)");
  }
  if (f.has("rope_parameters")) {
    JsonFields rp(f.get("rope_parameters"), f.field("rope_parameters"));
    std::string type = rp.get_string("rope_type", "default");
    if (type != "default")
      unsupported(rp.field("rope_type"), " = '", type, "' is not supported (only default RoPE)");
    theta = rp.get_double("rope_theta", theta, 1.0, 1e12);
    partial = rp.get_double("partial_rotary_factor", partial, 0.0, 1.0);
    if (rp.has("mrope_section")) {
      // Multimodal RoPE: text-only positions are equal in every section, so it is plain RoPE.
      const auto& sec = rp.get("mrope_section");
      int64_t sum = 0;
      if (!sec.is_array()) bad_input(rp.field("mrope_section"), " must be a list of integers");
      for (const auto& s : sec) {
        // Bounded before summing: a huge entry must not overflow the sum.
        if (!s.is_number_integer() || s.get<int64_t>() < 0 || s.get<int64_t>() > 1024)
          bad_input(rp.field("mrope_section"), " must be a list of integers in [0, 1024], got ", sec.dump());
        sum += s.get<int64_t>();
      }
      cfg.attn.rope.freq_dim = 0;
      int rot = int(double(cfg.attn.head_dim) * partial);
      if (sum * 2 != rot)
        bad_input(rp.field("mrope_section"), " sums to ", sum, " but the rotary half-dimension is ", rot / 2);
    }
  }
  cfg.attn.rope.theta = theta;
  int rot = int(double(cfg.attn.head_dim) * partial);
  if (rot % 2 != 0) bad_input(f.where(), ": rotary dimension head_dim x partial_rotary_factor = ", rot, " must be even");
  cfg.attn.rope.rotary_dim = rot;
}

}  // namespace

ModelConfig parse_qwen_config(const nlohmann::json& root, const std::string& path) {
  JsonFields top(root, path);
  ModelConfig cfg;
  const JsonFields f = text_config_fields(top, path, "qwen", cfg);

  const std::string& mt = cfg.model_type;
  const bool hybrid = mt.rfind("qwen3_next", 0) == 0 || mt.rfind("qwen3_5", 0) == 0;
  const bool moe_family = mt == "qwen3_moe" || mt == "qwen3_next" || mt.rfind("qwen3_5_moe", 0) == 0;

  cfg.vocab_size = f.get_int("vocab_size", 1, 1 << 24);
  cfg.hidden_size = f.get_int("hidden_size", 1, kMaxDim);
  cfg.n_layers = int(f.get_int("num_hidden_layers", 1, 1024));
  cfg.max_positions = int(f.get_int("max_position_embeddings", 32768, 1, 1 << 24));
  cfg.norm_eps = float(f.get_double("rms_norm_eps", 1e-6, 1e-12, 1e-1));
  cfg.zero_centered_norm = hybrid;  // Qwen3-Next / 3.5 store RMSNorm weights as w, scale (1 + w)
  cfg.tie_embeddings = f.get_bool("tie_word_embeddings", top.get_bool("tie_word_embeddings", false));

  std::string act = f.get_string("hidden_act", "silu");
  if (act != "silu") unsupported(f.field("hidden_act"), " = '", act, "' is not supported (expected silu)");
  if (f.get_bool("attention_bias", false))
    unsupported(f.field("attention_bias"), " = true is not supported (Qwen attention has no biases)");
  if (f.get_bool("use_sliding_window", false))
    unsupported(f.field("use_sliding_window"), " = true is not supported for ", mt);

  // attention
  auto& at = cfg.attn;
  at.n_heads = int(f.get_int("num_attention_heads", 1, 1024));
  at.n_kv_heads = int(f.get_int("num_key_value_heads", at.n_heads, 1, 1024));
  if (at.n_heads % at.n_kv_heads != 0)
    bad_input(f.field("num_attention_heads"), " = ", at.n_heads, " is not a multiple of num_key_value_heads = ",
              at.n_kv_heads);
  if (!f.has("head_dim") && cfg.hidden_size % at.n_heads != 0)
    bad_input(f.field("hidden_size"), " is not a multiple of num_attention_heads and head_dim is not given");
  at.head_dim = int(f.get_int("head_dim", cfg.hidden_size / at.n_heads, 2, 1024));
  at.output_gate = hybrid;
  at.qk_norm = true;
  at.scale = float(1.0 / std::sqrt(double(at.head_dim)));
  parse_rope(f, cfg);

  // layer pattern
  cfg.layer_kinds.assign(size_t(cfg.n_layers), LayerKind::kFullAttention);
  if (f.has("layer_types")) {
    const auto& lt = f.get("layer_types");
    if (!lt.is_array() || int(lt.size()) != cfg.n_layers)
      bad_input(f.field("layer_types"), " must list one type per layer (", cfg.n_layers, "), got ", lt.dump().substr(0, 200));
    for (int i = 0; i < cfg.n_layers; ++i) {
      std::string t = lt[size_t(i)].is_string() ? lt[size_t(i)].get<std::string>() : lt[size_t(i)].dump();
      if (t == "full_attention") cfg.layer_kinds[size_t(i)] = LayerKind::kFullAttention;
      else if (t == "linear_attention" && hybrid) cfg.layer_kinds[size_t(i)] = LayerKind::kLinearAttention;
      else unsupported(f.field("layer_types"), "[", i, "] = '", t, "' is not supported for ", mt);
    }
  } else if (hybrid) {
    int interval = int(f.get_int("full_attention_interval", 4, 1, 1024));
    for (int i = 0; i < cfg.n_layers; ++i)
      cfg.layer_kinds[size_t(i)] = (i + 1) % interval == 0 ? LayerKind::kFullAttention : LayerKind::kLinearAttention;
  }

  // Gated DeltaNet
  if (cfg.count_layers(LayerKind::kLinearAttention) > 0) read_deltanet_config(f, cfg.gdn);

  // feed-forward: dense MLP and/or MoE per layer
  cfg.layer_moe.assign(size_t(cfg.n_layers), false);
  if (moe_family) {
    auto& m = cfg.moe;
    const char* experts_key = f.has("num_experts") ? "num_experts" : "num_local_experts";
    m.n_experts = int(f.get_int(experts_key, 1, 4096));
    m.top_k = int(f.get_int("num_experts_per_tok", 1, 4096));
    if (m.top_k > m.n_experts)
      bad_input(f.field("num_experts_per_tok"), " = ", m.top_k, " exceeds the number of experts ", m.n_experts);
    m.expert_ffn = int(f.get_int("moe_intermediate_size", 1, kMaxDim * 4));
    m.norm_topk_prob = f.get_bool("norm_topk_prob", mt != "qwen3_moe" ? true : false);
    if (mt != "qwen3_moe") {
      m.shared_ffn = int(f.get_int("shared_expert_intermediate_size", 0, 0, kMaxDim * 4));
      m.shared_gate = m.shared_ffn > 0;
    }
    int step = int(f.get_int("decoder_sparse_step", 1, 1, 1024));
    std::set<int> mlp_only;
    if (f.has("mlp_only_layers")) {
      const auto& mo = f.get("mlp_only_layers");
      if (!mo.is_array()) bad_input(f.field("mlp_only_layers"), " must be a list of layer indices");
      for (const auto& x : mo) {
        if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= cfg.n_layers)
          bad_input(f.field("mlp_only_layers"), " holds ", x.dump(), ", not a layer index in [0, ", cfg.n_layers, ")");
        mlp_only.insert(int(x.get<int64_t>()));
      }
    }
    for (int i = 0; i < cfg.n_layers; ++i) cfg.layer_moe[size_t(i)] = !mlp_only.count(i) && (i + 1) % step == 0;
  }
  bool any_dense = std::count(cfg.layer_moe.begin(), cfg.layer_moe.end(), false) > 0;
  cfg.ffn_size = any_dense ? f.get_int("intermediate_size", 1, kMaxDim * 4) : f.get_int("intermediate_size", 0, 0, kMaxDim * 4);

  read_eos_bos(f, top, cfg);
  return cfg;
}

}  // namespace kestrel
