#include "convert/qwen_gguf_names.h"

#include "core/error.h"

namespace kestrel {

std::string gguf_arch_name(const ModelConfig& cfg) {
  if (cfg.model_type == "qwen3") return "qwen3";
  if (cfg.model_type == "qwen3_moe") return "qwen3moe";
  unsupported("GGUF: model_type '", cfg.model_type,
              "' cannot be converted to GGUF yet (supported: qwen3, qwen3_moe; see docs/gguf.md)");
}

std::string model_type_for_gguf_arch(const std::string& arch) {
  if (arch == "qwen3") return "qwen3";
  if (arch == "qwen3moe") return "qwen3_moe";
  return "";
}

std::vector<GgufNameMap> qwen_gguf_names(const ModelConfig& cfg) {
  gguf_arch_name(cfg);  // refuses other families by name
  std::vector<GgufNameMap> out;
  const std::string& m = cfg.weight_prefix;
  const int64_t H = cfg.hidden_size, V = cfg.vocab_size;
  const int64_t hd = cfg.attn.head_dim, nq = cfg.attn.n_heads, nkv = cfg.attn.n_kv_heads;
  auto one = [&](std::string gguf, std::string hf, std::vector<int64_t> shape, bool f32 = false) {
    out.push_back({std::move(gguf), {std::move(hf)}, std::move(shape), f32});
  };
  one("token_embd.weight", m + "embed_tokens.weight", {V, H});
  for (int l = 0; l < cfg.n_layers; ++l) {
    const std::string hf = m + "layers." + std::to_string(l) + ".", blk = "blk." + std::to_string(l) + ".";
    if (cfg.layer_kinds[size_t(l)] != LayerKind::kFullAttention)
      unsupported("GGUF: layer ", l, " is ", layer_kind_name(cfg.layer_kinds[size_t(l)]), ", not supported yet");
    one(blk + "attn_norm.weight", hf + "input_layernorm.weight", {H}, true);
    one(blk + "attn_q.weight", hf + "self_attn.q_proj.weight", {nq * hd, H});
    one(blk + "attn_k.weight", hf + "self_attn.k_proj.weight", {nkv * hd, H});
    one(blk + "attn_v.weight", hf + "self_attn.v_proj.weight", {nkv * hd, H});
    one(blk + "attn_output.weight", hf + "self_attn.o_proj.weight", {H, nq * hd});
    one(blk + "attn_q_norm.weight", hf + "self_attn.q_norm.weight", {hd}, true);
    one(blk + "attn_k_norm.weight", hf + "self_attn.k_norm.weight", {hd}, true);
    one(blk + "ffn_norm.weight", hf + "post_attention_layernorm.weight", {H}, true);
    if (cfg.layer_moe[size_t(l)]) {
      const MoeConfig& moe = cfg.moe;
      if (moe.shared_ffn > 0) unsupported("GGUF: shared experts are not supported yet");
      one(blk + "ffn_gate_inp.weight", hf + "mlp.gate.weight", {moe.n_experts, H}, true);
      const char* projs[3][2] = {{"gate_proj", "ffn_gate_exps"}, {"up_proj", "ffn_up_exps"}, {"down_proj", "ffn_down_exps"}};
      for (auto& [proj, name] : projs) {
        GgufNameMap e{blk + name + ".weight", {}, {}, false};
        const bool down = std::string(proj) == "down_proj";
        e.hf_shape = down ? std::vector<int64_t>{H, moe.expert_ffn} : std::vector<int64_t>{moe.expert_ffn, H};
        for (int x = 0; x < moe.n_experts; ++x)
          e.hf.push_back(hf + "mlp.experts." + std::to_string(x) + "." + proj + ".weight");
        out.push_back(std::move(e));
      }
    } else {
      one(blk + "ffn_gate.weight", hf + "mlp.gate_proj.weight", {cfg.ffn_size, H});
      one(blk + "ffn_up.weight", hf + "mlp.up_proj.weight", {cfg.ffn_size, H});
      one(blk + "ffn_down.weight", hf + "mlp.down_proj.weight", {H, cfg.ffn_size});
    }
  }
  one("output_norm.weight", m + "norm.weight", {H}, true);
  if (!cfg.tie_embeddings) one("output.weight", "lm_head.weight", {V, H});
  return out;
}

}  // namespace kestrel
