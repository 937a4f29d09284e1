#include "convert/gguf_model.h"

#include <cstring>
#include <fstream>
#include <optional>
#include <nlohmann/json.hpp>

#include "convert/gguf_names.h"
#include "core/error.h"
#include "core/files.h"
#include "model/registry.h"
#include "quant/quant.h"

namespace kestrel {
namespace {

using nlohmann::json;

// The Hugging Face model_type a GGUF architecture converts back to, or "".
std::string model_type_for_gguf_arch(const std::string& arch) {
  if (arch == "qwen3") return "qwen3";
  if (arch == "qwen3moe") return "qwen3_moe";
  if (arch == "qwen3next") return "qwen3_next";
  if (arch == "qwen35") return "qwen3_5";
  if (arch == "qwen35moe") return "qwen3_5_moe";
  if (arch == "gemma4") return "gemma4_text";
  return "";
}

bool is_qwen_hybrid(const std::string& arch) { return arch == "qwen3next" || arch == "qwen35" || arch == "qwen35moe"; }

// A per-layer key llama.cpp reads with get_key_or_arr: one scalar for every layer, or an array of
// one value per block (the first n_layers are the model's; later ones belong to MTP blocks).
std::vector<int64_t> per_layer(const GgufFile& f, const std::string& key, int64_t n_blocks, int n_layers) {
  const GgufValue* v = f.find(key);
  if (!v) bad_input(f.path(), ": missing key '", key, "'");
  if (!v->is_array()) return std::vector<int64_t>(size_t(n_layers), f.get_int(key));
  if (int64_t(v->size()) != n_blocks)
    bad_input(f.path(), ": key '", key, "' has ", v->size(), " entries, expected one per block (", n_blocks, ")");
  std::vector<int64_t> out;
  for (int l = 0; l < n_layers; ++l) {
    auto x = v->int_at(uint64_t(l));
    if (!x) bad_input(f.path(), ": key '", key, "' must be an array of integers");
    out.push_back(*x);
  }
  return out;
}

// A per-layer key whose value must be the same for every layer (kestrel's config has one).
int64_t uniform(const GgufFile& f, const std::string& key, int64_t n_blocks, int n_layers) {
  const std::vector<int64_t> v = per_layer(f, key, n_blocks, n_layers);
  for (int l = 0; l < n_layers; ++l)
    if (v[size_t(l)] != v[0])
      unsupported(f.path(), ": key '", key, "' varies by layer (layer ", l, ": ", v[size_t(l)], ", layer 0: ", v[0],
                  "), which this architecture does not support");
  return v[0];
}

std::vector<bool> bool_per_layer(const GgufFile& f, const std::string& key, int64_t n_blocks, int n_layers) {
  const GgufValue* v = f.find(key);
  if (!v) bad_input(f.path(), ": missing key '", key, "'");
  if (!v->is_array() || int64_t(v->size()) != n_blocks)
    bad_input(f.path(), ": key '", key, "' must be an array with one entry per block (", n_blocks, ")");
  std::vector<bool> out;
  for (int l = 0; l < n_layers; ++l) {
    std::optional<int64_t> x = v->int_at(uint64_t(l));
    if (!x && v->elem_type() == GgufValueType::kBool) x = int64_t(v->raw()[size_t(l)]);
    if (!x || (*x != 0 && *x != 1)) bad_input(f.path(), ": key '", key, "' must hold booleans");
    out.push_back(*x != 0);
  }
  return out;
}

int64_t int_or(const GgufFile& f, const std::string& key, int64_t fallback) {
  return f.find(key) ? f.get_int(key) : fallback;
}

void qwen_config(const GgufFile& f, const std::string& arch, int64_t n_blocks, int n_layers, json& c) {
  const std::string a = arch + ".";
  c["num_attention_heads"] = uniform(f, a + "attention.head_count", n_blocks, n_layers);
  c["num_key_value_heads"] = uniform(f, a + "attention.head_count_kv", n_blocks, n_layers);
  c["rope_theta"] = f.get_float(a + "rope.freq_base");
  if (f.find(a + "attention.key_length")) {
    c["head_dim"] = f.get_int(a + "attention.key_length");
    if (f.find(a + "attention.value_length") && f.get_int(a + "attention.value_length") != c["head_dim"].get<int64_t>())
      unsupported(f.path(), ": ", a, "attention.value_length differs from key_length, which ", arch,
                  " does not support");
  }
  if (f.find(a + "feed_forward_length")) c["intermediate_size"] = uniform(f, a + "feed_forward_length", n_blocks, n_layers);
  if (arch != "qwen3" && arch != "qwen35") {
    c["num_experts"] = f.get_int(a + "expert_count");
    c["num_experts_per_tok"] = f.get_int(a + "expert_used_count");
    c["moe_intermediate_size"] = f.get_int(a + "expert_feed_forward_length");
    const GgufValue* norm = f.find(a + "expert_weights_norm");
    c["norm_topk_prob"] = norm && norm->to_bool() ? *norm->to_bool() : true;
    if (arch != "qwen3moe")  // llama.cpp falls back to feed_forward_length for the shared expert
      c["shared_expert_intermediate_size"] =
          int_or(f, a + "expert_shared_feed_forward_length", c.value("intermediate_size", int64_t(0)));
  }
  if (!is_qwen_hybrid(arch)) return;
  if (!c.contains("head_dim")) bad_input(f.path(), ": missing key '", a, "attention.key_length'");
  const int head_dim = int(c["head_dim"].get<int64_t>());
  // llama.cpp rotates n_rot = rope.dimension_count dims of each head (the whole head if absent).
  c["partial_rotary_factor"] = partial_rotary_for(int(int_or(f, a + "rope.dimension_count", head_dim)), head_dim);
  std::vector<std::string> types;
  if (f.find(a + "attention.recurrent_layers")) {
    for (bool r : bool_per_layer(f, a + "attention.recurrent_layers", n_blocks, n_layers))
      types.push_back(r ? "linear_attention" : "full_attention");
  } else {
    const int64_t interval = int_or(f, a + "full_attention_interval", 4);  // llama.cpp's default
    if (interval < 1) bad_input(f.path(), ": ", a, "full_attention_interval = ", interval, " must be at least 1");
    for (int l = 0; l < n_layers; ++l) types.push_back((l + 1) % interval == 0 ? "full_attention" : "linear_attention");
  }
  c["layer_types"] = types;
  if (std::count(types.begin(), types.end(), "linear_attention") == 0) return;
  const int64_t n_v = f.get_int(a + "ssm.time_step_rank"), inner = f.get_int(a + "ssm.inner_size");
  if (n_v < 1 || inner % n_v != 0)
    bad_input(f.path(), ": ", a, "ssm.inner_size = ", inner, " is not a multiple of ", a, "ssm.time_step_rank = ", n_v);
  c["linear_num_key_heads"] = f.get_int(a + "ssm.group_count");
  c["linear_num_value_heads"] = n_v;
  c["linear_key_head_dim"] = f.get_int(a + "ssm.state_size");
  c["linear_value_head_dim"] = inner / n_v;
  c["linear_conv_kernel_dim"] = f.get_int(a + "ssm.conv_kernel");
}

// The full layers' proportional RoPE from llama.cpp's rope_freqs: factor 1 for the pairs that
// rotate, 1e30 (frequency ~0) for the rest. Returns the rotary dimension.
int proportional_rotary_dim(const GgufFile& f, int head_dim) {
  const GgufTensor* t = f.find_tensor("rope_freqs.weight");
  if (!t) bad_input(f.path(), ": tensor 'rope_freqs.weight' is missing (the full-attention layers' RoPE)");
  if (t->type != GgmlType::kF32 || t->shape != std::vector<int64_t>{head_dim / 2})
    bad_input(f.path(), ": tensor 'rope_freqs.weight' must be F32 [", head_dim / 2, "] (half the full-attention head)");
  std::vector<float> v(size_t(head_dim / 2));
  std::memcpy(v.data(), t->data, v.size() * 4);
  size_t k = 0;
  while (k < v.size() && v[k] == 1.0f) ++k;
  for (size_t i = k; i < v.size(); ++i)
    if (v[i] != 1e30f)
      unsupported(f.path(), ": tensor 'rope_freqs.weight'[", i, "] = ", v[i],
                  ": only proportional RoPE (factors 1, then 1e30) is supported");
  return int(2 * k);
}

void gemma4_config(const GgufFile& f, int64_t n_blocks, int n_layers, json& c) {
  const std::string a = "gemma4.";
  const std::vector<bool> swa = bool_per_layer(f, a + "attention.sliding_window_pattern", n_blocks, n_layers);
  const int64_t hd_full = f.get_int(a + "attention.key_length"), hd_swa = f.get_int(a + "attention.key_length_swa");
  if (int_or(f, a + "attention.value_length", hd_full) != hd_full ||
      int_or(f, a + "attention.value_length_swa", hd_swa) != hd_swa)
    unsupported(f.path(), ": gemma4 needs value_length == key_length (and _swa)");
  const std::vector<int64_t> kv = per_layer(f, a + "attention.head_count_kv", n_blocks, n_layers);
  const int64_t n_shared = int_or(f, a + "attention.shared_kv_layers", 0);
  if (n_shared < 0 || n_shared >= n_layers)
    bad_input(f.path(), ": ", a, "attention.shared_kv_layers = ", n_shared, " leaves no layer with its own K/V");
  const int first_shared = n_layers - int(n_shared);

  std::vector<std::string> types;
  int first_swa = -1;
  bool any_full = false;
  for (int l = 0; l < n_layers; ++l) {
    types.push_back(swa[size_t(l)] ? "sliding_attention" : "full_attention");
    if (swa[size_t(l)] && first_swa < 0) first_swa = l;
    any_full = any_full || !swa[size_t(l)];
  }
  c["layer_types"] = types;
  c["num_attention_heads"] = uniform(f, a + "attention.head_count", n_blocks, n_layers);
  const int64_t base_kv = kv[size_t(first_swa >= 0 ? first_swa : 0)];
  const int64_t base_hd = first_swa >= 0 ? hd_swa : hd_full;
  c["head_dim"] = base_hd;
  c["num_key_value_heads"] = base_kv;
  json plc = json::object();
  for (int l = 0; l < n_layers; ++l) {
    const int64_t hd = swa[size_t(l)] ? hd_swa : hd_full;
    if (hd != base_hd || kv[size_t(l)] != base_kv)
      plc[std::to_string(l)] = {{"head_dim", hd}, {"num_key_value_heads", kv[size_t(l)]}};
  }
  if (!plc.empty()) c["per_layer_config"] = plc;
  if (first_swa >= 0) c["sliding_window"] = f.get_int(a + "attention.sliding_window");
  c["num_kv_shared_layers"] = n_shared;

  // K = V: the full layers that compute K/V have no attn_v (llama.cpp's use_alternative_attention).
  int with_v = 0, without_v = 0;
  for (int l = 0; l < first_shared; ++l) {
    if (swa[size_t(l)]) continue;
    (f.find_tensor("blk." + std::to_string(l) + ".attn_v.weight") ? with_v : without_v) += 1;
  }
  if (with_v > 0 && without_v > 0)
    unsupported(f.path(), ": some full-attention layers have attn_v and some do not (K = V on some layers only)");
  c["attention_k_eq_v"] = without_v > 0;

  json rope = json::object();
  const double theta = f.get_float(a + "rope.freq_base");
  if (any_full) {
    if (int_or(f, a + "rope.dimension_count", hd_full) != hd_full)
      unsupported(f.path(), ": ", a, "rope.dimension_count must be the full-attention head size ", hd_full,
                  " (proportional RoPE through rope_freqs)");
    const int rot = proportional_rotary_dim(f, int(hd_full));
    rope["full_attention"] = {{"rope_type", "proportional"}, {"rope_theta", theta},
                              {"partial_rotary_factor", partial_rotary_for(rot, int(hd_full))}};
  }
  if (first_swa >= 0) {
    const int rot = int(int_or(f, a + "rope.dimension_count_swa", hd_swa));
    rope["sliding_attention"] = {{"rope_type", "default"},
                                 {"rope_theta", f.find(a + "rope.freq_base_swa") ? f.get_float(a + "rope.freq_base_swa") : theta},
                                 {"partial_rotary_factor", partial_rotary_for(rot, int(hd_swa))}};
  }
  c["rope_parameters"] = rope;
  if (f.find(a + "final_logit_softcapping")) c["final_logit_softcapping"] = f.get_float(a + "final_logit_softcapping");

  // Feed-forward width, doubled on the KV-shared layers (use_double_wide_mlp) or not at all.
  const std::vector<int64_t> ffn = per_layer(f, a + "feed_forward_length", n_blocks, n_layers);
  c["intermediate_size"] = ffn[0];
  bool doubled = false;
  for (int l = 0; l < n_layers; ++l) {
    if (ffn[size_t(l)] == ffn[0]) continue;
    if (l >= first_shared && ffn[size_t(l)] == 2 * ffn[0]) {
      doubled = true;
      continue;
    }
    unsupported(f.path(), ": ", a, "feed_forward_length varies by layer in a way Gemma 4 does not (layer ", l, ": ",
                ffn[size_t(l)], ", layer 0: ", ffn[0], ")");
  }
  if (doubled)
    for (int l = first_shared; l < n_layers; ++l)
      if (ffn[size_t(l)] != 2 * ffn[0])
        unsupported(f.path(), ": ", a, "feed_forward_length doubles on some KV-shared layers but not on layer ", l);
  c["use_double_wide_mlp"] = doubled;

  // MoE beside the dense MLP: on every layer or none.
  int moe_layers = 0;
  for (int l = 0; l < n_layers; ++l) moe_layers += f.find_tensor("blk." + std::to_string(l) + ".ffn_gate_inp.weight") != nullptr;
  if (moe_layers != 0 && moe_layers != n_layers)
    unsupported(f.path(), ": ", moe_layers, " of ", n_layers, " layers have an MoE block; kestrel's gemma4 needs all or none");
  c["enable_moe_block"] = moe_layers > 0;
  if (moe_layers > 0) {
    c["num_experts"] = f.get_int(a + "expert_count");
    c["top_k_experts"] = f.get_int(a + "expert_used_count");
    c["moe_intermediate_size"] = f.get_int(a + "expert_feed_forward_length");
  }
  const int64_t P = int_or(f, a + "embedding_length_per_layer_input", 0);
  c["hidden_size_per_layer_input"] = P;
  if (P > 0) {
    const GgufTensor* t = f.find_tensor("per_layer_token_embd.weight");
    if (!t || t->shape.size() != 2) bad_input(f.path(), ": missing 2-D tensor 'per_layer_token_embd.weight'");
    c["vocab_size_per_layer_input"] = t->shape[0];
  }
}

}  // namespace

ModelConfig gguf_model_config(const GgufFile& f) {
  const std::string arch = f.get_string("general.architecture");
  const std::string model_type = model_type_for_gguf_arch(arch);
  if (model_type.empty())
    unsupported(f.path(), ": GGUF architecture '", arch,
                "' is not supported (supported: qwen3, qwen3moe, qwen3next, qwen35, qwen35moe, gemma4)");
  const std::string a = arch + ".";
  const GgufTensor* embd = f.find_tensor("token_embd.weight");
  if (!embd || embd->shape.size() != 2) bad_input(f.path(), ": missing 2-D tensor 'token_embd.weight'");
  const int64_t n_blocks = f.get_int(a + "block_count");
  // Multi-token-prediction blocks (llama.cpp's nextn) follow the model's layers; kestrel skips them.
  const int64_t nextn = int_or(f, a + "nextn_predict_layers", 0);
  if (n_blocks < 1 || nextn < 0 || nextn >= n_blocks)
    bad_input(f.path(), ": ", a, "block_count = ", n_blocks, " with ", a, "nextn_predict_layers = ", nextn,
              " leaves no model layers");
  const int n_layers = int(n_blocks - nextn);
  // The config.json these keys came from, for the architecture's own validation.
  json c = {
      {"model_type", model_type},
      {"vocab_size", embd->shape[0]},
      {"hidden_size", f.get_int(a + "embedding_length")},
      {"num_hidden_layers", n_layers},
      {"rms_norm_eps", f.get_float(a + "attention.layer_norm_rms_epsilon")},
      {"tie_word_embeddings", f.find_tensor("output.weight") == nullptr},
  };
  if (f.find(a + "context_length")) c["max_position_embeddings"] = f.get_int(a + "context_length");
  if (arch == "gemma4") gemma4_config(f, n_blocks, n_layers, c);
  else qwen_config(f, arch, n_blocks, n_layers, c);
  ModelConfig cfg = find_architecture(model_type)->parse_config(c, f.path() + " (GGUF metadata)");
  // llama.cpp stores the hybrids' zero-centred RMSNorm weights with the (1 + w) folded in.
  if (is_qwen_hybrid(arch)) cfg.zero_centered_norm = false;
  // Qwen3.5 files hold the value heads in llama.cpp's tiled order. Loading puts them back in the
  // checkpoint's grouped order, exactly, where every tensor can be reordered; a block-format
  // ssm_out cannot (its value heads run along its blocks) and would be widened to F32. Where any
  // layer's ssm_out is a block format the model instead runs in the file's order.
  if ((arch == "qwen35" || arch == "qwen35moe") && cfg.gdn.n_k_heads != cfg.gdn.n_v_heads) {
    for (int l = 0; l < n_layers; ++l) {
      const GgufTensor* t = f.find_tensor("blk." + std::to_string(l) + ".ssm_out.weight");
      const std::optional<DType> d = t ? ggml_to_dtype(t->type) : std::nullopt;
      if (d && dtype_is_quantized(*d)) cfg.gdn.tiled_value_heads = true;
    }
  }
  if (const GgufValue* eos = f.find("tokenizer.ggml.eos_token_id"); eos && eos->to_int()) {
    if (*eos->to_int() < 0 || *eos->to_int() >= cfg.vocab_size)
      bad_input(f.path(), ": tokenizer.ggml.eos_token_id = ", *eos->to_int(), " is outside the vocabulary (", cfg.vocab_size, ")");
    cfg.eos_token_ids = {int(*eos->to_int())};
  }
  if (const GgufValue* bos = f.find("tokenizer.ggml.bos_token_id"); bos && bos->to_int() && *bos->to_int() >= 0 &&
                                                                     *bos->to_int() < cfg.vocab_size)
    cfg.bos_token_id = int(*bos->to_int());
  return cfg;
}

Checkpoint gguf_checkpoint(std::shared_ptr<const GgufFile> f, const ModelConfig& cfg) {
  const GgufLayout layout =
      gguf_layout(cfg, [&](const std::string& gguf, const std::string&) { return f->find_tensor(gguf) != nullptr; });
  auto bytes = std::make_shared<std::vector<std::vector<uint8_t>>>();  // reassembled tensors

  // Each GGUF tensor as stored, in place in the mapping: a float or a block format.
  struct View {
    DType dtype;
    const uint8_t* data;
  };
  std::vector<View> views;
  for (const GgufTensorPlan& p : layout.tensors) {
    const GgufTensor* t = f->find_tensor(p.name);
    if (!t) bad_input(f->path(), ": tensor '", p.name, "' is missing");
    if (t->shape != p.shape) {
      std::string got, want;
      for (int64_t d : t->shape) got += std::to_string(d) + " ";
      for (int64_t d : p.shape) want += std::to_string(d) + " ";
      bad_input(f->path(), ": tensor '", p.name, "' has shape [ ", got, "], expected [ ", want, "]");
    }
    const std::optional<DType> d = ggml_to_dtype(t->type);
    const bool is_float = d && (*d == DType::kBF16 || *d == DType::kF16 || *d == DType::kF32);
    if (!is_float && !(d && dtype_is_quantized(*d) && quant::has_kernels(t->type)))
      unsupported(f->path(), ": tensor '", p.name, "' is ", ggml_type_name(t->type), ", which kestrel cannot load yet");
    views.push_back({*d, t->data});
  }

  // Where each checkpoint tensor's rows are: (tensor, run, the run's first row in the tensor).
  struct Part {
    size_t plan;
    GgufRowRun run;
    int64_t at;
  };
  std::vector<std::vector<Part>> parts(layout.sources.size());
  for (size_t i = 0; i < layout.tensors.size(); ++i) {
    int64_t at = 0;
    for (const GgufRowRun& r : layout.tensors[i].rows) {
      parts[size_t(r.src)].push_back({i, r, at});
      at += r.count;
    }
  }

  std::vector<TensorInfo> infos;
  for (size_t s = 0; s < layout.sources.size(); ++s) {
    const GgufSource& src = layout.sources[s];
    const int64_t rows = src.rows(), width = src.shape.back();
    const std::vector<Part>& ps = parts[s];
    KCHECK(!ps.empty());
    TensorInfo info;
    info.name = src.loaded_as.empty() ? src.name : src.loaded_as;
    info.shape = src.shape;
    const GgufTensorPlan& p0 = layout.tensors[ps[0].plan];
    if (ps.size() == 1 && ps[0].run.first == 0 && ps[0].run.count == rows && p0.col_perm.empty()) {
      // One run of one tensor: used in place, in its stored dtype (whole rows, so a block format too).
      const View& v = views[ps[0].plan];
      info.dtype = v.dtype;
      info.data = v.data + uint64_t(ps[0].at) * dtype_row_bytes(v.dtype, width);
    } else {
      // Reassembled: rows back to their checkpoint positions, columns back through the permutation.
      // Rows of one stored dtype are copied as they are (whole rows of blocks for a block format);
      // mixed dtypes, or a column permutation of a block format, are widened to F32.
      DType dtype = views[ps[0].plan].dtype;
      bool permuted = false;
      for (const Part& p : ps) {
        if (views[p.plan].dtype != dtype) dtype = DType::kF32;
        permuted = permuted || !layout.tensors[p.plan].col_perm.empty();
      }
      if (permuted && dtype_is_quantized(dtype)) dtype = DType::kF32;
      const size_t row_bytes = dtype_row_bytes(dtype, width);
      const size_t es = dtype_size(dtype);  // 0 for a block format, which is never permuted here
      bytes->emplace_back(size_t(rows) * row_bytes);
      uint8_t* out = bytes->back().data();
      std::vector<uint8_t> covered(size_t(rows), 0);
      std::vector<float> conv(static_cast<size_t>(width));
      for (const Part& p : ps) {
        const View& v = views[p.plan];
        const std::vector<int64_t>& perm = layout.tensors[p.plan].col_perm;
        const uint64_t in_row = dtype_row_bytes(v.dtype, width);
        for (int64_t r = 0; r < p.run.count; ++r) {
          const int64_t dst = p.run.first + r;
          KCHECK(!covered[size_t(dst)]);
          covered[size_t(dst)] = 1;
          const uint8_t* in = v.data + uint64_t(p.at + r) * in_row;
          if (v.dtype != dtype) {  // widened to F32
            quant::dequantize_row(*dtype_to_ggml(v.dtype), in, width, conv.data());
            in = reinterpret_cast<const uint8_t*>(conv.data());
          }
          uint8_t* o = out + uint64_t(dst) * row_bytes;
          if (perm.empty()) {
            std::memcpy(o, in, row_bytes);
          } else {
            for (int64_t j = 0; j < width; ++j) std::memcpy(o + size_t(perm[size_t(j)]) * es, in + size_t(j) * es, es);
          }
        }
      }
      for (uint8_t c : covered) KCHECK(c);
      info.dtype = dtype;
      info.data = out;
    }
    info.nbytes = uint64_t(rows) * dtype_row_bytes(info.dtype, width);
    infos.push_back(std::move(info));
  }
  struct Keep {
    std::shared_ptr<const GgufFile> file;
    std::shared_ptr<std::vector<std::vector<uint8_t>>> bytes;
  };
  const std::string source = f->path();
  return Checkpoint::from_tensors(source, std::move(infos), std::make_shared<Keep>(Keep{std::move(f), bytes}));
}

}  // namespace kestrel
