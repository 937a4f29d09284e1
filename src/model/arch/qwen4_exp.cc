// Qwen4-Exp's weights and forward pass. The residual stream is hc_count streams of width H,
// x [T, hc * H], started as copies of the token embedding. Each decoder layer:
//
//   x += ple(x, ids)                                   only on PLE layers (hashed n-gram embeddings)
//   m, w = hc_attn(x);  x_s += w_s * mixer(m)          mixer: Gated DeltaNet or QSA attention
//   m, w = hc_mlp(x);   x_s += w_s * moe(m)            Qwen MoE with a sigmoid-gated shared expert
//
// where a hyper-connection hc(x) normalizes each stream (n = rmsnorm_H(x)), mixes them into one
// input m = mean_s(sigmoid(U silu(D n / hc))_s * n_s) and, per stream, an injection weight
// w = 2 sigmoid(W n / hc). The final mixer hc(x) (without injection) feeds the output head.
#include <cmath>
#include <memory>

#include "core/error.h"
#include "model/arch/qwen4_exp.h"
#include "model/layers/blocks.h"
#include "model/model.h"
#include "model/registry.h"
#include "model/weight_loader.h"

namespace kestrel {
namespace {

struct HyperWeights {
  Tensor norm;    // F32 [1, hc * H], (1 + w) folded
  Tensor down;    // [lowrank, hc * H]
  Tensor up;      // [hc * H, lowrank]
  Tensor inject;  // [hc, hc * H], empty for the final mixer
};

struct PleWeights {
  NgramHash hash;
  Tensor hash_packed;                  // I64 [1, n + 2 * heads]: hash.packed() on the backend
  std::vector<Tensor> table;           // row shards of the n-gram table, each [rows_k, ple_dim / ngram_heads]
  Tensor key_proj;                     // [hc * H, ple_dim]
  Tensor value_proj;                   // [H, ple_dim]
  Tensor norm_key, norm_query, norm_conv;  // F32 [1, hc * H]
  Tensor conv;                         // F32 [hc * H, kernel]
};

struct Qwen4Layer {
  LayerKind kind;
  HyperWeights attn_hc, mlp_hc;
  AttentionWeights attn;
  Tensor index_q, index_k;             // [n_idx * d_idx, H], [d_idx, H]
  Tensor index_q_norm, index_k_norm;   // F32 [1, d_idx]
  DeltaNetWeights gdn;
  MoeWeights moe;
  int ple = -1;                        // PLE module index, -1 = none
  PleWeights ple_w;
};

class Qwen4ExpModel final : public Model {
 public:
  Qwen4ExpModel(const ModelConfig& cfg, WeightLoader& wl);
  void forward(const StepPlan& plan, ModelCache& cache, const Tensor& logits, HiddenCapture* capture) override;
  const char* graph_blocker() const override { return nullptr; }

 private:
  Tensor norm(WeightLoader& wl, const std::string& name, int64_t n) const {
    return wl.f32(name, {n}, [](float w) { return 1.0f + w; });
  }
  HyperWeights hyper(WeightLoader& wl, const std::string& p, bool inject) const;
  void load_attention(WeightLoader& wl, const std::string& p, Qwen4Layer& layer) const;
  void load_deltanet(WeightLoader& wl, const std::string& p, Qwen4Layer& layer) const;
  void load_moe(WeightLoader& wl, const std::string& p, Qwen4Layer& layer) const;
  void load_ple(WeightLoader& wl, const std::string& p, Qwen4Layer& layer) const;

  // m [T, H] (and w [T, hc] when w is not empty) from the streams x [T, hc * H].
  void hyper_connection(const HyperWeights& hw, const Tensor& x, const Tensor& m, const Tensor& w);
  // windows: the step's token windows (token_windows, ngram_size wide).
  void ple_block(const Qwen4Layer& layer, const StepPlan& plan, ModelCache& cache, int l, const Tensor& windows,
                 const Tensor& x);
  void qsa_block(const Qwen4Layer& layer, const StepPlan& plan, const KvLayerView& kv, const Tensor& h,
                 const Tensor& y);

  Tensor embed_, lm_head_;
  HyperWeights mixer_;
  std::vector<Qwen4Layer> layers_;
  std::vector<Buffer> buffers_;
};

HyperWeights Qwen4ExpModel::hyper(WeightLoader& wl, const std::string& p, bool inject) const {
  const int64_t HC = int64_t(cfg_.q4.hc_count) * cfg_.hidden_size, r = cfg_.q4.hc_lowrank;
  HyperWeights w;
  w.norm = norm(wl, p + "hc_norm.weight", HC);
  w.down = wl.op_weight(p + "input_mix_weight_down.weight", r, HC);
  w.up = wl.op_weight(p + "input_mix_weight_up.weight", HC, r);
  if (inject) w.inject = wl.op_weight(p + "block_inject_weight.weight", cfg_.q4.hc_count, HC);
  return w;
}

void Qwen4ExpModel::load_attention(WeightLoader& wl, const std::string& p, Qwen4Layer& layer) const {
  const auto& a = cfg_.attn;
  const int64_t H = cfg_.hidden_size, hd = a.head_dim, qw = int64_t(a.n_heads) * hd, kvw = int64_t(a.n_kv_heads) * hd;
  auto& w = layer.attn;
  // q_proj packs [query (hd), gate (hd)] per head: split into two matrices.
  std::vector<int64_t> q_rows, g_rows;
  for (int64_t h = 0; h < a.n_heads; ++h) {
    for (int64_t i = 0; i < hd; ++i) {
      q_rows.push_back(h * 2 * hd + i);
      g_rows.push_back(h * 2 * hd + hd + i);
    }
  }
  w.q = wl.op_weight_rows(p + "q_proj.weight", 2 * qw, H, q_rows);
  w.gate = wl.op_weight_rows(p + "q_proj.weight", 2 * qw, H, g_rows);
  w.k = wl.op_weight(p + "k_proj.weight", kvw, H);
  w.v = wl.op_weight(p + "v_proj.weight", kvw, H);
  w.o = wl.op_weight(p + "o_proj.weight", H, qw);
  w.q_norm = norm(wl, p + "q_norm.weight", hd);
  w.k_norm = norm(wl, p + "k_norm.weight", hd);
  const auto& q = cfg_.q4;
  const int64_t d = q.index_head_dim, nq = int64_t(q.index_heads) * d;
  // [query heads | one key head], split into row ranges (whole rows of blocks for a block format)
  Tensor qk = wl.op_weight(p + "indexer.index_qk_proj.weight", nq + d, H);
  layer.index_q = qk.rows_slice(0, nq);
  layer.index_k = qk.rows_slice(nq, d);
  layer.index_q_norm = norm(wl, p + "indexer.q_layernorm.weight", d);
  layer.index_k_norm = norm(wl, p + "indexer.k_layernorm.weight", d);
}

void Qwen4ExpModel::load_deltanet(WeightLoader& wl, const std::string& p, Qwen4Layer& layer) const {
  const auto& g = cfg_.gdn;
  const int64_t H = cfg_.hidden_size, nv = g.n_v_heads, dv = g.v_head_dim, C = g.conv_dim();
  auto& w = layer.gdn;
  w.qkv = wl.op_weight(p + "in_proj_qkv.weight", C, H);
  w.z = wl.op_weight(p + "in_proj_z.weight", nv * dv, H);
  w.b = wl.op_weight(p + "in_proj_b.weight", nv, H);
  w.a = wl.op_weight(p + "in_proj_a.weight", nv, H);
  w.conv = wl.f32(p + "conv1d.weight", {C, 1, g.conv_kernel}, {}, true).reshaped(C, g.conv_kernel);
  w.a_neg = wl.f32(p + "A_log", {nv}, [](float x) { return -std::exp(x); });
  w.dt_bias = wl.f32(p + "dt_bias", {nv});
  w.norm = wl.f32(p + "norm.weight", {dv});  // the gated norm's weight is plain
  w.out = wl.op_weight(p + "out_proj.weight", H, nv * dv);
}

void Qwen4ExpModel::load_moe(WeightLoader& wl, const std::string& p, Qwen4Layer& layer) const {
  const auto& m = cfg_.moe;
  const int64_t H = cfg_.hidden_size;
  auto mlp = [&](const std::string& q, int64_t F) {
    return MlpWeights{.gate = wl.op_weight(q + "gate_proj.weight", F, H),
                      .up = wl.op_weight(q + "up_proj.weight", F, H),
                      .down = wl.op_weight(q + "down_proj.weight", H, F)};
  };
  auto& mw = layer.moe;
  mw.router = wl.op_weight(p + "gate.weight", m.n_experts, H);
  for (int e = 0; e < m.n_experts; ++e) {
    MlpWeights ex = mlp(p + "experts." + std::to_string(e) + ".", m.expert_ffn);
    mw.experts.gate.push_back(ex.gate);
    mw.experts.up.push_back(ex.up);
    mw.experts.down.push_back(ex.down);
  }
  mw.shared = mlp(p + "shared_expert.", m.shared_ffn);
  mw.shared_gate = wl.op_weight(p + "shared_expert_gate.weight", 1, H);
}

void Qwen4ExpModel::load_ple(WeightLoader& wl, const std::string& p, Qwen4Layer& layer) const {
  const auto& q = cfg_.q4;
  const int64_t H = cfg_.hidden_size, HC = int64_t(q.hc_count) * H, E = q.ple_embed_dim;
  const int64_t D = E / q.ngram_heads();
  auto& w = layer.ple_w;
  w.hash = ngram_hash(cfg_, layer.ple);
  // The checkpoint's buffers, where present, must agree with what the config derives.
  const std::string e = p + "ple_embedding.";
  auto check = [&](const std::string& name, const std::vector<int64_t>& want) {
    if (!wl.has(e + name)) return;
    if (wl.i64(e + name, int64_t(want.size())) != want)
      bad_input(wl.prefix(), e, name, " disagrees with the n-gram hashing derived from the config (seed, ",
                "ngram_vocab_size_base, ngram_size, heads_per_ngram)");
  };
  check("layer_multipliers", w.hash.multipliers);
  check("ngram_heads_vocab_sizes", w.hash.head_sizes);
  check("ngram_heads_offsets", w.hash.head_offsets);
  // The table is stored in split_ngram_parts row shards (or whole); the rows add up to the padded size.
  int64_t rows = 0;
  if (wl.has(e + "ngram_embedding.weight")) {
    w.table.push_back(wl.op_weight(e + "ngram_embedding.weight", w.hash.padded_rows, D));
    rows = w.hash.padded_rows;
  } else {
    if (w.hash.padded_rows % q.ngram_shards != 0)
      bad_input(e, "ngram_embedding: ", w.hash.padded_rows, " rows do not split into split_ngram_parts = ",
                q.ngram_shards, " shards");
    const int64_t per = w.hash.padded_rows / q.ngram_shards;
    for (int s = 0; s < q.ngram_shards; ++s) {
      const std::string shard = e + "ngram_embedding.shard_" + std::to_string(s) + ".weight";
      w.table.push_back(wl.op_weight(shard, per, D));
      rows += per;
    }
  }
  KCHECK(rows == w.hash.padded_rows && rows < (int64_t(1) << 31));  // ids are I32
  for (size_t h = 0; h < w.hash.head_sizes.size(); ++h) KCHECK(w.hash.head_offsets[h] + w.hash.head_sizes[h] <= rows);
  const std::vector<int64_t> packed = w.hash.packed();
  const Tensor host{.dtype = DType::kI64,
                    .device = Device::kCpu,
                    .data = const_cast<int64_t*>(packed.data()),
                    .rows = 1,
                    .cols = int64_t(packed.size())};
  w.hash_packed = wl.keep(wl.ops().upload(host));
  w.key_proj = wl.op_weight(p + "key_proj.weight", HC, E);
  w.value_proj = wl.op_weight(p + "value_proj.weight", H, E);
  w.norm_key = norm(wl, p + "norm_key.weight", HC);
  w.norm_query = norm(wl, p + "norm_query.weight", HC);
  w.norm_conv = norm(wl, p + "norm_conv.weight", HC);
  w.conv = wl.f32(p + "conv1d.weight", {HC, 1, q.ple_conv_kernel}, {}, true).reshaped(HC, q.ple_conv_kernel);
}

Qwen4ExpModel::Qwen4ExpModel(const ModelConfig& cfg, WeightLoader& wl) : Model(cfg, wl.ops()) {
  const int64_t H = cfg.hidden_size, V = cfg.vocab_size;
  embed_ = wl.op_weight("embed_tokens.weight", V, H);
  lm_head_ = cfg.tie_embeddings ? embed_ : wl.head_weight("lm_head.weight", V, H);
  if (!cfg.tie_embeddings) gathered_table(embed_, 1);
  mixer_ = hyper(wl, "hyper_connection_mixer.", /*inject=*/false);
  layers_.resize(size_t(cfg.n_layers));
  for (int l = 0; l < cfg.n_layers; ++l) {
    Qwen4Layer& layer = layers_[size_t(l)];
    const std::string p = "layers." + std::to_string(l) + ".";
    layer.kind = cfg.layer_kinds[size_t(l)];
    layer.attn_hc = hyper(wl, p + "attn_hyper_connection.", true);
    layer.mlp_hc = hyper(wl, p + "mlp_hyper_connection.", true);
    if (layer.kind == LayerKind::kLinearAttention) {
      load_deltanet(wl, p + "linear_attn.", layer);
    } else {
      load_attention(wl, p + "self_attn.", layer);
    }
    load_moe(wl, p + "mlp.", layer);
    routed_experts(layer.moe.experts);
    layer.ple = cfg.q4.ple_index.empty() ? -1 : cfg.q4.ple_index[size_t(l)];
    if (layer.ple >= 0) {
      load_ple(wl, p + "ple.", layer);
      // A token gathers one row a hash head, spread over the table's shards.
      const auto& w = layer.ple_w;
      for (const Tensor& t : w.table) {
        gathered_table(t, double(w.hash.head_sizes.size()) * double(t.rows) / double(w.hash.padded_rows));
      }
    }
  }
  n_params_ = wl.loaded_params();
  weight_bytes_ = wl.loaded_bytes();
  buffers_ = wl.take_buffers();
}

void Qwen4ExpModel::hyper_connection(const HyperWeights& hw, const Tensor& x, const Tensor& m, const Tensor& w) {
  const int64_t T = x.rows, HC = x.cols, H = cfg_.hidden_size;
  const float inv_hc = 1.0f / float(cfg_.q4.hc_count);
  Tensor n = ws_.take(T, HC);
  ops_.group_rms_norm(n, x, hw.norm, int(H), cfg_.norm_eps);
  Tensor d = ws_.take(T, hw.down.rows);
  ops_.matmul(d, n, hw.down);
  ops_.scale(d, inv_hc);
  ops_.activation(d, Activation::kSilu);
  Tensor u = ws_.take(T, HC);
  ops_.matmul(u, d, hw.up);
  ops_.activation(u, Activation::kSigmoid);
  ops_.streams_mix(m, u, n);
  if (w.empty()) return;
  ops_.matmul(w, n, hw.inject);
  ops_.scale(w, inv_hc);
  ops_.activation(w, Activation::kSigmoid);
  ops_.scale(w, 2.0f);
}

void Qwen4ExpModel::ple_block(const Qwen4Layer& layer, const StepPlan& plan, ModelCache& cache, int l,
                              const Tensor& windows, const Tensor& x) {
  const auto& q = cfg_.q4;
  const auto& w = layer.ple_w;
  const int64_t T = x.rows, HC = x.cols, H = cfg_.hidden_size, heads = q.ngram_heads();
  const float eps = cfg_.norm_eps;
  // the hashed n-gram rows of every new token's window
  Tensor emb = ws_.take(T * heads, q.ple_embed_dim / heads);
  ops_.ngram_embed(emb, w.table, windows, w.hash_packed);
  emb = emb.reshaped(T, q.ple_embed_dim);
  Tensor key = ws_.take(T, HC);
  ops_.matmul(key, emb, w.key_proj);
  ops_.group_rms_norm(key, key, w.norm_key, int(H), eps);
  Tensor value = ws_.take(T, H);
  ops_.matmul(value, emb, w.value_proj);
  Tensor query = ws_.take(T, HC);
  ops_.group_rms_norm(query, x, w.norm_query, int(H), eps);
  Tensor gate = ws_.take(T, q.hc_count);
  ops_.stream_gate(gate, key, query);
  Tensor gated = ws_.take(T, HC);  // sigmoid(gate_s) * value, per stream
  ops_.streams_inject(gated, value, gate, /*accumulate=*/false);
  Tensor normed = ws_.take(T, HC);
  ops_.group_rms_norm(normed, gated, w.norm_conv, int(H), eps);
  Tensor conv = ws_.take(T, HC);
  ops_.dilated_conv1d_silu(conv, normed, w.conv, cache.state(l).aux, q.ple_conv_kernel, q.ngram_size, plan);
  ops_.add(gated, gated, conv);
  ops_.add(x, x, gated);
}

void Qwen4ExpModel::qsa_block(const Qwen4Layer& layer, const StepPlan& plan, const KvLayerView& kv, const Tensor& h,
                              const Tensor& y) {
  const auto& q = cfg_.q4;
  const int64_t T = h.rows, d = q.index_head_dim;
  Tensor iq = ws_.take(T, int64_t(q.index_heads) * d);
  Tensor ik = ws_.take(T, d);
  ops_.matmul(iq, h, layer.index_q);
  ops_.matmul(ik, h, layer.index_k);
  ops_.head_rms_norm(iq, layer.index_q_norm, int(d), cfg_.norm_eps);
  ops_.rope(iq, int(d), cfg_.attn.rope, plan);
  Tensor select = ws_.take(DType::kI32, T, q.index_budget + q.index_ratio - 1);
  ops_.qsa_select(select, iq, ik, layer.index_k_norm, kv,
                  {.n_heads = q.index_heads, .head_dim = int(d), .budget = q.index_budget, .ratio = q.index_ratio,
                   .eps = cfg_.norm_eps, .rope = cfg_.attn.rope},
                  plan);
  attention_block(ops_, ws_, layer.attn, cfg_.attn, cfg_.norm_eps, kv, 0, plan, h, y, select);
}

void Qwen4ExpModel::forward(const StepPlan& plan, ModelCache& cache, const Tensor& logits, HiddenCapture* capture) {
  const int64_t T = plan.n_rows(), H = cfg_.hidden_size, HC = int64_t(cfg_.q4.hc_count) * H;
  ws_.reset();
  ops_.begin_step(plan);
  Tensor x = ws_.take(T, HC);              // the residual streams
  Tensor m = ws_.take(T, H);               // a hyper-connection's mixed input
  Tensor w = ws_.take(T, cfg_.q4.hc_count);  // its injection weights
  Tensor y = ws_.take(T, H);               // sub-layer output
  ops_.embed(y, embed_, plan, 1.0f);
  ops_.streams_expand(x, y);
  capture_hidden(capture, x);
  // Every row's n-gram window, for the PLE layers; the sequences' token contexts move on by this
  // step's tokens (on the backend, so a recorded decode step replays it).
  Tensor windows;
  if (cfg_.token_context > 0) {
    windows = ws_.take(DType::kI32, T, cfg_.q4.ngram_size);
    ops_.token_windows(windows, cache.token_context(), cfg_.q4.eos, plan);
  }
  for (int l = 0; l < cfg_.n_layers; ++l) {
    const Qwen4Layer& layer = layers_[size_t(l)];
    if (layer.ple >= 0) ple_block(layer, plan, cache, l, windows, x);
    hyper_connection(layer.attn_hc, x, m, w);
    if (layer.kind == LayerKind::kLinearAttention) {
      deltanet_block(ops_, ws_, layer.gdn, cfg_.gdn, cfg_.norm_eps, cache.state(l), plan, m, y);
    } else {
      qsa_block(layer, plan, cache.kv(l), m, y);
    }
    ops_.streams_inject(x, y, w, /*accumulate=*/true);
    hyper_connection(layer.mlp_hc, x, m, w);
    moe_block(ops_, ws_, layer.moe, cfg_.moe, m, y);
    ops_.streams_inject(x, y, w, /*accumulate=*/true);
    if (capture && l + 1 < cfg_.n_layers) capture_hidden(capture, x);
  }
  hyper_connection(mixer_, x, m, Tensor{});
  capture_hidden(capture, m);  // the last hidden state is the final mixer's output, as transformers reports it
  const int64_t R = int64_t(plan.logit_rows.size());
  if (R == 0) return;
  KCHECK(logits.rows == R && logits.cols == cfg_.vocab_size);
  if (plan.logits_for_every_row()) {  // a decode step: the head reads the mixer's rows, no gather launch
    ops_.matmul(logits, m, lm_head_);
    return;
  }
  Tensor rows = ws_.take(R, H);
  ops_.gather_rows(rows, m, plan.logit_rows);
  ops_.matmul(logits, rows, lm_head_);
}

const ArchRegistrar kQwen4Exp{{
    .name = "qwen4_exp",
    .model_types = {"qwen4_exp", "qwen4_exp_text"},
    .parse_config = parse_qwen4_exp_config,
    .build = [](const ModelConfig& cfg, WeightLoader& wl) -> std::unique_ptr<Model> {
      return std::make_unique<Qwen4ExpModel>(cfg, wl);
    },
}};

}  // namespace
}  // namespace kestrel
