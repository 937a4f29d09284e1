// The released-model table (docs/models.md) as data, and the config.json each model ships with.
//
// Sources: copies of the published config.json files in public repositories, cross-checked
// against ../shared/released-models.md. Fields marked in `unconfirmed` were not independently
// confirmed; keep them and docs/models.md in step.
#include "model/presets.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"

namespace kestrel {
namespace {

using nlohmann::json;
using PF = PresetFamily;

// Qwen3.5 vision towers: 0.8B (and 2B) ship a 12-block 768-wide tower, the larger ones 27 x 1152.
constexpr VisionShape kVisionSmall{.depth = 12, .hidden = 768, .heads = 12, .ffn = 3072};
constexpr VisionShape kVisionLarge{.depth = 27, .hidden = 1152, .heads = 16, .ffn = 4304};

const std::vector<int> kMrope{11, 11, 10};
const std::vector<int> kQwen35Eos{248046, 248044};  // <|im_end|>, <|endoftext|>
const std::vector<int> kQwen3Eos{151645, 151643};

ModelPreset qwen35(std::string name, int64_t H, int L, int heads, int kv, int gdn_v, int64_t ffn, bool tied,
                   VisionShape vision, std::string unconfirmed = "") {
  return {.name = std::move(name), .family = PF::kQwen35, .hidden = H, .layers = L, .heads = heads, .kv_heads = kv,
          .head_dim = 256, .ffn = ffn, .gdn_k_heads = 16, .gdn_v_heads = gdn_v, .vocab = 248320, .ctx = 262144,
          .tied = tied, .rope_theta = 1e7, .mrope_section = kMrope, .vision = vision, .eos_ids = kQwen35Eos,
          .bos_id = 248044, .unconfirmed = std::move(unconfirmed)};
}

ModelPreset qwen35_moe(std::string name, int64_t H, int L, int heads, int gdn_v, int experts, int top_k, int expert_ffn,
                       int shared_ffn, std::string unconfirmed = "") {
  return {.name = std::move(name), .family = PF::kQwen35Moe, .hidden = H, .layers = L, .heads = heads, .kv_heads = 2,
          .head_dim = 256, .gdn_k_heads = 16, .gdn_v_heads = gdn_v, .experts = experts, .top_k = top_k,
          .expert_ffn = expert_ffn, .shared_ffn = shared_ffn, .vocab = 248320, .ctx = 262144, .tied = false,
          .rope_theta = 1e7, .mrope_section = kMrope, .vision = kVisionLarge, .eos_ids = kQwen35Eos, .bos_id = 248044,
          .unconfirmed = std::move(unconfirmed)};
}

ModelPreset qwen3(std::string name, int64_t H, int L, int heads, int kv, int64_t ffn, bool tied, int experts = 0,
                  int top_k = 0, int expert_ffn = 0) {
  return {.name = std::move(name), .family = experts ? PF::kQwen3Moe : PF::kQwen3, .hidden = H, .layers = L,
          .heads = heads, .kv_heads = kv, .head_dim = 128, .ffn = ffn, .experts = experts, .top_k = top_k,
          .expert_ffn = expert_ffn, .vocab = 151936, .ctx = 40960, .tied = tied, .rope_theta = 1e6,
          .mrope_section = {}, .vision = {}, .eos_ids = kQwen3Eos, .bos_id = 151643, .unconfirmed = ""};
}

// Gemma 4 (text weights; released as gemma4 with a vision tower, written here as gemma4_text).
// name, H, L, period, window, heads, kv heads, full-layer KV heads (K = V when > 0), FFN, PLE width,
// KV-shared layers, double-wide MLP there, experts, top-k, expert FFN
ModelPreset gemma4(std::string name, int64_t H, int L, int period, int window, int heads, int kv, int global_kv,
                   int64_t ffn, int ple, int kv_shared, bool double_wide, int experts, int top_k, int expert_ffn,
                   std::string unconfirmed) {
  return {.name = std::move(name), .family = PF::kGemma4, .hidden = H, .layers = L, .heads = heads, .kv_heads = kv,
          .head_dim = 256, .ffn = ffn, .experts = experts, .top_k = top_k, .expert_ffn = expert_ffn,
          .vocab = 262144, .ctx = window > 512 ? 262144 : 131072, .tied = true, .rope_theta = 1e6,
          .mrope_section = {}, .vision = {},
          .gemma = {.period = period, .window = window, .global_head_dim = 512,
                    .global_kv_heads = global_kv > 0 ? global_kv : kv, .k_eq_v = global_kv > 0, .ple_dim = ple,
                    .kv_shared = kv_shared, .double_wide = double_wide},
          .eos_ids = {1, 106}, .bos_id = 2, .unconfirmed = std::move(unconfirmed)};
}

std::vector<ModelPreset> make_presets() {
  std::vector<ModelPreset> p;
  // name, H, L, q heads, kv heads, GDN value heads, FFN, tied, vision
  p.push_back(qwen35("Qwen3.5-0.8B", 1024, 24, 8, 2, 16, 3584, true, kVisionSmall));
  p.push_back(qwen35("Qwen3.5-2B", 2048, 24, 8, 2, 16, 6144, true, kVisionSmall, "tie_word_embeddings, vision_config"));
  p.push_back(qwen35("Qwen3.5-4B", 2560, 32, 16, 4, 32, 9216, true, kVisionLarge, "vision_config"));
  p.push_back(qwen35("Qwen3.5-9B", 4096, 32, 16, 4, 32, 12288, false, kVisionLarge, "vision_config"));
  p.push_back(qwen35("Qwen3.5-27B", 5120, 64, 24, 4, 48, 17408, false, kVisionLarge));
  // name, H, L, q heads, GDN value heads, experts, top-k, expert FFN, shared FFN
  p.push_back(qwen35_moe("Qwen3.5-35B-A3B", 2048, 40, 16, 32, 256, 8, 512, 512));
  p.push_back(qwen35_moe("Qwen3.5-122B-A10B", 3072, 48, 32, 64, 256, 8, 1024, 1024,
                         "num_experts_per_tok, shared_expert_intermediate_size, vision_config"));
  p.push_back(qwen35_moe("Qwen3.5-397B-A17B", 4096, 60, 32, 64, 512, 10, 1024, 1024, "vision_config"));
  p.push_back({.name = "Qwen3-Next-80B-A3B", .family = PF::kQwen3Next, .hidden = 2048, .layers = 48, .heads = 16,
               .kv_heads = 2, .head_dim = 256, .ffn = 5120, .gdn_k_heads = 16, .gdn_v_heads = 32, .experts = 512,
               .top_k = 10, .expert_ffn = 512, .shared_ffn = 512, .vocab = 151936, .ctx = 262144, .tied = false,
               .rope_theta = 1e7, .mrope_section = {}, .vision = {}, .eos_ids = kQwen3Eos, .bos_id = 151643, .unconfirmed = "rope_theta"});
  // Plain Qwen3, the simplest members.
  p.push_back(qwen3("Qwen3-0.6B", 1024, 28, 16, 8, 3072, true));
  p.push_back(qwen3("Qwen3-8B", 4096, 36, 32, 8, 12288, false));
  p.push_back(qwen3("Qwen3-30B-A3B", 2048, 48, 32, 4, 6144, false, 128, 8, 768));
  // Gemma 4. Head sizes (256 sliding / 512 full), RoPE and eos ids follow the fixture configs and
  // Gemma 3; they are not confirmed for every size.
  const std::string gemma_unconfirmed = "head_dim, global_head_dim, rope_parameters, eos_token_id";
  p.push_back(gemma4("Gemma4-E2B", 1536, 35, 5, 512, 8, 1, 0, 6144, 256, 20, true, 0, 0, 0, gemma_unconfirmed));
  p.push_back(gemma4("Gemma4-E4B", 2560, 42, 6, 512, 8, 2, 0, 10240, 256, 18, false, 0, 0, 0, gemma_unconfirmed));
  p.push_back(gemma4("Gemma4-26B-A4B", 2816, 30, 6, 1024, 16, 8, 2, 2112, 0, 0, false, 128, 8, 704, gemma_unconfirmed));
  p.push_back(gemma4("Gemma4-31B", 5376, 60, 6, 1024, 32, 16, 4, 21504, 0, 0, false, 0, 0, 0, gemma_unconfirmed));
  // Tiny models for tests: two periods of the 3:1 hybrid pattern, hidden 64, vocab from --vocab.
  ModelPreset tiny{.name = "tiny-qwen3.5", .family = PF::kQwen35, .hidden = 64, .layers = 8, .heads = 4,
                   .kv_heads = 2, .head_dim = 64, .ffn = 128, .gdn_k_heads = 2, .gdn_v_heads = 4,
                   .gdn_head_dim = 32, .ctx = 4096, .tied = false, .rope_theta = 1e7, .mrope_section = {3, 3, 2},
                   .vision = {.depth = 1, .hidden = 32, .heads = 2, .ffn = 64}, .eos_ids = {}, .bos_id = -1,
                   .unconfirmed = ""};
  p.push_back(tiny);
  tiny.name = "tiny-qwen3.5-moe";
  tiny.family = PF::kQwen35Moe;
  tiny.ffn = 0;
  tiny.experts = 8;
  tiny.top_k = 2;
  tiny.expert_ffn = 32;
  tiny.shared_ffn = 32;
  p.push_back(tiny);
  tiny.name = "tiny-qwen3-next";
  tiny.family = PF::kQwen3Next;
  tiny.ffn = 128;
  tiny.mrope_section.clear();
  tiny.vision = {};
  p.push_back(tiny);
  p.push_back({.name = "tiny-qwen3", .family = PF::kQwen3, .hidden = 64, .layers = 4, .heads = 4, .kv_heads = 2,
               .head_dim = 16, .ffn = 128, .ctx = 4096, .tied = true, .rope_theta = 1e6, .mrope_section = {},
               .vision = {}, .eos_ids = {}, .bos_id = -1, .unconfirmed = ""});
  // Tiny Gemma 4: two periods of [sliding, sliding, full] (window 16) with per-layer embeddings
  // and the last two layers sharing K/V (double-wide MLP there); the MoE variant has K = V on its
  // full layers and the MoE block instead of per-layer embeddings.
  ModelPreset tiny_gemma{.name = "tiny-gemma4", .family = PF::kGemma4, .hidden = 64, .layers = 6, .heads = 4,
                         .kv_heads = 2, .head_dim = 16, .ffn = 128, .ctx = 4096, .tied = true, .rope_theta = 1e6,
                         .mrope_section = {}, .vision = {},
                         .gemma = {.period = 3, .window = 16, .global_head_dim = 32, .global_kv_heads = 2,
                                   .k_eq_v = false, .ple_dim = 8, .kv_shared = 2, .double_wide = true},
                         .eos_ids = {}, .bos_id = -1, .unconfirmed = ""};
  p.push_back(tiny_gemma);
  tiny_gemma.name = "tiny-gemma4-moe";
  tiny_gemma.experts = 8;
  tiny_gemma.top_k = 2;
  tiny_gemma.expert_ffn = 32;
  tiny_gemma.gemma = {.period = 3, .window = 16, .global_head_dim = 32, .global_kv_heads = 1, .k_eq_v = true,
                      .ple_dim = 0, .kv_shared = 0, .double_wide = false};
  p.push_back(tiny_gemma);
  return p;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

json layer_types(const ModelPreset& p) {
  json types = json::array();
  for (int i = 0; i < p.layers; ++i) types.push_back((i + 1) % 4 == 0 ? "full_attention" : "linear_attention");
  return types;
}

// The fields every Qwen3-line text config shares.
json text_common(const ModelPreset& p, int64_t vocab) {
  json t = {{"attention_bias", false},
            {"attention_dropout", 0.0},
            {"head_dim", p.head_dim},
            {"hidden_act", "silu"},
            {"hidden_size", p.hidden},
            {"initializer_range", 0.02},
            {"max_position_embeddings", p.ctx},
            {"num_attention_heads", p.heads},
            {"num_hidden_layers", p.layers},
            {"num_key_value_heads", p.kv_heads},
            {"rms_norm_eps", 1e-6},
            {"tie_word_embeddings", p.tied},
            {"use_cache", true},
            {"vocab_size", vocab}};
  const bool tiny = p.vocab == 0;
  t["bos_token_id"] = tiny ? json(nullptr) : json(p.bos_id);
  t["eos_token_id"] = tiny ? json(vocab - 1) : json(p.eos_ids.back());
  return t;
}

void add_gdn(json& t, const ModelPreset& p) {
  t["full_attention_interval"] = 4;
  t["linear_conv_kernel_dim"] = 4;
  t["linear_key_head_dim"] = p.gdn_head_dim;
  t["linear_value_head_dim"] = p.gdn_head_dim;
  t["linear_num_key_heads"] = p.gdn_k_heads;
  t["linear_num_value_heads"] = p.gdn_v_heads;
  t["partial_rotary_factor"] = 0.25;
}

void add_moe(json& t, const ModelPreset& p) {
  t["num_experts"] = p.experts;
  t["num_experts_per_tok"] = p.top_k;
  t["moe_intermediate_size"] = p.expert_ffn;
  t["router_aux_loss_coef"] = 0.001;
  t["output_router_logits"] = false;
  if (p.shared_ffn) t["shared_expert_intermediate_size"] = p.shared_ffn;
}

json qwen35_config(const ModelPreset& p, int64_t vocab) {
  const bool moe = p.family == PF::kQwen35Moe;
  json t = text_common(p, vocab);
  add_gdn(t, p);
  t["model_type"] = moe ? "qwen3_5_moe_text" : "qwen3_5_text";
  t["attn_output_gate"] = true;
  t["dtype"] = "bfloat16";
  t["layer_types"] = layer_types(p);
  t["mamba_ssm_dtype"] = "float32";
  t["mtp_num_hidden_layers"] = 1;
  t["mtp_use_dedicated_embeddings"] = false;
  t["pad_token_id"] = nullptr;
  t["rope_parameters"] = {{"mrope_interleaved", true},
                          {"mrope_section", p.mrope_section},
                          {"partial_rotary_factor", 0.25},
                          {"rope_theta", p.rope_theta},
                          {"rope_type", "default"}};
  if (moe) {
    add_moe(t, p);
    t["mlp_only_layers"] = json::array();
  } else {
    t["intermediate_size"] = p.ffn;
  }
  json v = {{"deepstack_visual_indexes", json::array()},
            {"depth", p.vision.depth},
            {"hidden_act", "gelu_pytorch_tanh"},
            {"hidden_size", p.vision.hidden},
            {"in_channels", 3},
            {"initializer_range", 0.02},
            {"intermediate_size", p.vision.ffn},
            {"model_type", moe ? "qwen3_5_moe" : "qwen3_5"},
            {"num_heads", p.vision.heads},
            {"num_position_embeddings", 2304},
            {"out_hidden_size", p.hidden},
            {"patch_size", 16},
            {"spatial_merge_size", 2},
            {"temporal_patch_size", 2}};
  return {{"architectures", {moe ? "Qwen3_5MoeForConditionalGeneration" : "Qwen3_5ForConditionalGeneration"}},
          {"image_token_id", 248056},
          {"model_type", moe ? "qwen3_5_moe" : "qwen3_5"},
          {"text_config", t},
          {"tie_word_embeddings", p.tied},
          {"transformers_version", "4.57.0.dev0"},
          {"video_token_id", 248057},
          {"vision_config", v},
          {"vision_end_token_id", 248054},
          {"vision_start_token_id", 248053}};
}

json flat_config(const ModelPreset& p, int64_t vocab) {
  json c = text_common(p, vocab);
  c["model_type"] = preset_model_type(p.family);
  c["rope_scaling"] = nullptr;
  c["rope_theta"] = p.rope_theta;
  c["torch_dtype"] = "bfloat16";
  c["transformers_version"] = p.family == PF::kQwen3Next ? "4.57.0.dev0" : "4.51.0";
  c["use_sliding_window"] = false;
  switch (p.family) {
    case PF::kQwen3Next:
      c["architectures"] = {"Qwen3NextForCausalLM"};
      add_gdn(c, p);
      add_moe(c, p);
      c["decoder_sparse_step"] = 1;
      c["intermediate_size"] = p.ffn;
      c["mlp_only_layers"] = json::array();
      c["norm_topk_prob"] = true;
      break;
    case PF::kQwen3Moe:
      c["architectures"] = {"Qwen3MoeForCausalLM"};
      add_moe(c, p);
      c["decoder_sparse_step"] = 1;
      c["intermediate_size"] = p.ffn;
      c["max_window_layers"] = p.layers;
      c["mlp_only_layers"] = json::array();
      c["norm_topk_prob"] = true;
      c["sliding_window"] = nullptr;
      break;
    default:
      c["architectures"] = {"Qwen3ForCausalLM"};
      c["intermediate_size"] = p.ffn;
      c["max_window_layers"] = p.layers;
      c["sliding_window"] = nullptr;
      break;
  }
  return c;
}

json gemma4_config(const ModelPreset& p, int64_t vocab) {
  const GemmaShape& g = p.gemma;
  const bool tiny = p.vocab == 0;
  json types = json::array();
  for (int i = 0; i < p.layers; ++i) types.push_back((i + 1) % g.period == 0 ? "full_attention" : "sliding_attention");
  json c = {{"architectures", {"Gemma4ForCausalLM"}},
            {"attention_bias", false},
            {"attention_dropout", 0.0},
            {"attention_k_eq_v", g.k_eq_v},
            {"bos_token_id", tiny ? json(nullptr) : json(p.bos_id)},
            {"dtype", "bfloat16"},
            {"enable_moe_block", p.experts > 0},
            {"eos_token_id", tiny ? json(vocab - 1) : json(p.eos_ids)},
            {"final_logit_softcapping", 30.0},
            {"global_head_dim", g.global_head_dim},
            {"head_dim", p.head_dim},
            {"hidden_activation", "gelu_pytorch_tanh"},
            {"hidden_size", p.hidden},
            {"hidden_size_per_layer_input", g.ple_dim},
            {"initializer_range", 0.02},
            {"intermediate_size", p.ffn},
            {"layer_types", types},
            {"max_position_embeddings", p.ctx},
            {"model_type", "gemma4_text"},
            {"num_attention_heads", p.heads},
            {"num_hidden_layers", p.layers},
            {"num_key_value_heads", p.kv_heads},
            {"num_kv_shared_layers", g.kv_shared},
            {"pad_token_id", 0},
            {"rms_norm_eps", 1e-6},
            {"rope_parameters",
             {{"full_attention", {{"partial_rotary_factor", 0.25}, {"rope_theta", p.rope_theta}, {"rope_type", "proportional"}}},
              {"sliding_attention", {{"rope_theta", 10000.0}, {"rope_type", "default"}}}}},
            {"sliding_window", g.window},
            {"tie_word_embeddings", p.tied},
            {"transformers_version", "5.17.0"},
            {"use_cache", true},
            {"use_double_wide_mlp", g.double_wide},
            {"vocab_size", vocab},
            {"vocab_size_per_layer_input", vocab}};
  if (g.k_eq_v) c["num_global_key_value_heads"] = g.global_kv_heads;
  if (p.experts > 0) {
    c["num_experts"] = p.experts;
    c["top_k_experts"] = p.top_k;
    c["moe_intermediate_size"] = p.expert_ffn;
  }
  return c;
}

}  // namespace

const std::vector<ModelPreset>& model_presets() {
  static const std::vector<ModelPreset> presets = make_presets();
  return presets;
}

const ModelPreset& find_preset(const std::string& name) {
  std::string known;
  for (const auto& p : model_presets()) {
    if (lower(p.name) == lower(name)) return p;
    known += (known.empty() ? "" : ", ") + p.name;
  }
  bad_input("unknown model '", name, "' for --like (known: ", known, ")");
}

const char* preset_model_type(PresetFamily family) {
  switch (family) {
    case PF::kQwen3: return "qwen3";
    case PF::kQwen3Moe: return "qwen3_moe";
    case PF::kQwen3Next: return "qwen3_next";
    case PF::kQwen35: return "qwen3_5";
    case PF::kQwen35Moe: return "qwen3_5_moe";
    case PF::kGemma4: return "gemma4_text";
  }
  return "?";
}

json preset_config(const ModelPreset& p, int64_t vocab) {
  if (p.vocab) vocab = p.vocab;
  if (p.family == PF::kQwen35 || p.family == PF::kQwen35Moe) return qwen35_config(p, vocab);
  if (p.family == PF::kGemma4) return gemma4_config(p, vocab);
  return flat_config(p, vocab);
}

json preset_generation_config(const ModelPreset& p, int64_t vocab) {
  if (p.vocab) vocab = p.vocab;
  const bool gemma = p.family == PF::kGemma4;
  json g = {{"do_sample", true}, {"temperature", gemma ? 1.0 : 0.6}, {"top_k", gemma ? 64 : 20}, {"top_p", 0.95},
            {"transformers_version", gemma ? "5.17.0" : "4.57.0.dev0"}};
  if (p.vocab == 0) {
    g["eos_token_id"] = vocab - 1;
    return g;
  }
  g["bos_token_id"] = p.bos_id;
  g["eos_token_id"] = p.eos_ids;
  g["pad_token_id"] = gemma ? 0 : p.eos_ids.back();
  return g;
}

}  // namespace kestrel
