#include "convert/hf_to_gguf.h"

#include <functional>
#include <vector>

#include "core/error.h"
#include "convert/qwen_gguf_names.h"
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

// The checkpoint tensor `full` with exactly `shape`, in a float dtype.
const TensorInfo* source(const Checkpoint& ck, const std::string& full, const std::vector<int64_t>& shape) {
  const TensorInfo* t = ck.find(full);
  if (!t) bad_input(ck.dir(), ": tensor '", full, "' is missing from the checkpoint");
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

std::vector<Planned> plan(const Checkpoint& ck, const ModelConfig& cfg, GgmlType type, uint64_t* fallback) {
  std::vector<Planned> out;
  for (const GgufNameMap& m : qwen_gguf_names(cfg)) {
    Planned p{m.gguf, m.hf_shape, type, {}};
    for (const std::string& hf : m.hf) p.sources.push_back(source(ck, hf, m.hf_shape));
    if (m.hf.size() > 1) p.shape.insert(p.shape.begin(), int64_t(m.hf.size()));
    if (m.keep_f32) {
      p.type = GgmlType::kF32;
    } else if (p.shape.back() % ggml_block_size(type) != 0) {
      p.type = GgmlType::kBF16;
      ++*fallback;
    }
    out.push_back(std::move(p));
  }
  return out;
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
    w.set(a + "expert_weights_norm", GgufValue::boolean(cfg.moe.norm_topk_prob));
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
  report.arch = gguf_arch_name(cfg);
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
