#include "convert/hf_to_gguf.h"

#include <functional>
#include <vector>

#include "core/error.h"
#include "convert/tokenizer_meta.h"
#include "core/progress.h"
#include "io/gguf.h"
#include "io/safetensors.h"
#include "model/loader.h"
#include "quant/quant.h"

namespace kestrel {
namespace {

// One output tensor: its GGUF name, row-major shape, stored type, and the checkpoint tensors
// whose rows it concatenates (one for plain weights, one per expert for stacked experts).
struct Planned {
  std::string name;
  std::vector<int64_t> shape;
  GgmlType type;
  std::vector<const TensorInfo*> sources;
};

class Planner {
 public:
  Planner(const Checkpoint& ck, const ModelConfig& cfg, GgmlType type) : ck_(ck), cfg_(cfg), type_(type) {}

  // A weight stored under `hf` (with the model prefix unless raw) with exactly `shape`.
  const TensorInfo* source(const std::string& hf, const std::vector<int64_t>& shape, bool raw = false) {
    const std::string full = raw ? hf : cfg_.weight_prefix + hf;
    const TensorInfo* t = ck_.find(full);
    if (!t) bad_input(ck_.dir(), ": tensor '", full, "' is missing from the checkpoint");
    if (t->dtype != DType::kBF16 && t->dtype != DType::kF16 && t->dtype != DType::kF32)
      bad_input(*t->file, ": tensor '", full, "' has dtype ", dtype_name(t->dtype), ", expected BF16, F16 or F32");
    if (t->shape != shape) {
      std::string got, want;
      for (int64_t d : t->shape) got += std::to_string(d) + " ";
      for (int64_t d : shape) want += std::to_string(d) + " ";
      bad_input(*t->file, ": tensor '", full, "' has shape [ ", got, "], expected [ ", want, "]");
    }
    return t;
  }

  // F32 for 1-D tensors and the router, as llama.cpp's converter does.
  void keep_f32(const std::string& name, const TensorInfo* src) {
    out.push_back({name, src->shape, GgmlType::kF32, {src}});
  }
  void matrix(const std::string& name, const TensorInfo* src) { stacked(name, {src}); }
  void stacked(const std::string& name, std::vector<const TensorInfo*> srcs) {
    std::vector<int64_t> shape = srcs[0]->shape;
    if (srcs.size() > 1) shape.insert(shape.begin(), int64_t(srcs.size()));
    GgmlType t = type_;
    if (shape.back() % ggml_block_size(t) != 0) {
      t = GgmlType::kBF16;
      ++fallback;
    }
    out.push_back({name, std::move(shape), t, std::move(srcs)});
  }

  std::vector<Planned> out;
  uint64_t fallback = 0;

 private:
  const Checkpoint& ck_;
  const ModelConfig& cfg_;
  GgmlType type_;
};

std::string arch_name(const ModelConfig& cfg) {
  if (cfg.model_type == "qwen3") return "qwen3";
  if (cfg.model_type == "qwen3_moe") return "qwen3moe";
  unsupported("convert: model_type '", cfg.model_type,
              "' cannot be converted to GGUF yet (supported: qwen3, qwen3_moe; see docs/gguf.md)");
}

std::vector<Planned> plan(const Checkpoint& ck, const ModelConfig& cfg, GgmlType type, uint64_t* fallback) {
  Planner p(ck, cfg, type);
  const int64_t H = cfg.hidden_size, V = cfg.vocab_size;
  const int64_t hd = cfg.attn.head_dim, nq = cfg.attn.n_heads, nkv = cfg.attn.n_kv_heads;
  p.matrix("token_embd.weight", p.source("embed_tokens.weight", {V, H}));
  for (int l = 0; l < cfg.n_layers; ++l) {
    const std::string hf = "layers." + std::to_string(l) + ".", blk = "blk." + std::to_string(l) + ".";
    if (cfg.layer_kinds[size_t(l)] != LayerKind::kFullAttention)
      unsupported("convert: layer ", l, " is ", layer_kind_name(cfg.layer_kinds[size_t(l)]), ", not supported yet");
    p.keep_f32(blk + "attn_norm.weight", p.source(hf + "input_layernorm.weight", {H}));
    p.matrix(blk + "attn_q.weight", p.source(hf + "self_attn.q_proj.weight", {nq * hd, H}));
    p.matrix(blk + "attn_k.weight", p.source(hf + "self_attn.k_proj.weight", {nkv * hd, H}));
    p.matrix(blk + "attn_v.weight", p.source(hf + "self_attn.v_proj.weight", {nkv * hd, H}));
    p.matrix(blk + "attn_output.weight", p.source(hf + "self_attn.o_proj.weight", {H, nq * hd}));
    p.keep_f32(blk + "attn_q_norm.weight", p.source(hf + "self_attn.q_norm.weight", {hd}));
    p.keep_f32(blk + "attn_k_norm.weight", p.source(hf + "self_attn.k_norm.weight", {hd}));
    p.keep_f32(blk + "ffn_norm.weight", p.source(hf + "post_attention_layernorm.weight", {H}));
    if (cfg.layer_moe[size_t(l)]) {
      const MoeConfig& m = cfg.moe;
      if (m.shared_ffn > 0) unsupported("convert: shared experts are not supported yet");
      p.keep_f32(blk + "ffn_gate_inp.weight", p.source(hf + "mlp.gate.weight", {m.n_experts, H}));
      const char* projs[3][2] = {{"gate_proj", "ffn_gate_exps"}, {"up_proj", "ffn_up_exps"}, {"down_proj", "ffn_down_exps"}};
      for (auto& [proj, name] : projs) {
        std::vector<const TensorInfo*> experts;
        const bool down = std::string(proj) == "down_proj";
        for (int e = 0; e < m.n_experts; ++e) {
          const std::string t = hf + "mlp.experts." + std::to_string(e) + "." + proj + ".weight";
          experts.push_back(p.source(t, down ? std::vector<int64_t>{H, m.expert_ffn} : std::vector<int64_t>{m.expert_ffn, H}));
        }
        p.stacked(blk + name + ".weight", std::move(experts));
      }
    } else {
      p.matrix(blk + "ffn_gate.weight", p.source(hf + "mlp.gate_proj.weight", {cfg.ffn_size, H}));
      p.matrix(blk + "ffn_up.weight", p.source(hf + "mlp.up_proj.weight", {cfg.ffn_size, H}));
      p.matrix(blk + "ffn_down.weight", p.source(hf + "mlp.down_proj.weight", {H, cfg.ffn_size}));
    }
  }
  p.keep_f32("output_norm.weight", p.source("norm.weight", {H}));
  if (!cfg.tie_embeddings) p.matrix("output.weight", p.source("lm_head.weight", {V, H}, true));
  *fallback = p.fallback;
  return std::move(p.out);
}

void set_metadata(GgufWriter& w, const ModelConfig& cfg, const std::string& arch, const std::string& dir,
                  GgmlType type) {
  const std::string a = arch + ".";
  std::string name = dir;
  while (!name.empty() && name.back() == '/') name.pop_back();
  if (auto slash = name.find_last_of('/'); slash != std::string::npos) name = name.substr(slash + 1);
  w.set("general.architecture", GgufValue::string(arch));
  w.set("general.name", GgufValue::string(name));
  w.set("general.file_type", GgufValue::u32(llama_file_type(type)));
  w.set("general.quantization_version", GgufValue::u32(2));
  w.set(a + "context_length", GgufValue::u32(uint32_t(cfg.max_positions)));
  w.set(a + "embedding_length", GgufValue::u32(uint32_t(cfg.hidden_size)));
  w.set(a + "block_count", GgufValue::u32(uint32_t(cfg.n_layers)));
  if (cfg.ffn_size > 0) w.set(a + "feed_forward_length", GgufValue::u32(uint32_t(cfg.ffn_size)));
  w.set(a + "attention.head_count", GgufValue::u32(uint32_t(cfg.attn.n_heads)));
  w.set(a + "attention.head_count_kv", GgufValue::u32(uint32_t(cfg.attn.n_kv_heads)));
  w.set(a + "attention.key_length", GgufValue::u32(uint32_t(cfg.attn.head_dim)));
  w.set(a + "attention.value_length", GgufValue::u32(uint32_t(cfg.attn.head_dim)));
  w.set(a + "attention.layer_norm_rms_epsilon", GgufValue::f32(cfg.norm_eps));
  w.set(a + "rope.freq_base", GgufValue::f32(float(cfg.attn.rope.theta)));
  if (cfg.has_moe()) {
    w.set(a + "expert_count", GgufValue::u32(uint32_t(cfg.moe.n_experts)));
    w.set(a + "expert_used_count", GgufValue::u32(uint32_t(cfg.moe.top_k)));
    w.set(a + "expert_feed_forward_length", GgufValue::u32(uint32_t(cfg.moe.expert_ffn)));
  }
  if (cfg.bos_token_id >= 0) w.set("tokenizer.ggml.bos_token_id", GgufValue::u32(uint32_t(cfg.bos_token_id)));
  if (!cfg.eos_token_ids.empty())
    w.set("tokenizer.ggml.eos_token_id", GgufValue::u32(uint32_t(cfg.eos_token_ids[0])));
}

GgmlType ggml_of(DType d) {
  auto t = dtype_to_ggml(d);
  KCHECK(t.has_value());
  return *t;
}

}  // namespace

uint32_t llama_file_type(GgmlType type) {
  switch (type) {
    case GgmlType::kF32: return 0;
    case GgmlType::kF16: return 1;
    case GgmlType::kQ8_0: return 7;
    case GgmlType::kBF16: return 32;
    default: unsupported("convert: --quant ", ggml_type_name(type), " is not supported yet (bf16, f16, f32, q8_0)");
  }
}

ConvertReport convert_hf_to_gguf(const ConvertOptions& opts) {
  llama_file_type(opts.type);  // refuses unsupported types before any work
  const ModelConfig cfg = load_config(opts.model_dir);
  ConvertReport report;
  report.arch = arch_name(cfg);
  const Checkpoint ck = Checkpoint::open_dir(opts.model_dir);
  const std::vector<Planned> tensors = plan(ck, cfg, opts.type, &report.n_fallback);

  GgufWriter w(opts.output);
  set_metadata(w, cfg, report.arch, opts.model_dir, opts.type);
  report.has_tokenizer = add_tokenizer_metadata(w, opts.model_dir, cfg.vocab_size, "qwen2");
  for (const Planned& t : tensors) w.declare(t.name, t.type, t.shape);
  w.begin();
  uint64_t total = 0;
  for (const Planned& t : tensors)
    for (const TensorInfo* s : t.sources) total += s->nbytes;
  Progress progress("convert", opts.progress ? total : 0, true);
  std::vector<float> row;
  std::vector<uint8_t> packed;
  for (const Planned& t : tensors) {
    w.start_tensor(t.name);
    for (const TensorInfo* s : t.sources) {
      const GgmlType src = ggml_of(s->dtype);
      if (src == t.type) {  // same encoding: copy the bytes as they are
        w.append(s->data, s->nbytes);
      } else {
        const int64_t n = s->shape.back(), rows = s->numel() / n;
        const uint64_t in_row = uint64_t(n) * dtype_size(s->dtype);
        row.resize(size_t(n));
        packed.resize(ggml_row_bytes(t.type, n));
        for (int64_t r = 0; r < rows; ++r) {
          quant::dequantize_row(src, s->data + uint64_t(r) * in_row, n, row.data());
          quant::quantize_row(t.type, row.data(), n, packed.data());
          w.append(packed.data(), packed.size());
        }
      }
      report.bytes_in += s->nbytes;
      if (opts.progress) progress.advance(s->nbytes);
    }
    w.end_tensor();
    report.bytes_out += w.tensor_bytes(t.name);
    ++report.n_tensors;
  }
  w.finish();
  if (opts.progress) progress.finish();
  return report;
}

}  // namespace kestrel
