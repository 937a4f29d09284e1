// Shapes of released models (and tiny test models), as data: each preset renders the
// config.json and generation_config.json that model ships with. `kestrel random-model --like`
// writes them with random weights; docs/models.md holds the same table.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kestrel {

enum class PresetFamily : uint8_t {
  kQwen3,      // qwen3: dense attention, flat config
  kQwen3Moe,   // qwen3_moe: routed experts, no shared expert
  kQwen3Next,  // qwen3_next: hybrid, MoE + shared expert, fused in_proj_qkvz / in_proj_ba
  kQwen35,     // qwen3_5: hybrid dense, multimodal wrapper (text under text_config)
  kQwen35Moe,  // qwen3_5_moe: hybrid MoE, multimodal wrapper
  kGemma4,     // gemma4_text: sliding/full attention, per-layer embeddings, KV sharing, MoE block
};

struct VisionShape {  // the vision_config block of a multimodal config (no tower is written)
  int depth = 0, hidden = 0, heads = 0, ffn = 0;
};

// Gemma 4's extra geometry (the layer pattern is `period - 1` sliding layers, then one full layer).
struct GemmaShape {
  int period = 0;                 // 0: not a Gemma preset
  int window = 0;                 // sliding window
  int global_head_dim = 0;        // full layers' head size
  int global_kv_heads = 0;        // full layers' KV heads (with k_eq_v)
  bool k_eq_v = false;            // full layers use K as V
  int ple_dim = 0;                // hidden_size_per_layer_input (0: no per-layer embeddings)
  int kv_shared = 0;              // num_kv_shared_layers
  bool double_wide = false;       // KV-shared layers have a double-width MLP
};

struct ModelPreset {
  std::string name;  // "Qwen3.5-0.8B"
  PresetFamily family;
  int64_t hidden = 0;
  int layers = 0;
  int heads = 0, kv_heads = 0, head_dim = 0;
  int64_t ffn = 0;          // dense intermediate size (0: every layer MoE and no dense size given)
  int gdn_k_heads = 0, gdn_v_heads = 0, gdn_head_dim = 128;
  int experts = 0, top_k = 0, expert_ffn = 0, shared_ffn = 0;
  int64_t vocab = 0;        // 0: taken from --vocab (tiny presets)
  int64_t ctx = 0;          // max_position_embeddings
  bool tied = false;
  double rope_theta = 1e7;
  std::vector<int> mrope_section;  // Qwen3.5: [11, 11, 10]
  VisionShape vision;
  GemmaShape gemma;
  std::vector<int> eos_ids;        // generation_config eos (empty on tiny presets: vocab - 1)
  int bos_id = -1;
  std::string unconfirmed;         // fields not independently confirmed, for docs and --list
};

const std::vector<ModelPreset>& model_presets();
// Case-insensitive lookup; Error naming the known presets when absent.
const ModelPreset& find_preset(const std::string& name);

const char* preset_model_type(PresetFamily family);
// config.json as the model ships it. `vocab` is used only when the preset leaves it open.
nlohmann::json preset_config(const ModelPreset& preset, int64_t vocab);
nlohmann::json preset_generation_config(const ModelPreset& preset, int64_t vocab);

}  // namespace kestrel
