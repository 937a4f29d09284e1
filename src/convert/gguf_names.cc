#include "convert/gguf_names.h"

#include <algorithm>
#include <unordered_map>

#include "core/error.h"

namespace kestrel {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string base_type(const std::string& model_type) {
  return ends_with(model_type, "_text") ? model_type.substr(0, model_type.size() - 5) : model_type;
}

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Builds a layout: sources are added once by name, tensors by plan.
class Builder {
 public:
  explicit Builder(GgufLayout& out) : out_(out) {}

  int source(const std::string& name, std::vector<int64_t> shape, std::string loaded_as = "") {
    if (auto it = index_.find(name); it != index_.end()) {
      KCHECK(out_.sources[size_t(it->second)].shape == shape);
      return it->second;
    }
    out_.sources.push_back({name, std::move(shape), std::move(loaded_as)});
    index_[name] = int(out_.sources.size()) - 1;
    return int(out_.sources.size()) - 1;
  }

  // A tensor that is one checkpoint tensor's rows in order (reshaped to `shape` when given).
  GgufTensorPlan& copy(const std::string& gguf, const std::string& hf, std::vector<int64_t> hf_shape,
                       GgufTransform fn = GgufTransform::kNone, std::vector<int64_t> gguf_shape = {}) {
    const int s = source(hf, hf_shape);
    GgufTensorPlan p;
    p.name = gguf;
    p.shape = gguf_shape.empty() ? hf_shape : std::move(gguf_shape);
    KCHECK(numel(p.shape) == numel(hf_shape) && p.shape.back() == hf_shape.back());
    p.rows = {{s, 0, out_.sources[size_t(s)].rows()}};
    p.fn = fn;
    return add(std::move(p));
  }

  // Several checkpoint tensors of one shape stacked along a new first dimension.
  GgufTensorPlan& stack(const std::string& gguf, const std::vector<std::string>& hf, const std::vector<int64_t>& shape) {
    GgufTensorPlan p;
    p.name = gguf;
    p.shape = shape;
    p.shape.insert(p.shape.begin(), int64_t(hf.size()));
    for (const std::string& name : hf) {
      const int s = source(name, shape);
      p.rows.push_back({s, 0, out_.sources[size_t(s)].rows()});
    }
    return add(std::move(p));
  }

  // Rows gathered from runs of one checkpoint tensor.
  GgufTensorPlan& gather(const std::string& gguf, int src, std::vector<int64_t> shape, std::vector<GgufRowRun> runs) {
    GgufTensorPlan p;
    p.name = gguf;
    p.shape = std::move(shape);
    for (GgufRowRun& r : runs) r.src = src;
    p.rows = std::move(runs);
    return add(std::move(p));
  }

  GgufTensorPlan& add(GgufTensorPlan p) {
    // Adjacent runs of one source merge, so a gather that turns out to be in order is one run
    // (the loader then uses the tensor in place).
    std::vector<GgufRowRun> merged;
    for (const GgufRowRun& r : p.rows) {
      if (!merged.empty() && merged.back().src == r.src && merged.back().first + merged.back().count == r.first)
        merged.back().count += r.count;
      else merged.push_back(r);
    }
    p.rows = std::move(merged);
    int64_t rows = 0;
    for (const GgufRowRun& r : p.rows) {
      const GgufSource& s = out_.sources[size_t(r.src)];
      KCHECK(s.shape.back() == p.shape.back() && r.first >= 0 && r.count > 0 && r.first + r.count <= s.rows());
      rows += r.count;
    }
    KCHECK(p.generated.empty() ? rows == p.n_rows() : (p.rows.empty() && int64_t(p.generated.size()) == numel(p.shape)));
    p.keep_f32 = gguf_keeps_f32(p.name, p.shape.size());
    out_.tensors.push_back(std::move(p));
    return out_.tensors.back();
  }

 private:
  GgufLayout& out_;
  std::unordered_map<std::string, int> index_;
};

std::string blk(int l) { return "blk." + std::to_string(l) + "."; }

// ---------------------------------------------------------------------------------------------
// The Qwen line.

// Value heads in llama.cpp's tiled order: position n = j * n_k + i holds the checkpoint's head
// i * r + j (the checkpoint groups the r value heads of each key head together).
std::vector<int64_t> tiled_v_heads(int64_t n_k, int64_t n_v) {
  const int64_t r = n_v / n_k;
  std::vector<int64_t> perm(static_cast<size_t>(n_v));
  for (int64_t j = 0; j < r; ++j)
    for (int64_t i = 0; i < n_k; ++i) perm[size_t(j * n_k + i)] = i * r + j;
  return perm;
}

// Row runs of `n_heads` blocks of `head` rows starting at `base`, in the order `perm` gives.
std::vector<GgufRowRun> head_runs(int64_t base, int64_t head, const std::vector<int64_t>& perm) {
  std::vector<GgufRowRun> runs;
  for (int64_t h : perm) runs.push_back({0, base + h * head, head});
  return runs;
}

std::vector<int64_t> expand_perm(const std::vector<int64_t>& heads, int64_t width) {
  std::vector<int64_t> cols;
  for (int64_t h : heads)
    for (int64_t e = 0; e < width; ++e) cols.push_back(h * width + e);
  return cols;
}

void qwen_layout(const ModelConfig& cfg, Builder& b,
                 const std::function<bool(const std::string&, const std::string&)>& present, const std::string& arch) {
  const std::string& m = cfg.weight_prefix;
  const bool hybrid = arch == "qwen3next" || arch == "qwen35" || arch == "qwen35moe";
  const GgufTransform fold = hybrid ? GgufTransform::kAddOne : GgufTransform::kNone;
  const int64_t H = cfg.hidden_size, V = cfg.vocab_size;
  b.copy("token_embd.weight", m + "embed_tokens.weight", {V, H});
  for (int l = 0; l < cfg.n_layers; ++l) {
    const std::string hf = m + "layers." + std::to_string(l) + ".", g = blk(l);
    b.copy(g + "attn_norm.weight", hf + "input_layernorm.weight", {H}, fold);
    if (cfg.layer_kinds[size_t(l)] == LayerKind::kLinearAttention) {
      const DeltaNetConfig& d = cfg.gdn;
      const int64_t nk = d.n_k_heads, nv = d.n_v_heads, dk = d.k_head_dim, dv = d.v_head_dim, r = nv / nk;
      const int64_t C = d.conv_dim(), K = d.conv_kernel;
      const std::string p = hf + "linear_attn.";
      // Qwen3.5 with fewer key than value heads: the value heads go to llama.cpp's tiled order,
      // unless the model already holds them in that order (a GGUF loaded in its own order).
      std::vector<int64_t> v_heads(static_cast<size_t>(nv));
      for (int64_t h = 0; h < nv; ++h) v_heads[size_t(h)] = h;
      if (arch == "qwen3next" && d.tiled_value_heads)
        unsupported("qwen3next keeps the checkpoint's value head order; a model in the tiled order cannot be written as it");
      if (arch != "qwen3next" && nk != nv && !d.tiled_value_heads) v_heads = tiled_v_heads(nk, nv);
      if (arch == "qwen3next") {
        if (present(g + "ssm_in.weight", "")) {  // a GGUF from before llama.cpp split it: the fused tensor as is
          b.copy(g + "ssm_in.weight", p + "in_proj_qkvz.weight", {nk * (2 * dk + 2 * r * dv), H});
        } else {
          // in_proj_qkvz: per key head i, [q_i (dk), k_i (dk), v_i (r dv), z_i (r dv)] ->
          // attn_qkv = [q of every head | k of every head | v of every head], attn_gate = z.
          const int64_t group = 2 * dk + 2 * r * dv;
          const int s = b.source(p + "in_proj_qkvz.weight", {nk * group, H});
          std::vector<GgufRowRun> qkv, z;
          for (int part = 0; part < 2; ++part)
            for (int64_t i = 0; i < nk; ++i) qkv.push_back({0, i * group + part * dk, dk});
          for (int64_t i = 0; i < nk; ++i) qkv.push_back({0, i * group + 2 * dk, r * dv});
          for (int64_t i = 0; i < nk; ++i) z.push_back({0, i * group + 2 * dk + r * dv, r * dv});
          b.gather(g + "attn_qkv.weight", s, {C, H}, qkv);
          b.gather(g + "attn_gate.weight", s, {nv * dv, H}, z);
        }
        b.copy(g + "ssm_ba.weight", p + "in_proj_ba.weight", {2 * nv, H});
      } else {
        const int qkv = b.source(p + "in_proj_qkv.weight", {C, H});
        std::vector<GgufRowRun> runs = {{0, 0, 2 * nk * dk}};
        for (const GgufRowRun& run : head_runs(2 * nk * dk, dv, v_heads)) runs.push_back(run);
        b.gather(g + "attn_qkv.weight", qkv, {C, H}, runs);
        b.gather(g + "attn_gate.weight", b.source(p + "in_proj_z.weight", {nv * dv, H}), {nv * dv, H},
                 head_runs(0, dv, v_heads));
        b.gather(g + "ssm_beta.weight", b.source(p + "in_proj_b.weight", {nv, H}), {nv, H}, head_runs(0, 1, v_heads));
        b.gather(g + "ssm_alpha.weight", b.source(p + "in_proj_a.weight", {nv, H}), {nv, H}, head_runs(0, 1, v_heads));
      }
      // conv1d [C, 1, K] squeezed to [C, K]; its value channels follow the value heads.
      {
        const int s = b.source(p + "conv1d.weight", {C, 1, K});
        std::vector<GgufRowRun> runs = {{0, 0, 2 * nk * dk}};
        for (const GgufRowRun& run : head_runs(2 * nk * dk, dv, v_heads)) runs.push_back(run);
        b.gather(g + "ssm_conv1d.weight", s, {C, K}, runs);
      }
      b.copy(g + "ssm_dt.bias", p + "dt_bias", {nv}).col_perm = v_heads;
      {
        const int s = b.source(p + "A_log", {nv}, p + "A");
        GgufTensorPlan& a = b.gather(g + "ssm_a", s, {nv}, {{0, 0, 1}});
        a.fn = GgufTransform::kNegExp;
        a.col_perm = v_heads;
      }
      b.copy(g + "ssm_norm.weight", p + "norm.weight", {dv});  // the gated norm: never zero-centred
      b.copy(g + "ssm_out.weight", p + "out_proj.weight", {H, nv * dv}).col_perm = expand_perm(v_heads, dv);
    } else {
      const AttentionConfig& a = cfg.attn;
      const int64_t hd = a.head_dim, nq = a.n_heads, nkv = a.n_kv_heads;
      const std::string p = hf + "self_attn.";
      b.copy(g + "attn_q.weight", p + "q_proj.weight", {nq * hd * (a.output_gate ? 2 : 1), H});  // [q, gate] per head
      b.copy(g + "attn_k.weight", p + "k_proj.weight", {nkv * hd, H});
      b.copy(g + "attn_v.weight", p + "v_proj.weight", {nkv * hd, H});
      b.copy(g + "attn_output.weight", p + "o_proj.weight", {H, nq * hd});
      b.copy(g + "attn_q_norm.weight", p + "q_norm.weight", {hd}, fold);
      b.copy(g + "attn_k_norm.weight", p + "k_norm.weight", {hd}, fold);
    }
    b.copy(g + (hybrid ? "post_attention_norm.weight" : "ffn_norm.weight"), hf + "post_attention_layernorm.weight", {H},
           fold);
    if (cfg.layer_moe[size_t(l)]) {
      const MoeConfig& moe = cfg.moe;
      b.copy(g + "ffn_gate_inp.weight", hf + "mlp.gate.weight", {moe.n_experts, H});
      const char* projs[3][2] = {{"gate_proj", "ffn_gate_exps"}, {"up_proj", "ffn_up_exps"}, {"down_proj", "ffn_down_exps"}};
      for (auto& [proj, name] : projs) {
        std::vector<std::string> hf_names;
        for (int x = 0; x < moe.n_experts; ++x) hf_names.push_back(hf + "mlp.experts." + std::to_string(x) + "." + proj + ".weight");
        const bool down = std::string(proj) == "down_proj";
        b.stack(g + name + ".weight", hf_names, down ? std::vector<int64_t>{H, moe.expert_ffn} : std::vector<int64_t>{moe.expert_ffn, H});
      }
      if (moe.shared_ffn > 0) {
        const int64_t F = moe.shared_ffn;
        b.copy(g + "ffn_gate_inp_shexp.weight", hf + "mlp.shared_expert_gate.weight", {1, H});
        b.copy(g + "ffn_gate_shexp.weight", hf + "mlp.shared_expert.gate_proj.weight", {F, H});
        b.copy(g + "ffn_up_shexp.weight", hf + "mlp.shared_expert.up_proj.weight", {F, H});
        b.copy(g + "ffn_down_shexp.weight", hf + "mlp.shared_expert.down_proj.weight", {H, F});
      }
    } else {
      b.copy(g + "ffn_gate.weight", hf + "mlp.gate_proj.weight", {cfg.ffn_size, H});
      b.copy(g + "ffn_up.weight", hf + "mlp.up_proj.weight", {cfg.ffn_size, H});
      b.copy(g + "ffn_down.weight", hf + "mlp.down_proj.weight", {H, cfg.ffn_size});
    }
  }
  b.copy("output_norm.weight", m + "norm.weight", {H}, fold);
  if (!cfg.tie_embeddings) b.copy("output.weight", "lm_head.weight", {V, H});
}

void check_qwen(const ModelConfig& cfg, const std::string& arch) {
  const std::string& mt = cfg.model_type;
  if (arch == "qwen3next" || arch == "qwen35moe") {
    for (int l = 0; l < cfg.n_layers; ++l)
      if (!cfg.layer_moe[size_t(l)])
        unsupported("GGUF: ", mt, " layer ", l, " has a dense MLP; llama.cpp's ", arch,
                    " has MoE blocks only (mlp_only_layers / decoder_sparse_step are not representable)");
    if (cfg.moe.shared_ffn <= 0)
      unsupported("GGUF: ", mt, " without a shared expert cannot be written: llama.cpp's ", arch,
                  " requires ffn_*_shexp");
  }
  if (arch == "qwen3next" || arch == "qwen35" || arch == "qwen35moe") {
    if (cfg.count_layers(LayerKind::kLinearAttention) > 0 && cfg.gdn.k_head_dim != cfg.gdn.v_head_dim)
      unsupported("GGUF: ", mt, " with linear_key_head_dim ", cfg.gdn.k_head_dim, " != linear_value_head_dim ",
                  cfg.gdn.v_head_dim, ": llama.cpp's ", arch, " sizes both from ssm.state_size");
    // llama.cpp describes the layer pattern by full_attention_interval alone.
    int first_full = cfg.n_layers;
    for (int l = 0; l < cfg.n_layers; ++l)
      if (cfg.layer_kinds[size_t(l)] == LayerKind::kFullAttention) {
        first_full = l;
        break;
      }
    const int interval = first_full + 1;
    for (int l = 0; l < cfg.n_layers; ++l) {
      const bool full = (l + 1) % interval == 0;
      if (full != (cfg.layer_kinds[size_t(l)] == LayerKind::kFullAttention))
        unsupported("GGUF: ", mt, " layer ", l, " is ", layer_kind_name(cfg.layer_kinds[size_t(l)]),
                    ", but the pattern of the first full-attention layer (", arch, ".full_attention_interval = ",
                    interval, ") says otherwise; llama.cpp describes the layer pattern by that interval alone");
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Gemma 4.

void gemma4_layout(const ModelConfig& cfg, Builder& b,
                   const std::function<bool(const std::string&, const std::string&)>& present) {
  const std::string& m = cfg.weight_prefix;
  const int64_t H = cfg.hidden_size, V = cfg.vocab_size, P = cfg.per_layer_input_dim, L = cfg.n_layers;
  b.copy("token_embd.weight", m + "embed_tokens.weight", {V, H});
  if (P > 0) {
    b.copy("per_layer_token_embd.weight", m + "embed_tokens_per_layer.weight", {cfg.per_layer_vocab, L * P});
    b.copy("per_layer_model_proj.weight", m + "per_layer_model_projection.weight", {L * P, H});
    b.copy("per_layer_proj_norm.weight", m + "per_layer_projection_norm.weight", {P});
  }
  b.copy("output_norm.weight", m + "norm.weight", {H});
  if (!cfg.tie_embeddings) b.copy("output.weight", "lm_head.weight", {V, H});
  // Proportional RoPE on the full layers: llama.cpp rotates the whole head with frequency
  // factors 1 for the rotating pairs and 1e30 (frequency ~0) for the rest.
  for (int l = 0; l < L; ++l) {
    if (cfg.layer_kinds[size_t(l)] != LayerKind::kFullAttention) continue;
    const AttentionConfig& a = cfg.attn_for(l);
    GgufTensorPlan p;
    p.name = "rope_freqs.weight";
    p.shape = {a.head_dim / 2};
    p.generated.assign(size_t(a.head_dim / 2), 1e30f);
    std::fill(p.generated.begin(), p.generated.begin() + a.rope.rotary_dim / 2, 1.0f);
    b.add(std::move(p));
    break;
  }
  for (int l = 0; l < L; ++l) {
    const std::string hf = m + "layers." + std::to_string(l) + ".", g = blk(l), p = hf + "self_attn.";
    const AttentionConfig& a = cfg.attn_for(l);
    const int64_t hd = a.head_dim, qw = int64_t(a.n_heads) * hd, kvw = int64_t(a.n_kv_heads) * hd;
    b.copy(g + "attn_norm.weight", hf + "input_layernorm.weight", {H});
    b.copy(g + "attn_q.weight", p + "q_proj.weight", {qw, H});
    if (cfg.kv_source(l) == l) {  // KV-shared layers have no k/v of their own
      b.copy(g + "attn_k.weight", p + "k_proj.weight", {kvw, H});
      if (!a.k_eq_v) b.copy(g + "attn_v.weight", p + "v_proj.weight", {kvw, H});
      b.copy(g + "attn_k_norm.weight", p + "k_norm.weight", {hd});
    }
    b.copy(g + "attn_output.weight", p + "o_proj.weight", {H, qw});
    b.copy(g + "attn_q_norm.weight", p + "q_norm.weight", {hd});
    b.copy(g + "post_attention_norm.weight", hf + "post_attention_layernorm.weight", {H});
    b.copy(g + "ffn_norm.weight", hf + "pre_feedforward_layernorm.weight", {H});
    const int64_t F = cfg.ffn_for(l);
    b.copy(g + "ffn_gate.weight", hf + "mlp.gate_proj.weight", {F, H});
    b.copy(g + "ffn_up.weight", hf + "mlp.up_proj.weight", {F, H});
    b.copy(g + "ffn_down.weight", hf + "mlp.down_proj.weight", {H, F});
    b.copy(g + "post_ffw_norm.weight", hf + "post_feedforward_layernorm.weight", {H});
    if (cfg.layer_moe[size_t(l)]) {
      const int64_t E = cfg.moe.n_experts, FE = cfg.moe.expert_ffn;
      b.copy(g + "ffn_gate_inp.weight", hf + "router.proj.weight", {E, H});
      b.copy(g + "ffn_gate_inp.scale", hf + "router.scale", {H});
      b.copy(g + "ffn_gate_up_exps.weight", hf + "experts.gate_up_proj", {E, 2 * FE, H});
      b.copy(g + "ffn_down_exps.weight", hf + "experts.down_proj", {E, H, FE});
      b.copy(g + "ffn_down_exps.scale", hf + "router.per_expert_scale", {E});
      b.copy(g + "post_ffw_norm_1.weight", hf + "post_feedforward_layernorm_1.weight", {H});
      b.copy(g + "pre_ffw_norm_2.weight", hf + "pre_feedforward_layernorm_2.weight", {H});
      b.copy(g + "post_ffw_norm_2.weight", hf + "post_feedforward_layernorm_2.weight", {H});
    }
    if (P > 0) {
      b.copy(g + "inp_gate.weight", hf + "per_layer_input_gate.weight", {P, H});
      b.copy(g + "proj.weight", hf + "per_layer_projection.weight", {H, P});
      b.copy(g + "post_norm.weight", hf + "post_per_layer_input_norm.weight", {H});
    }
    if (present(g + "layer_output_scale.weight", hf + "layer_scalar"))
      b.copy(g + "layer_output_scale.weight", hf + "layer_scalar", {1});
  }
}

void check_gemma4(const ModelConfig& cfg) {
  const std::string& mt = cfg.model_type;
  int swa_hd = -1, full_hd = -1;
  double swa_theta = 0, full_theta = 0;
  for (int l = 0; l < cfg.n_layers; ++l) {
    const AttentionConfig& a = cfg.attn_for(l);
    const bool full = cfg.layer_kinds[size_t(l)] == LayerKind::kFullAttention;
    int& hd = full ? full_hd : swa_hd;
    double& theta = full ? full_theta : swa_theta;
    if (hd < 0) {
      hd = a.head_dim;
      theta = a.rope.theta;
    }
    if (a.head_dim != hd || a.rope.theta != theta)
      unsupported("GGUF: ", mt, " layer ", l, ": every ", layer_kind_name(cfg.layer_kinds[size_t(l)]),
                  " layer must share one head size and RoPE base (llama.cpp's gemma4 keeps one of each per layer type)");
    if (a.n_heads != cfg.attn_for(0).n_heads)
      unsupported("GGUF: ", mt, " layer ", l, " has ", a.n_heads, " query heads, layer 0 ", cfg.attn_for(0).n_heads);
    if (full && !a.rope.whole_head_pairs)
      unsupported("GGUF: ", mt, " full-attention layer ", l,
                  " does not use proportional RoPE, the only kind llama.cpp's gemma4 converter writes (rope_freqs)");
    if (!full && a.rope.whole_head_pairs)
      unsupported("GGUF: ", mt, " sliding layer ", l, " uses proportional RoPE; llama.cpp's gemma4 has rope_freqs for "
                  "full-attention layers only");
  }
  if (cfg.per_layer_input_dim > 0 && cfg.per_layer_vocab != cfg.vocab_size)
    unsupported("GGUF: ", mt, " with vocab_size_per_layer_input ", cfg.per_layer_vocab, " != vocab_size ",
                cfg.vocab_size, ": llama.cpp's gemma4 sizes per_layer_token_embd by the vocabulary");
}

}  // namespace

int64_t GgufSource::rows() const { return numel(shape) / shape.back(); }
int64_t GgufTensorPlan::n_rows() const { return numel(shape) / shape.back(); }

bool gguf_keeps_f32(const std::string& name, size_t n_dims) {
  if (n_dims <= 1 || ends_with(name, "_norm.weight") || !ends_with(name, ".weight")) return true;
  for (const char* t : {".ffn_gate_inp.weight", ".ffn_gate_inp_shexp.weight", ".ssm_conv1d.weight"})
    if (ends_with(name, t)) return true;
  return false;
}

double partial_rotary_for(int rot, int head_dim) {
  if (rot >= head_dim) return 1.0;
  return (double(rot) + 0.5) / double(head_dim);
}

std::string gguf_arch_name(const ModelConfig& cfg) {
  const std::string t = base_type(cfg.model_type);
  if (t == "qwen3") return "qwen3";
  if (t == "qwen3_moe") return "qwen3moe";
  if (t == "qwen3_next") return "qwen3next";
  if (t == "qwen3_5") return "qwen35";
  if (t == "qwen3_5_moe") return "qwen35moe";
  if (t == "gemma4") return "gemma4";
  if (t == "qwen4_exp")
    unsupported("GGUF: model_type 'qwen4_exp' has no llama.cpp architecture (hyper-connections, hashed n-gram "
                "per-layer embeddings and the QSA indexer have no GGUF names), so kestrel convert does not write it");
  unsupported("GGUF: model_type '", cfg.model_type,
              "' cannot be converted to GGUF (supported: qwen3, qwen3_moe, qwen3_next, qwen3_5, qwen3_5_moe, gemma4; "
              "see docs/gguf.md)");
}

void check_gguf_convertible(const ModelConfig& cfg) {
  const std::string arch = gguf_arch_name(cfg);
  if (arch == "gemma4") check_gemma4(cfg);
  else check_qwen(cfg, arch);
}

GgufLayout gguf_layout(const ModelConfig& cfg,
                       const std::function<bool(const std::string& gguf, const std::string& hf)>& present) {
  GgufLayout out;
  out.arch = gguf_arch_name(cfg);
  Builder b(out);
  if (out.arch == "gemma4") gemma4_layout(cfg, b, present);
  else qwen_layout(cfg, b, present, out.arch);
  for (GgufTensorPlan& p : out.tensors) {  // column permutations are permutations of the row
    if (p.col_perm.empty()) continue;
    std::vector<int64_t> sorted = p.col_perm;
    std::sort(sorted.begin(), sorted.end());
    for (size_t j = 0; j < sorted.size(); ++j) KCHECK(sorted[j] == int64_t(j));
    KCHECK(int64_t(sorted.size()) == p.shape.back());
    if (sorted == p.col_perm) p.col_perm.clear();  // the identity: the tensor is used as stored
  }
  return out;
}

}  // namespace kestrel
