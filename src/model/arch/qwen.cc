// The Qwen line's weights and forward pass. Each decoder layer:
//
//   h = norm(x);  x += mixer(h)      mixer: softmax attention (gated on hybrids) or Gated DeltaNet
//   h = norm(x);  x += ffn(h)        ffn: SwiGLU MLP or MoE (+ sigmoid-gated shared expert)
//
// then the final norm and the output head on the rows whose logits were asked for.
#include <cmath>
#include <memory>

#include "core/error.h"
#include "model/arch/qwen.h"
#include "model/layers/blocks.h"
#include "model/model.h"
#include "model/registry.h"
#include "model/weight_loader.h"

namespace kestrel {
namespace {

struct QwenLayer {
  LayerKind kind;
  Tensor input_norm, post_norm;  // F32 [1, H], (1 + w) already folded in
  AttentionWeights attn;
  DeltaNetWeights gdn;
  bool moe = false;
  MlpWeights mlp;
  MoeWeights moe_w;
};

class QwenModel final : public Model {
 public:
  QwenModel(const ModelConfig& cfg, WeightLoader& wl);
  void forward(const StepPlan& plan, ModelCache& cache, const Tensor& logits, HiddenCapture* capture) override;
  const char* graph_blocker() const override { return nullptr; }

 private:
  Tensor norm(WeightLoader& wl, const std::string& name, int64_t n) const;
  MlpWeights mlp(WeightLoader& wl, const std::string& p, int64_t ffn, bool expert = false) const;
  void load_attention(WeightLoader& wl, const std::string& p, QwenLayer& layer) const;
  void load_deltanet(WeightLoader& wl, const std::string& p, QwenLayer& layer) const;

  Tensor embed_, final_norm_, lm_head_;
  std::vector<QwenLayer> layers_;
  std::vector<Buffer> buffers_;
};

Tensor QwenModel::norm(WeightLoader& wl, const std::string& name, int64_t n) const {
  if (cfg_.zero_centered_norm) return wl.f32(name, {n}, [](float w) { return 1.0f + w; });
  return wl.f32(name, {n});
}

MlpWeights QwenModel::mlp(WeightLoader& wl, const std::string& p, int64_t ffn, bool expert) const {
  const int64_t H = cfg_.hidden_size;
  // a routed expert's matrices go to moe_experts (row-major); the others only to matmuls
  auto load = [&](const std::string& name, int64_t rows, int64_t cols) {
    return expert ? wl.op_weight(p + name, rows, cols) : wl.matmul_weight(p + name, rows, cols);
  };
  return {.gate = load("gate_proj.weight", ffn, H), .up = load("up_proj.weight", ffn, H),
          .down = load("down_proj.weight", H, ffn)};
}

void QwenModel::load_attention(WeightLoader& wl, const std::string& p, QwenLayer& layer) const {
  const auto& a = cfg_.attn;
  const int64_t H = cfg_.hidden_size, hd = a.head_dim, qw = int64_t(a.n_heads) * hd, kvw = int64_t(a.n_kv_heads) * hd;
  auto& w = layer.attn;
  if (a.output_gate) {
    // q_proj packs [query (hd), gate (hd)] per head: split into two matrices.
    std::vector<int64_t> q_rows, g_rows;
    for (int64_t h = 0; h < a.n_heads; ++h) {
      for (int64_t i = 0; i < hd; ++i) {
        q_rows.push_back(h * 2 * hd + i);
        g_rows.push_back(h * 2 * hd + hd + i);
      }
    }
    w.q = wl.matmul_weight_rows(p + "q_proj.weight", 2 * qw, H, q_rows);
    w.gate = wl.matmul_weight_rows(p + "q_proj.weight", 2 * qw, H, g_rows);
  } else {
    w.q = wl.matmul_weight(p + "q_proj.weight", qw, H);
  }
  w.k = wl.matmul_weight(p + "k_proj.weight", kvw, H);
  w.v = wl.matmul_weight(p + "v_proj.weight", kvw, H);
  w.o = wl.matmul_weight(p + "o_proj.weight", H, qw);
  w.q_norm = norm(wl, p + "q_norm.weight", hd);
  w.k_norm = norm(wl, p + "k_norm.weight", hd);
}

void QwenModel::load_deltanet(WeightLoader& wl, const std::string& p, QwenLayer& layer) const {
  const auto& g = cfg_.gdn;
  const int64_t H = cfg_.hidden_size, nk = g.n_k_heads, nv = g.n_v_heads, dk = g.k_head_dim, dv = g.v_head_dim;
  const int64_t C = g.conv_dim(), r = nv / nk;
  auto& w = layer.gdn;
  if (wl.has(p + "in_proj_qkvz.weight")) {
    // Qwen3-Next: per key head i the rows are [q_i (dk), k_i (dk), v_i (r dv), z_i (r dv)];
    // regroup into q (all heads) | k | v and a separate z.
    const int64_t group = 2 * dk + 2 * r * dv;
    std::vector<int64_t> qkv_rows, z_rows;
    for (int part = 0; part < 2; ++part) {  // q then k
      for (int64_t i = 0; i < nk; ++i)
        for (int64_t e = 0; e < dk; ++e) qkv_rows.push_back(i * group + part * dk + e);
    }
    for (int64_t i = 0; i < nk; ++i)
      for (int64_t e = 0; e < r * dv; ++e) qkv_rows.push_back(i * group + 2 * dk + e);
    for (int64_t i = 0; i < nk; ++i)
      for (int64_t e = 0; e < r * dv; ++e) z_rows.push_back(i * group + 2 * dk + r * dv + e);
    w.qkv = wl.matmul_weight_rows(p + "in_proj_qkvz.weight", nk * group, H, qkv_rows);
    w.z = wl.matmul_weight_rows(p + "in_proj_qkvz.weight", nk * group, H, z_rows);
    // in_proj_ba: per key head i, [b_i (r), a_i (r)].
    std::vector<int64_t> b_rows, a_rows;
    for (int64_t i = 0; i < nk; ++i) {
      for (int64_t e = 0; e < r; ++e) {
        b_rows.push_back(i * 2 * r + e);
        a_rows.push_back(i * 2 * r + r + e);
      }
    }
    w.b = wl.matmul_weight_rows(p + "in_proj_ba.weight", nk * 2 * r, H, b_rows);
    w.a = wl.matmul_weight_rows(p + "in_proj_ba.weight", nk * 2 * r, H, a_rows);
  } else {
    w.qkv = wl.matmul_weight(p + "in_proj_qkv.weight", C, H);
    w.z = wl.matmul_weight(p + "in_proj_z.weight", nv * dv, H);
    w.b = wl.matmul_weight(p + "in_proj_b.weight", nv, H);
    w.a = wl.matmul_weight(p + "in_proj_a.weight", nv, H);
  }
  w.conv = wl.f32(p + "conv1d.weight", {C, 1, g.conv_kernel}, {}, true);
  w.conv = w.conv.reshaped(C, g.conv_kernel);
  // A = -exp(A_log): checkpoints store A_log; a GGUF stores A itself (llama.cpp's ssm_a), which
  // the GGUF loader exposes as "A".
  if (wl.has(p + "A")) w.a_neg = wl.f32(p + "A", {nv});
  else w.a_neg = wl.f32(p + "A_log", {nv}, [](float x) { return -std::exp(x); });
  w.dt_bias = wl.f32(p + "dt_bias", {nv});
  w.norm = wl.f32(p + "norm.weight", {dv});  // gated RMSNorm: plain weight, never zero-centred
  w.out = wl.matmul_weight(p + "out_proj.weight", H, nv * dv);
}

QwenModel::QwenModel(const ModelConfig& cfg, WeightLoader& wl) : Model(cfg, wl.ops()) {
  const int64_t H = cfg.hidden_size, V = cfg.vocab_size;
  embed_ = wl.op_weight("embed_tokens.weight", V, H);
  final_norm_ = norm(wl, "norm.weight", H);
  if (cfg.tie_embeddings) {
    lm_head_ = embed_;
  } else {
    lm_head_ = wl.head_weight("lm_head.weight", V, H);
    gathered_table(embed_, 1);
  }
  layers_.resize(size_t(cfg.n_layers));
  for (int l = 0; l < cfg.n_layers; ++l) {
    QwenLayer& layer = layers_[size_t(l)];
    const std::string p = "layers." + std::to_string(l) + ".";
    layer.kind = cfg.layer_kinds[size_t(l)];
    layer.input_norm = norm(wl, p + "input_layernorm.weight", H);
    layer.post_norm = norm(wl, p + "post_attention_layernorm.weight", H);
    if (layer.kind == LayerKind::kLinearAttention) {
      load_deltanet(wl, p + "linear_attn.", layer);
    } else {
      load_attention(wl, p + "self_attn.", layer);
    }
    layer.moe = cfg.layer_moe[size_t(l)];
    if (!layer.moe) {
      layer.mlp = mlp(wl, p + "mlp.", cfg.ffn_size);
      continue;
    }
    const auto& m = cfg.moe;
    auto& mw = layer.moe_w;
    mw.router = wl.op_weight(p + "mlp.gate.weight", m.n_experts, H);
    for (int e = 0; e < m.n_experts; ++e) {
      MlpWeights ex = mlp(wl, p + "mlp.experts." + std::to_string(e) + ".", m.expert_ffn, /*expert=*/true);
      mw.experts.gate.push_back(ex.gate);
      mw.experts.up.push_back(ex.up);
      mw.experts.down.push_back(ex.down);
    }
    routed_experts(mw.experts);
    if (m.shared_ffn > 0) {
      mw.shared = mlp(wl, p + "mlp.shared_expert.", m.shared_ffn);
      if (m.shared_gate) mw.shared_gate = wl.op_weight(p + "mlp.shared_expert_gate.weight", 1, H);
    }
  }
  n_params_ = wl.loaded_params();
  weight_bytes_ = wl.loaded_bytes();
  buffers_ = wl.take_buffers();
}

void QwenModel::forward(const StepPlan& plan, ModelCache& cache, const Tensor& logits, HiddenCapture* capture) {
  const int64_t T = plan.n_rows(), H = cfg_.hidden_size;
  const float eps = cfg_.norm_eps;
  ws_.reset();
  ops_.begin_step(plan);
  Tensor x = ws_.take(T, H);  // the residual stream
  Tensor h = ws_.take(T, H);  // normalized input of the current sub-layer
  Tensor y = ws_.take(T, H);  // sub-layer output
  if (cfg_.n_layers > 0) ops_.embed_rms_norm(x, h, embed_, plan, 1.0f, layers_[0].input_norm, eps);
  else ops_.embed(x, embed_, plan, 1.0f);
  capture_hidden(capture, x);  // the embedding (the norm wrote h)
  for (int l = 0; l < cfg_.n_layers; ++l) {
    const QwenLayer& layer = layers_[size_t(l)];
    // h holds this layer's normalized input: the residual add ending the previous layer made it.
    if (layer.kind == LayerKind::kLinearAttention) {
      deltanet_block(ops_, ws_, layer.gdn, cfg_.gdn, eps, cache.state(l), plan, h, y);
    } else {
      attention_block(ops_, ws_, layer.attn, cfg_.attn, eps, cache.kv(l), 0, plan, h, y);
    }
    ops_.add_rms_norm(x, y, layer.post_norm, h, eps);  // x += y; h = norm(x)
    if (layer.moe) {
      moe_block(ops_, ws_, layer.moe_w, cfg_.moe, h, y);
    } else {
      mlp_block(ops_, ws_, layer.mlp, h, y);
    }
    if (l + 1 == cfg_.n_layers) break;  // the last add goes with the final norm
    ops_.add_rms_norm(x, y, layers_[size_t(l) + 1].input_norm, h, eps);  // and the next layer's input norm
    if (capture) capture_hidden(capture, x);
  }
  if (cfg_.n_layers > 0) {
    add_norm_and_head(plan, x, y, final_norm_, lm_head_, logits, capture);
  } else {
    norm_and_head(plan, x, final_norm_, lm_head_, logits, capture);
  }
}

const ArchRegistrar kQwen{{
    .name = "qwen",
    .model_types = {"qwen3", "qwen3_text", "qwen3_moe", "qwen3_moe_text", "qwen3_next", "qwen3_next_text", "qwen3_5",
                    "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"},
    .parse_config = parse_qwen_config,
    .build = [](const ModelConfig& cfg, WeightLoader& wl) -> std::unique_ptr<Model> {
      return std::make_unique<QwenModel>(cfg, wl);
    },
}};

}  // namespace
}  // namespace kestrel
