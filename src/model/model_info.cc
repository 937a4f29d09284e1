#include "model/model_info.h"

#include <set>

#include "cache/model_cache.h"
#include "convert/gguf_model.h"
#include "convert/gguf_names.h"
#include "core/files.h"
#include "io/safetensors.h"
#include "model/loader.h"

namespace kestrel {
namespace {

std::string read_architecture(const std::string& dir, std::string* text_model_type) {
  nlohmann::json root = nlohmann::json::parse(read_file(path_join(dir, "config.json")), nullptr, false);
  std::string arch;
  if (root.is_object() && root.contains("architectures") && root["architectures"].is_array() &&
      !root["architectures"].empty() && root["architectures"][0].is_string())
    arch = root["architectures"][0].get<std::string>();
  if (root.is_object() && root.contains("text_config") && root["text_config"].is_object() &&
      root["text_config"].contains("model_type") && root["text_config"]["model_type"].is_string())
    *text_model_type = root["text_config"]["model_type"].get<std::string>();
  return arch;
}

}  // namespace

std::string layer_pattern(const std::vector<LayerKind>& kinds) {
  const size_t n = kinds.size();
  if (n == 0) return "";
  size_t period = n;
  for (size_t p = 1; p < n; ++p) {
    if (n % p != 0) continue;
    bool repeats = true;
    for (size_t i = p; i < n && repeats; ++i) repeats = kinds[i] == kinds[i - p];
    if (repeats) {
      period = p;
      break;
    }
  }
  std::string out;
  for (size_t i = 0; i < period;) {
    size_t j = i;
    while (j < period && kinds[j] == kinds[i]) ++j;
    if (!out.empty()) out += " + ";
    if (j - i > 1) out += std::to_string(j - i) + "×";
    out += layer_kind_name(kinds[i]);
    i = j;
  }
  if (n / period > 1) out += ", ×" + std::to_string(n / period);
  return out;
}

namespace {

// A GGUF file's config and text weights: the tensors the loader reads (llama.cpp's generated
// rope_freqs and multi-token-prediction blocks are not), at their stored sizes — block formats
// quantized, as the CPU backend keeps them.
void gguf_info(const std::string& path, ModelInfo& info) {
  const GgufFile f = GgufFile::open(path);
  info.config = gguf_model_config(f);
  info.architecture = "GGUF " + f.get_string("general.architecture");
  const GgufLayout layout =
      gguf_layout(info.config, [&](const std::string& gguf, const std::string&) { return f.find_tensor(gguf) != nullptr; });
  std::set<std::string> used, dtypes;
  for (const GgufTensorPlan& p : layout.tensors) {
    const GgufTensor* t = f.find_tensor(p.name);
    if (p.rows.empty() || !t || !used.insert(p.name).second) continue;
    info.n_params += uint64_t(t->numel());
    info.weight_bytes += t->nbytes;
    dtypes.insert(std::string(ggml_type_name(t->type)));
  }
  for (const GgufTensor& t : f.tensors()) {
    if (used.count(t.name)) continue;
    ++info.n_other_tensors;
    info.other_params += uint64_t(t.numel());
  }
  for (const auto& d : dtypes) info.weight_dtypes += (info.weight_dtypes.empty() ? "" : "+") + d;
}

void checkpoint_info(const std::string& dir, ModelInfo& info) {
  info.config = load_config(dir);
  info.architecture = read_architecture(dir, &info.text_model_type);
  const ModelConfig& cfg = info.config;
  Checkpoint ck = Checkpoint::open_dir(dir);
  // As load_model does: some checkpoints keep text weights at the top level under a wrapper config.
  std::string prefix = cfg.weight_prefix;
  if (!ck.find(prefix + "embed_tokens.weight") && ck.find("model.embed_tokens.weight")) prefix = "model.";
  info.config.weight_prefix = prefix;
  std::set<std::string> dtypes;
  for (const auto& [name, t] : ck.tensors()) {
    const bool text = name.rfind(prefix, 0) == 0 || name == "lm_head.weight";
    const uint64_t n = uint64_t(t->numel());
    if (text) {
      info.n_params += n;
      info.weight_bytes += t->nbytes;
      dtypes.insert(std::string(dtype_name(t->dtype)));
    } else {
      ++info.n_other_tensors;
      info.other_params += n;
    }
  }
  for (const auto& d : dtypes) info.weight_dtypes += (info.weight_dtypes.empty() ? "" : "+") + d;
}

}  // namespace

ModelInfo model_info(const std::string& dir, const MemoryPlanParams& plan) {
  ModelInfo info;
  info.dir = dir;
  if (is_gguf_file(dir)) gguf_info(dir, info);
  else checkpoint_info(dir, info);
  const ModelConfig& cfg = info.config;
  info.layer_pattern = layer_pattern(cfg.layer_kinds);
  info.plan = plan;
  const CacheCosts costs = cache_costs(cfg, plan.block_size, plan.kv_bf16 ? 2 : 4);
  info.kv_bytes_per_token = costs.bytes_per_block / uint64_t(plan.block_size);
  info.state_bytes_per_seq = costs.bytes_per_slot;
  const uint64_t blocks_per_seq = uint64_t((plan.ctx + plan.block_size - 1) / plan.block_size);
  info.kv_bytes = blocks_per_seq * uint64_t(plan.seqs) * costs.bytes_per_block;
  info.state_bytes = uint64_t(plan.seqs) * costs.bytes_per_slot;
  info.total_bytes = info.weight_bytes + info.kv_bytes + info.state_bytes;
  return info;
}

nlohmann::json model_info_json(const ModelInfo& info) {
  const ModelConfig& c = info.config;
  nlohmann::json layer_types = nlohmann::json::array();
  for (LayerKind k : c.layer_kinds) layer_types.push_back(layer_kind_name(k));
  nlohmann::json j = {
      {"model", info.dir},
      {"architecture", info.architecture},
      {"model_type", c.model_type},
      {"text_model_type", info.text_model_type},
      {"layers", c.n_layers},
      {"layer_pattern", info.layer_pattern},
      {"layer_types", layer_types},
      {"hidden_size", c.hidden_size},
      {"vocab_size", c.vocab_size},
      {"ffn_size", c.ffn_size},
      {"tie_embeddings", c.tie_embeddings},
      {"max_positions", c.max_positions},
      {"attention",
       {{"layers", c.count_layers(LayerKind::kFullAttention) + c.count_layers(LayerKind::kSlidingAttention)},
        {"heads", c.attn.n_heads},
        {"kv_heads", c.attn.n_kv_heads},
        {"head_dim", c.attn.head_dim},
        {"output_gate", c.attn.output_gate},
        {"rotary_dim", c.attn.rope.rotary_dim},
        {"rope_theta", c.attn.rope.theta}}},
      {"parameters", info.n_params},
      {"weight_bytes", info.weight_bytes},
      {"weight_dtypes", info.weight_dtypes},
      {"skipped_tensors", info.n_other_tensors},
      {"skipped_parameters", info.other_params},
      {"kv_bytes_per_token", info.kv_bytes_per_token},
      {"kv_cache_dtype", info.plan.kv_bf16 ? "BF16" : "F32"},
      {"state_bytes_per_sequence", info.state_bytes_per_seq},
      {"memory",
       {{"ctx", info.plan.ctx},
        {"seqs", info.plan.seqs},
        {"weights", info.weight_bytes},
        {"kv_cache", info.kv_bytes},
        {"state", info.state_bytes},
        {"total", info.total_bytes}}},
  };
  if (c.count_layers(LayerKind::kLinearAttention) > 0) {
    j["gated_deltanet"] = {{"layers", c.count_layers(LayerKind::kLinearAttention)},
                           {"key_heads", c.gdn.n_k_heads},
                           {"value_heads", c.gdn.n_v_heads},
                           {"key_head_dim", c.gdn.k_head_dim},
                           {"value_head_dim", c.gdn.v_head_dim},
                           {"conv_kernel", c.gdn.conv_kernel},
                           {"value_head_order", c.gdn.tiled_value_heads ? "tiled" : "grouped"}};
  }
  if (c.has_moe()) {
    int moe_layers = 0;
    for (bool m : c.layer_moe) moe_layers += m;
    j["moe"] = {{"layers", moe_layers},
                {"experts", c.moe.n_experts},
                {"top_k", c.moe.top_k},
                {"expert_ffn", c.moe.expert_ffn},
                {"shared_ffn", c.moe.shared_ffn},
                {"norm_topk_prob", c.moe.norm_topk_prob}};
  }
  return j;
}

}  // namespace kestrel
