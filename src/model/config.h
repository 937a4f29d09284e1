// ModelConfig: everything the forward pass and the memory plan need to know about a model,
// parsed and validated from config.json by the architecture that owns the model_type.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kestrel {

enum class LayerKind : uint8_t {
  kFullAttention,     // softmax attention over the whole context (paged KV cache)
  kSlidingAttention,  // softmax attention over the last `sliding_window` tokens
  kLinearAttention,   // Gated DeltaNet (conv state + recurrent state per sequence)
};

const char* layer_kind_name(LayerKind kind);

struct RopeConfig {
  double theta = 10000.0;
  int rotary_dim = 0;        // leading dims of each head that rotate (NEOX / rotate_half pairing)
  // Proportional RoPE (Gemma 4 full layers): frequencies computed over `freq_dim` dims
  // (the whole head) but applied to rotary_dim of them. 0 = same as rotary_dim.
  int freq_dim = 0;
};

struct AttentionConfig {
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  bool output_gate = false;  // q_proj packs [query, gate] per head; out *= sigmoid(gate)
  bool qk_norm = true;       // RMSNorm over head_dim on q and k
  float scale = 0.0f;        // softmax scale (1/sqrt(head_dim) unless the family says otherwise)
  RopeConfig rope;
};

struct DeltaNetConfig {
  int n_k_heads = 0;   // query/key heads
  int n_v_heads = 0;   // value heads (a multiple of n_k_heads)
  int k_head_dim = 0;
  int v_head_dim = 0;
  int conv_kernel = 0;
  int conv_dim() const { return 2 * n_k_heads * k_head_dim + n_v_heads * v_head_dim; }
};

struct MoeConfig {
  int n_experts = 0;
  int top_k = 0;
  int expert_ffn = 0;        // intermediate size of each routed expert
  bool norm_topk_prob = true;
  int shared_ffn = 0;        // 0 = no shared expert
  bool shared_gate = false;  // shared expert output scaled by sigmoid(x . w_gate)
};

struct ModelConfig {
  std::string model_type;    // as written in config.json ("qwen3_5", ...)
  std::string arch;          // the architecture that parsed it ("qwen")
  std::string weight_prefix; // "model." or "model.language_model."
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t ffn_size = 0;      // dense MLP intermediate size (0 when every layer is MoE)
  int n_layers = 0;
  int max_positions = 0;
  float norm_eps = 1e-6f;
  bool zero_centered_norm = false;  // checkpoint stores RMSNorm weights as w with scale (1 + w)
  bool tie_embeddings = false;

  std::vector<LayerKind> layer_kinds;  // [n_layers]
  std::vector<bool> layer_moe;         // [n_layers] true: MoE block, false: dense MLP
  AttentionConfig attn;
  DeltaNetConfig gdn;
  MoeConfig moe;

  std::vector<int> eos_token_ids;      // from config / generation_config (may be empty)
  int bos_token_id = -1;

  int count_layers(LayerKind kind) const;
  bool has_moe() const;
};

}  // namespace kestrel
