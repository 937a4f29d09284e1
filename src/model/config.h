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

// The gate activation of a gated MLP or gated norm: silu (SwiGLU), gelu with the tanh
// approximation (GeGLU, transformers' "gelu_pytorch_tanh": 0.5 x (1 + tanh(sqrt(2/pi) (x +
// 0.044715 x^3)))), or sigmoid.
enum class Activation : uint8_t { kSilu, kGeluTanh, kSigmoid };

struct RopeConfig {
  double theta = 10000.0;
  int rotary_dim = 0;        // dims of each head that rotate (rotate_half pairing); 0 = no RoPE
  // Exponent denominator of the frequencies: inv_freq[i] = theta^(-2i / freq_dim). 0 = rotary_dim.
  int freq_dim = 0;
  // Pairing. false (default, "partial rotary"): pairs (i, i + rotary_dim/2) within the leading
  // rotary_dim dims. true (Gemma 4's "proportional" RoPE): rotate_half over the whole head, pairs
  // (i, i + head_dim/2), of which the first rotary_dim/2 rotate and the rest have frequency 0.
  bool whole_head_pairs = false;
};

struct AttentionConfig {
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  bool output_gate = false;  // q_proj packs [query, gate] per head; out *= sigmoid(gate)
  bool qk_norm = true;       // RMSNorm over head_dim on q and k
  float scale = 0.0f;        // softmax scale (1/sqrt(head_dim) unless the family says otherwise)
  bool v_norm = false;       // RMSNorm without weight over head_dim on v (Gemma 4)
  bool k_eq_v = false;       // no v projection: V is the k projection (before k's norm and RoPE)
  RopeConfig rope;
};

struct DeltaNetConfig {
  int n_k_heads = 0;   // query/key heads
  int n_v_heads = 0;   // value heads (a multiple of n_k_heads)
  int k_head_dim = 0;
  int v_head_dim = 0;
  int conv_kernel = 0;
  Activation gate_act = Activation::kSilu;  // of the output gate (rmsnorm(o) * act(z))
  // The order of the value heads (and of everything indexed by them: the value channels, a, b,
  // A, dt_bias, z, the output projection's input columns). Grouped, the checkpoints' order: the
  // n_v / n_k value heads of each key head together, head h reads key head h / (n_v / n_k).
  // Tiled, llama.cpp's Qwen3.5 GGUF order: head h reads key head h mod n_k (set when a GGUF is
  // loaded in its own order; docs/gguf.md).
  bool tiled_value_heads = false;
  int conv_dim() const { return 2 * n_k_heads * k_head_dim + n_v_heads * v_head_dim; }
  // Value head h reads key head (h / key_head_div()) mod n_k_heads, in either order.
  int key_head_div() const { return tiled_value_heads ? 1 : n_v_heads / n_k_heads; }
  int key_head(int h) const { return (h / key_head_div()) % n_k_heads; }
};

struct MoeConfig {
  int n_experts = 0;
  int top_k = 0;
  int expert_ffn = 0;        // intermediate size of each routed expert
  bool norm_topk_prob = true;
  int shared_ffn = 0;        // 0 = no shared expert
  bool shared_gate = false;  // shared expert output scaled by sigmoid(x . w_gate)
};

// Per-layer attention geometry where a family varies it by layer (Gemma 4's full layers have their
// own head size and KV-head count) and KV sharing (a layer reading another layer's cache).
struct LayerAttention {
  AttentionConfig attn;
  int kv_source = -1;  // the layer whose KV cache this layer reads (itself unless it shares)
  int window = 0;      // > 0: sliding-window layer of this many positions
  int index_key_dim = 0;  // > 0: QSA layer caching a raw indexer key of this width per position
};

// Qwen4-Exp: hyper-connections, hashed n-gram per-layer embeddings (PLE), the QSA indexer.
struct Qwen4ExpConfig {
  int hc_count = 0;               // residual streams
  int hc_lowrank = 0;             // rank of the input mixer
  std::vector<int> ple_index;     // [n_layers] PLE module index of the layer, -1 = none
  int ngram_size = 0;             // n-grams of orders 2..ngram_size
  int heads_per_ngram = 0;
  int ple_embed_dim = 0;          // concatenated width of all n-gram heads
  int ple_conv_kernel = 0;        // dilated conv kernel (dilation = ngram_size)
  int64_t ngram_vocab_base = 0;
  int64_t ngram_vocab_divisor = 1;
  uint64_t seed = 0;
  int ngram_shards = 1;           // checkpoint shards of each n-gram table (row-wise)
  int eos = -1;                   // resets n-gram contexts
  int index_heads = 0, index_head_dim = 0, index_budget = 0, index_ratio = 0;
  int ngram_heads() const { return (ngram_size - 1) * heads_per_ngram; }
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
  AttentionConfig attn;                // the attention geometry of every attention layer, unless:
  std::vector<LayerAttention> layer_attn;  // [n_layers] or empty: per-layer geometry and KV sharing
  DeltaNetConfig gdn;
  MoeConfig moe;

  // Gemma-style extras (neutral values when a family has none of them)
  double embed_scale = 1.0;            // token embeddings multiplied by this (Gemma: sqrt(hidden))
  float final_logit_softcap = 0.0f;    // > 0: logits = cap * tanh(logits / cap)
  int per_layer_input_dim = 0;         // Gemma 4 per-layer embeddings width (0 = none)
  int64_t per_layer_vocab = 0;         // rows of embed_tokens_per_layer
  std::vector<int64_t> layer_ffn;      // [n_layers] dense MLP width per layer, or empty: ffn_size
  Qwen4ExpConfig q4;
  // Extra per-sequence state (sized once, like DeltaNet's): F32 values per slot per layer
  // (empty = none) and a host-side token context of this many ids per slot.
  std::vector<int64_t> layer_aux_state;
  int token_context = 0;

  std::vector<int> eos_token_ids;      // from config / generation_config (may be empty)
  int bos_token_id = -1;

  int count_layers(LayerKind kind) const;
  // Attention geometry of layer l (layer_attn[l].attn, else attn).
  const AttentionConfig& attn_for(int l) const;
  // The layer whose KV cache layer l uses (l itself unless KV-shared).
  int kv_source(int l) const;
  int window_for(int l) const;
  int64_t ffn_for(int l) const { return layer_ffn.empty() ? ffn_size : layer_ffn[size_t(l)]; }
  bool is_attention(int l) const { return layer_kinds[size_t(l)] != LayerKind::kLinearAttention; }
  bool has_moe() const;
  // Whether a sequence needs a state slot: DeltaNet state, sliding-window rings of its own
  // (not only shared ones), extra per-layer state or a token context.
  bool has_sequence_state() const;
};

}  // namespace kestrel
