// Gemma 4's weights and forward pass. Before the layers, the per-layer embeddings (when
// hidden_size_per_layer_input > 0) are formed once for the whole step:
//
//   ple[T, L*P] = (rmsnorm_P(embed(x) . W_ple / sqrt(H)) + embed_ple(ids) * sqrt(P)) / sqrt(2)
//
// Each decoder layer l (sandwich norms; every norm is x * w):
//
//   x += post_attn_norm(attention(input_norm(x)))        sliding or full layer, q/k/v norms
//   f  = mlp(pre_ff_norm(x))                             GeGLU
//   f  = post_ff_norm_1(f) + post_ff_norm_2(moe(pre_ff_norm_2(x)))   only with the MoE block
//   x += post_ff_norm(f)
//   x += post_ple_norm(W_proj . (gelu(W_gate . x) * ple[:, l]))      only with per-layer embeddings
//   x *= layer_scalar
//
// then the final norm, the (tied) output head and the logit softcap.
#include <cmath>
#include <memory>

#include "core/error.h"
#include "model/arch/gemma4.h"
#include "model/layers/blocks.h"
#include "model/model.h"
#include "model/registry.h"
#include "model/weight_loader.h"

namespace kestrel {
namespace {

struct Gemma4Layer {
  int window = 0;  // > 0: sliding-window layer
  Tensor input_norm, post_attn_norm, pre_ff_norm, post_ff_norm;  // F32 [1, H]
  AttentionWeights attn;
  MlpWeights mlp;
  // MoE block beside the dense MLP
  bool moe = false;
  Tensor router;                 // [E, H]
  Tensor router_norm;            // F32 [1, H]: router.scale / sqrt(H), applied after a weightless RMSNorm
  ExpertWeights experts;
  Tensor post_ff_norm_1, pre_ff_norm_2, post_ff_norm_2;  // F32 [1, H]
  // per-layer embeddings
  Tensor ple_gate;               // [P, H]
  Tensor ple_proj;               // [H, P]
  Tensor post_ple_norm;          // F32 [1, H]
  float layer_scalar = 1.0f;
};

class Gemma4Model final : public Model {
 public:
  Gemma4Model(const ModelConfig& cfg, WeightLoader& wl);
  void forward(const StepPlan& plan, ModelCache& cache, const Tensor& logits, HiddenCapture* capture) override;
  // Decode steps replay from graphs: checked bit-identical to eager over ring caches, shared KV
  // and MoE (tests/gpu/step_graphs_test.cc).
  const char* graph_blocker() const override { return nullptr; }

 private:
  Tensor norm(WeightLoader& wl, const std::string& name, int64_t n) const { return wl.f32(name, {n}); }
  void load_attention(WeightLoader& wl, int l, const std::string& p, Gemma4Layer& layer) const;
  void load_moe(WeightLoader& wl, const std::string& p, Gemma4Layer& layer) const;
  // ple [T, L * P] for this step's tokens, from the embeddings x [T, H].
  void per_layer_inputs(const StepPlan& plan, const Tensor& x, const Tensor& ple);
  void moe_beside_mlp(const Gemma4Layer& layer, const Tensor& x, const Tensor& f);

  Tensor embed_, final_norm_, lm_head_;
  Tensor ple_embed_;       // [V_ple, L * P]
  Tensor ple_model_proj_;  // [L * P, H]
  Tensor ple_norm_;        // F32 [1, P]
  std::vector<Gemma4Layer> layers_;
  std::vector<int> last_reader_;  // [n_layers]: the last layer reading layer l's KV cache
  std::vector<Buffer> buffers_;
};

void Gemma4Model::load_attention(WeightLoader& wl, int l, const std::string& p, Gemma4Layer& layer) const {
  const AttentionConfig& a = cfg_.attn_for(l);
  const int64_t H = cfg_.hidden_size, hd = a.head_dim, qw = int64_t(a.n_heads) * hd, kvw = int64_t(a.n_kv_heads) * hd;
  auto& w = layer.attn;
  w.q = wl.op_weight(p + "q_proj.weight", qw, H);
  w.q_norm = norm(wl, p + "q_norm.weight", hd);
  w.o = wl.op_weight(p + "o_proj.weight", H, qw);
  if (cfg_.kv_source(l) != l) return;  // KV-shared: no k/v projections of its own
  w.k = wl.op_weight(p + "k_proj.weight", kvw, H);
  if (!a.k_eq_v) w.v = wl.op_weight(p + "v_proj.weight", kvw, H);
  w.k_norm = norm(wl, p + "k_norm.weight", hd);
}

void Gemma4Model::load_moe(WeightLoader& wl, const std::string& p, Gemma4Layer& layer) const {
  const auto& m = cfg_.moe;
  const int64_t H = cfg_.hidden_size, E = m.n_experts, F = m.expert_ffn;
  layer.moe = true;
  layer.router = wl.op_weight(p + "router.proj.weight", E, H);
  const float root = float(1.0 / std::sqrt(double(H)));
  layer.router_norm = wl.f32(p + "router.scale", {H}, [root](float s) { return s * root; });
  layer.experts.expert_scale = wl.f32(p + "router.per_expert_scale", {E});
  layer.experts.act = Activation::kGeluTanh;
  // gate_up_proj [E, 2F, H]: expert e's gate is rows [0, F) of its slice, up rows [F, 2F).
  Tensor gate_up = wl.op_weight_stack(p + "experts.gate_up_proj", E, 2 * F, H);
  Tensor down = wl.op_weight_stack(p + "experts.down_proj", E, H, F);
  for (int64_t e = 0; e < E; ++e) {
    layer.experts.gate.push_back(gate_up.rows_slice(e * 2 * F, F));
    layer.experts.up.push_back(gate_up.rows_slice(e * 2 * F + F, F));
    layer.experts.down.push_back(down.rows_slice(e * H, H));
  }
  layer.post_ff_norm_1 = norm(wl, p + "post_feedforward_layernorm_1.weight", H);
  layer.pre_ff_norm_2 = norm(wl, p + "pre_feedforward_layernorm_2.weight", H);
  layer.post_ff_norm_2 = norm(wl, p + "post_feedforward_layernorm_2.weight", H);
}

Gemma4Model::Gemma4Model(const ModelConfig& cfg, WeightLoader& wl) : Model(cfg, wl.ops()) {
  const int64_t H = cfg.hidden_size, V = cfg.vocab_size, P = cfg.per_layer_input_dim, L = cfg.n_layers;
  embed_ = wl.op_weight("embed_tokens.weight", V, H);
  final_norm_ = norm(wl, "norm.weight", H);
  lm_head_ = cfg.tie_embeddings ? embed_ : wl.head_weight("lm_head.weight", V, H);
  if (!cfg.tie_embeddings) gathered_table(embed_, 1);
  if (P > 0) {
    ple_embed_ = wl.op_weight("embed_tokens_per_layer.weight", cfg.per_layer_vocab, L * P);
    gathered_table(ple_embed_, 1);
    ple_model_proj_ = wl.op_weight("per_layer_model_projection.weight", L * P, H);
    ple_norm_ = norm(wl, "per_layer_projection_norm.weight", P);
  }
  layers_.resize(size_t(L));
  for (int l = 0; l < cfg.n_layers; ++l) {
    Gemma4Layer& layer = layers_[size_t(l)];
    const std::string p = "layers." + std::to_string(l) + ".";
    layer.window = cfg.window_for(l);
    layer.input_norm = norm(wl, p + "input_layernorm.weight", H);
    layer.post_attn_norm = norm(wl, p + "post_attention_layernorm.weight", H);
    layer.pre_ff_norm = norm(wl, p + "pre_feedforward_layernorm.weight", H);
    layer.post_ff_norm = norm(wl, p + "post_feedforward_layernorm.weight", H);
    load_attention(wl, l, p + "self_attn.", layer);
    const int64_t F = cfg.ffn_for(l);
    layer.mlp = {.gate = wl.op_weight(p + "mlp.gate_proj.weight", F, H),
                 .up = wl.op_weight(p + "mlp.up_proj.weight", F, H),
                 .down = wl.op_weight(p + "mlp.down_proj.weight", H, F),
                 .act = Activation::kGeluTanh};
    if (cfg.layer_moe[size_t(l)]) {
      load_moe(wl, p, layer);
      routed_experts(layer.experts);
    }
    if (P > 0) {
      layer.ple_gate = wl.op_weight(p + "per_layer_input_gate.weight", P, H);
      layer.ple_proj = wl.op_weight(p + "per_layer_projection.weight", H, P);
      layer.post_ple_norm = norm(wl, p + "post_per_layer_input_norm.weight", H);
    }
    layer.layer_scalar = wl.has(p + "layer_scalar") ? wl.scalar(p + "layer_scalar") : 1.0f;
  }
  last_reader_.resize(size_t(L));
  for (int l = 0; l < cfg.n_layers; ++l) last_reader_[size_t(cfg.kv_source(l))] = l;
  n_params_ = wl.loaded_params();
  weight_bytes_ = wl.loaded_bytes();
  buffers_ = wl.take_buffers();
}

void Gemma4Model::per_layer_inputs(const StepPlan& plan, const Tensor& x, const Tensor& ple) {
  const int64_t T = x.rows, P = cfg_.per_layer_input_dim, LP = ple.cols;
  // context part: rmsnorm over each P-group of (x . W / sqrt(H))
  ops_.matmul(ple, x, ple_model_proj_);
  ops_.scale(ple, 1.0 / std::sqrt(double(cfg_.hidden_size)));
  Tensor groups = ple.reshaped(T * (LP / P), P);
  ops_.rms_norm(groups, groups, ple_norm_, cfg_.norm_eps);
  // token part, then the average of the two (scaled by 1/sqrt(2))
  Tensor tok = ws_.take(T, LP);
  ops_.embed(tok, ple_embed_, plan, std::sqrt(double(P)));
  ops_.add(ple, ple, tok);
  ops_.scale(ple, 1.0 / std::sqrt(2.0));
}

void Gemma4Model::moe_beside_mlp(const Gemma4Layer& layer, const Tensor& x, const Tensor& f) {
  PhaseScope phase(ops_, Phase::kFfn);
  const int64_t T = x.rows, H = x.cols;
  const float eps = cfg_.norm_eps;
  const auto& m = cfg_.moe;
  ops_.rms_norm(f, f, layer.post_ff_norm_1, eps);
  // router on the residual stream (the MLP's input before its norm)
  Tensor r = ws_.take(T, H);
  ops_.rms_norm(r, x, layer.router_norm, eps);
  Tensor scores = ws_.take(T, m.n_experts);
  ops_.matmul(scores, r, layer.router);
  Tensor ids = ws_.take(DType::kI32, T, m.top_k);
  Tensor weights = ws_.take(T, m.top_k);
  ops_.moe_route(ids, weights, scores, m.top_k, /*norm_topk=*/true);
  Tensor h2 = ws_.take(T, H);
  ops_.rms_norm(h2, x, layer.pre_ff_norm_2, eps);
  Tensor y2 = ws_.take(T, H);
  ops_.moe_experts(y2, h2, ids, weights, layer.experts);
  ops_.rms_norm(y2, y2, layer.post_ff_norm_2, eps);
  ops_.add(f, f, y2);
}

void Gemma4Model::forward(const StepPlan& plan, ModelCache& cache, const Tensor& logits, HiddenCapture* capture) {
  const int64_t T = plan.n_rows(), H = cfg_.hidden_size, P = cfg_.per_layer_input_dim;
  const float eps = cfg_.norm_eps;
  ws_.reset();
  ops_.begin_step(plan);
  Tensor x = ws_.take(T, H);  // the residual stream
  Tensor h = ws_.take(T, H);  // normalized input of the current sub-layer
  Tensor y = ws_.take(T, H);  // sub-layer output
  ops_.embed(x, embed_, plan, cfg_.embed_scale);
  capture_hidden(capture, x);
  Tensor ple, ple_l, g;  // [T, L * P], [T, P], [T, P]
  if (P > 0) {
    ple = ws_.take(T, int64_t(cfg_.n_layers) * P);
    ple_l = ws_.take(T, P);
    g = ws_.take(T, P);
    per_layer_inputs(plan, x, ple);
  }
  // A layer whose K/V later layers share keeps this step's k/v and writes its cache only after
  // the last of them has attended (a sliding layer's ring would otherwise lose the past they need).
  std::vector<StepKv> step_kv(size_t(cfg_.n_layers));
  for (int l = 0; l < cfg_.n_layers; ++l) {
    const Gemma4Layer& layer = layers_[size_t(l)];
    const int src = cfg_.kv_source(l);
    ops_.rms_norm(h, x, layer.input_norm, eps);
    attention_block(ops_, ws_, layer.attn, cfg_.attn_for(l), eps, cache.kv(l), layer.window, plan, h, y, Tensor{},
                    &step_kv[size_t(src)], /*write_kv=*/last_reader_[size_t(src)] == l);
    if (src != l && last_reader_[size_t(src)] == l)
      ops_.kv_write(cache.kv(src), step_kv[size_t(src)].k, step_kv[size_t(src)].v, plan);
    ops_.rms_norm(y, y, layer.post_attn_norm, eps);
    ops_.add_rms_norm(x, y, layer.pre_ff_norm, h, eps);  // x += y; h = norm(x)
    mlp_block(ops_, ws_, layer.mlp, h, y);
    if (layer.moe) moe_beside_mlp(layer, x, y);
    ops_.rms_norm(y, y, layer.post_ff_norm, eps);
    ops_.add(x, x, y);
    if (P > 0) {
      ops_.matmul(g, x, layer.ple_gate);
      ops_.slice_cols(ple_l, ple, int64_t(l) * P);
      ops_.gelu_tanh_mul(g, g, ple_l);
      ops_.matmul(y, g, layer.ple_proj);
      ops_.rms_norm(y, y, layer.post_ple_norm, eps);
      ops_.add(x, x, y);
    }
    if (layer.layer_scalar != 1.0f) ops_.scale(x, layer.layer_scalar);
    if (capture && l + 1 < cfg_.n_layers) capture_hidden(capture, x);
  }
  norm_and_head(plan, x, final_norm_, lm_head_, logits, capture);
  if (cfg_.final_logit_softcap > 0.0f && !plan.logit_rows.empty()) ops_.softcap(logits, cfg_.final_logit_softcap);
}

const ArchRegistrar kGemma4{{
    .name = "gemma4",
    .model_types = {"gemma4", "gemma4_text"},
    .parse_config = parse_gemma4_config,
    .build = [](const ModelConfig& cfg, WeightLoader& wl) -> std::unique_ptr<Model> {
      return std::make_unique<Gemma4Model>(cfg, wl);
    },
}};

}  // namespace
}  // namespace kestrel
