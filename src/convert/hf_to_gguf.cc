#include "convert/hf_to_gguf.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <vector>

#include "convert/gguf_names.h"
#include "convert/tokenizer_meta.h"
#include "core/error.h"
#include "core/files.h"
#include "core/progress.h"
#include "core/thread_pool.h"
#include "io/gguf.h"
#include "io/safetensors.h"
#include "model/loader.h"
#include "quant/quant.h"

namespace kestrel {
namespace {

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

GgmlType ggml_of(DType d) {
  auto t = dtype_to_ggml(d);
  KCHECK(t.has_value());
  return *t;
}

void set_i32_array(GgufWriter& w, const std::string& key, const std::vector<int64_t>& v) {
  std::vector<int32_t> a(v.begin(), v.end());
  w.set(key, GgufValue::i32s(a));
}

// A per-layer value: one scalar when every layer agrees, else an array (llama.cpp's
// get_key_or_arr reads either).
void set_per_layer(GgufWriter& w, const std::string& key, const std::vector<int64_t>& v) {
  bool same = true;
  for (int64_t x : v) same = same && x == v[0];
  if (same) w.set(key, GgufValue::u32(uint32_t(v[0])));
  else set_i32_array(w, key, v);
}

// rope_parameters.mrope_section (or rope_scaling's) from the text part of config.json, padded to
// 4 as llama.cpp writes it; llama.cpp's default for Qwen3.5 when the checkpoint omits it.
std::vector<int64_t> qwen35_rope_sections(const std::string& dir) {
  const std::string path = path_join(dir, "config.json");
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    bad_input(path, ": not valid JSON: ", e.what());
  }
  const nlohmann::json& t = root.contains("text_config") && root["text_config"].is_object() ? root["text_config"] : root;
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    if (!t.contains(key) || !t[key].is_object() || !t[key].contains("mrope_section")) continue;
    const nlohmann::json& sec = t[key]["mrope_section"];
    if (!sec.is_array() || sec.size() > 4)
      bad_input(path, ": ", key, ".mrope_section must be a list of at most 4 integers, got ", sec.dump());
    std::vector<int64_t> out;
    for (const auto& s : sec) {
      if (!s.is_number_integer() || s.get<int64_t>() < 0 || s.get<int64_t>() > 1024)
        bad_input(path, ": ", key, ".mrope_section must hold integers in [0, 1024], got ", sec.dump());
      out.push_back(s.get<int64_t>());
    }
    while (out.size() < 4) out.push_back(0);
    return out;
  }
  return {11, 11, 10, 0};
}

void set_qwen_metadata(GgufWriter& w, const ModelConfig& cfg, const std::string& arch, const std::string& dir) {
  const std::string a = arch + ".";
  if (cfg.ffn_size > 0) w.set(a + "feed_forward_length", GgufValue::u32(uint32_t(cfg.ffn_size)));
  w.set(a + "attention.head_count", GgufValue::u32(uint32_t(cfg.attn.n_heads)));
  w.set(a + "attention.head_count_kv", GgufValue::u32(uint32_t(cfg.attn.n_kv_heads)));
  w.set(a + "attention.key_length", GgufValue::u32(uint32_t(cfg.attn.head_dim)));
  w.set(a + "attention.value_length", GgufValue::u32(uint32_t(cfg.attn.head_dim)));
  w.set(a + "rope.freq_base", GgufValue::f32(float(cfg.attn.rope.theta)));
  if (cfg.has_moe()) {
    w.set(a + "expert_count", GgufValue::u32(uint32_t(cfg.moe.n_experts)));
    w.set(a + "expert_used_count", GgufValue::u32(uint32_t(cfg.moe.top_k)));
    w.set(a + "expert_feed_forward_length", GgufValue::u32(uint32_t(cfg.moe.expert_ffn)));
    w.set(a + "expert_weights_norm", GgufValue::boolean(cfg.moe.norm_topk_prob));
    if (cfg.moe.shared_ffn > 0)
      w.set(a + "expert_shared_feed_forward_length", GgufValue::u32(uint32_t(cfg.moe.shared_ffn)));
  }
  if (arch == "qwen3next" || arch == "qwen35" || arch == "qwen35moe") {
    const DeltaNetConfig& g = cfg.gdn;
    if (cfg.count_layers(LayerKind::kLinearAttention) > 0) {
      w.set(a + "ssm.conv_kernel", GgufValue::u32(uint32_t(g.conv_kernel)));
      w.set(a + "ssm.state_size", GgufValue::u32(uint32_t(g.k_head_dim)));
      w.set(a + "ssm.group_count", GgufValue::u32(uint32_t(g.n_k_heads)));
      w.set(a + "ssm.time_step_rank", GgufValue::u32(uint32_t(g.n_v_heads)));
      w.set(a + "ssm.inner_size", GgufValue::u32(uint32_t(g.v_head_dim * g.n_v_heads)));
    }
    int first_full = cfg.n_layers;
    for (int l = cfg.n_layers - 1; l >= 0; --l)
      if (cfg.layer_kinds[size_t(l)] == LayerKind::kFullAttention) first_full = l;
    w.set(a + "full_attention_interval", GgufValue::u32(uint32_t(first_full + 1)));
    w.set(a + "rope.dimension_count", GgufValue::u32(uint32_t(cfg.attn.rope.rotary_dim)));
    if (arch != "qwen3next") set_i32_array(w, a + "rope.dimension_sections", qwen35_rope_sections(dir));
  }
}

void set_gemma4_metadata(GgufWriter& w, const ModelConfig& cfg) {
  const std::string a = "gemma4.";
  const int L = cfg.n_layers;
  const AttentionConfig *full = nullptr, *swa = nullptr;
  std::vector<int64_t> ffn, kv;
  std::vector<uint8_t> pattern;
  int shared = 0;
  for (int l = 0; l < L; ++l) {
    const bool is_full = cfg.layer_kinds[size_t(l)] == LayerKind::kFullAttention;
    (is_full ? full : swa) = &cfg.attn_for(l);
    ffn.push_back(cfg.ffn_for(l));
    kv.push_back(cfg.attn_for(l).n_kv_heads);
    pattern.push_back(is_full ? 0 : 1);
    if (cfg.kv_source(l) != l) ++shared;
  }
  if (!full) full = swa;
  if (!swa) swa = full;
  set_per_layer(w, a + "feed_forward_length", ffn);
  w.set(a + "attention.head_count", GgufValue::u32(uint32_t(cfg.attn_for(0).n_heads)));
  set_per_layer(w, a + "attention.head_count_kv", kv);
  w.set(a + "attention.key_length", GgufValue::u32(uint32_t(full->head_dim)));
  w.set(a + "attention.value_length", GgufValue::u32(uint32_t(full->head_dim)));
  w.set(a + "attention.key_length_swa", GgufValue::u32(uint32_t(swa->head_dim)));
  w.set(a + "attention.value_length_swa", GgufValue::u32(uint32_t(swa->head_dim)));
  w.set(a + "rope.freq_base", GgufValue::f32(float(full->rope.theta)));
  w.set(a + "rope.freq_base_swa", GgufValue::f32(float(swa->rope.theta)));
  // Full layers rotate the whole head (the unrotated pairs get frequency factor 1e30 in
  // rope_freqs); sliding layers rotate their rotary dimension.
  w.set(a + "rope.dimension_count", GgufValue::u32(uint32_t(full->head_dim)));
  w.set(a + "rope.dimension_count_swa", GgufValue::u32(uint32_t(swa->rope.rotary_dim)));
  int window = 0;
  for (int l = 0; l < L; ++l) window = std::max(window, cfg.window_for(l));
  w.set(a + "attention.sliding_window", GgufValue::u32(uint32_t(window)));
  w.set(a + "attention.sliding_window_pattern", GgufValue::array_raw(GgufValueType::kBool, pattern.size(), pattern));
  w.set(a + "attention.shared_kv_layers", GgufValue::u32(uint32_t(shared)));
  w.set(a + "embedding_length_per_layer_input", GgufValue::u32(uint32_t(cfg.per_layer_input_dim)));
  if (cfg.final_logit_softcap > 0.0f) w.set(a + "final_logit_softcapping", GgufValue::f32(cfg.final_logit_softcap));
  if (cfg.has_moe()) {
    w.set(a + "expert_count", GgufValue::u32(uint32_t(cfg.moe.n_experts)));
    w.set(a + "expert_used_count", GgufValue::u32(uint32_t(cfg.moe.top_k)));
    w.set(a + "expert_feed_forward_length", GgufValue::u32(uint32_t(cfg.moe.expert_ffn)));
  }
}

void set_metadata(GgufWriter& w, const ModelConfig& cfg, const std::string& arch, const std::string& dir,
                  uint32_t file_type) {
  const std::string a = arch + ".";
  std::string name = dir;
  while (!name.empty() && name.back() == '/') name.pop_back();
  if (auto slash = name.find_last_of('/'); slash != std::string::npos) name = name.substr(slash + 1);
  w.set("general.architecture", GgufValue::string(arch));
  w.set("general.name", GgufValue::string(name));
  w.set("general.file_type", GgufValue::u32(file_type));
  w.set("general.quantization_version", GgufValue::u32(2));
  w.set(a + "context_length", GgufValue::u32(uint32_t(cfg.max_positions)));
  w.set(a + "embedding_length", GgufValue::u32(uint32_t(cfg.hidden_size)));
  w.set(a + "block_count", GgufValue::u32(uint32_t(cfg.n_layers)));
  w.set(a + "attention.layer_norm_rms_epsilon", GgufValue::f32(cfg.norm_eps));
  if (arch == "gemma4") set_gemma4_metadata(w, cfg);
  else set_qwen_metadata(w, cfg, arch, dir);
  if (cfg.bos_token_id >= 0) w.set("tokenizer.ggml.bos_token_id", GgufValue::u32(uint32_t(cfg.bos_token_id)));
  if (!cfg.eos_token_ids.empty())
    w.set("tokenizer.ggml.eos_token_id", GgufValue::u32(uint32_t(cfg.eos_token_ids[0])));
}

// Encodes rows [0, count) of one tensor, each row_bytes long, and appends them in row order:
// encode(r, out) writes row r. Rows run in parallel on the global pool, a chunk of at most
// kEncodeChunkBytes of output at a time, so the output bytes are the serial loop's and memory
// stays bounded whatever the tensor's size.
constexpr uint64_t kEncodeChunkBytes = uint64_t(64) << 20;
void encode_rows(GgufWriter& w, int64_t count, size_t row_bytes, std::vector<uint8_t>& chunk,
                 const std::function<void(int64_t, uint8_t*)>& encode) {
  const int64_t chunk_rows = std::max<int64_t>(1, int64_t(kEncodeChunkBytes / std::max<size_t>(row_bytes, 1)));
  chunk.resize(size_t(std::min(chunk_rows, count)) * row_bytes);
  for (int64_t r0 = 0; r0 < count; r0 += chunk_rows) {
    const int64_t rows = std::min(chunk_rows, count - r0);
    ThreadPool::global().parallel_for(rows, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) encode(r0 + r, chunk.data() + size_t(r) * row_bytes);
    });
    w.append(chunk.data(), size_t(rows) * row_bytes);
  }
}

void apply(GgufTransform fn, float* x, int64_t n) {
  switch (fn) {
    case GgufTransform::kNone: return;
    case GgufTransform::kAddOne:
      for (int64_t i = 0; i < n; ++i) x[i] = 1.0f + x[i];  // as the architectures compute (1 + w) in F32
      return;
    case GgufTransform::kNegExp:
      for (int64_t i = 0; i < n; ++i) x[i] = -std::exp(x[i]);  // as the architectures compute -exp(A_log)
      return;
  }
}

}  // namespace

uint32_t llama_file_type(GgmlType type) {
  switch (type) {
    case GgmlType::kF32: return 0;
    case GgmlType::kF16: return 1;
    case GgmlType::kQ8_0: return 7;
    case GgmlType::kBF16: return 32;
    default:
      unsupported("convert: --quant ", ggml_type_name(type),
                  " is not supported (bf16, f16, f32, q8_0, or the recipes q4_k_m, q4_k_s, q5_k_m, q6_k)");
  }
}

ConvertReport convert_hf_to_gguf(const ConvertOptions& opts) {
  if (!opts.recipe) llama_file_type(opts.type);  // refuses unsupported types before any work
  ModelConfig cfg = load_config(opts.model_dir);
  ConvertReport report;
  report.arch = gguf_arch_name(cfg);  // refuses families llama.cpp has no architecture for
  const Checkpoint ck = Checkpoint::open_dir(opts.model_dir);
  // Some checkpoints keep text weights at the top level even under a multimodal config.
  if (!ck.find(cfg.weight_prefix + "embed_tokens.weight") && ck.find("model.embed_tokens.weight"))
    cfg.weight_prefix = "model.";
  check_gguf_convertible(cfg);
  const GgufLayout layout =
      gguf_layout(cfg, [&](const std::string&, const std::string& hf) { return !hf.empty() && ck.find(hf) != nullptr; });

  std::vector<const TensorInfo*> src;
  for (const GgufSource& s : layout.sources) src.push_back(source(ck, s.name, s.shape));
  std::vector<GgmlType> types;
  const GgmlType plain = opts.recipe ? GgmlType::kBF16 : opts.type;
  for (const GgufTensorPlan& p : layout.tensors) {
    GgmlType t = plain;
    if (p.keep_f32) {
      t = GgmlType::kF32;
    } else if (p.shape.back() % ggml_block_size(t) != 0) {
      t = GgmlType::kBF16;
      ++report.n_fallback;
    }
    types.push_back(t);
  }
  if (opts.recipe) {
    std::vector<RecipeTensor> rt;
    for (size_t i = 0; i < layout.tensors.size(); ++i) rt.push_back({layout.tensors[i].name, layout.tensors[i].shape, types[i]});
    types = quant_recipe_types(*opts.recipe, rt, cfg.has_moe() ? cfg.moe.n_experts : 0, cfg.n_layers);
    for (size_t i = 0; i < types.size(); ++i)  // every type a recipe chooses (fallbacks included) has kernels
      KCHECK_MSG(quant::has_kernels(types[i]), layout.tensors[i].name, ": ", ggml_type_name(types[i]));
  }

  const bool gemma = layout.arch == "gemma4";
  GgufWriter w(opts.output);
  set_metadata(w, cfg, layout.arch, opts.model_dir,
               opts.recipe ? quant_recipe_file_type(*opts.recipe) : llama_file_type(opts.type));
  if (opts.tokenizer && gemma) {
    report.has_tokenizer = add_gemma4_tokenizer_metadata(w, opts.model_dir, cfg.vocab_size);
  } else if (opts.tokenizer) {
    const std::string pre = layout.arch == "qwen35" || layout.arch == "qwen35moe" ? "qwen35" : "qwen2";
    report.has_tokenizer = add_tokenizer_metadata(w, opts.model_dir, cfg.vocab_size, pre);
  }
  for (size_t i = 0; i < layout.tensors.size(); ++i) {
    w.declare(layout.tensors[i].name, types[i], layout.tensors[i].shape);
    ++report.tensors_by_type[types[i]];
  }
  w.begin();
  uint64_t total = 0;
  for (const GgufTensorPlan& p : layout.tensors)
    for (const GgufRowRun& r : p.rows) total += uint64_t(r.count) * (src[size_t(r.src)]->nbytes / uint64_t(layout.sources[size_t(r.src)].rows()));
  Progress progress("convert", opts.progress ? total : 0, true);
  std::vector<uint8_t> chunk;
  for (size_t i = 0; i < layout.tensors.size(); ++i) {
    const GgufTensorPlan& p = layout.tensors[i];
    const GgmlType type = types[i];
    const int64_t n = p.shape.back();
    const size_t out_row = ggml_row_bytes(type, n);
    w.start_tensor(p.name);
    if (!p.generated.empty()) {
      encode_rows(w, p.n_rows(), out_row, chunk, [&](int64_t r, uint8_t* out) {
        quant::quantize_row(type, p.generated.data() + r * n, n, out);
      });
    }
    for (const GgufRowRun& run : p.rows) {
      const TensorInfo* s = src[size_t(run.src)];
      const GgmlType st = ggml_of(s->dtype);
      const uint64_t in_row = uint64_t(n) * dtype_size(s->dtype);
      const uint8_t* first = s->data + uint64_t(run.first) * in_row;
      if (st == type && p.col_perm.empty() && p.fn == GgufTransform::kNone) {
        w.append(first, uint64_t(run.count) * in_row);  // same encoding: the bytes as they are
      } else {
        encode_rows(w, run.count, out_row, chunk, [&](int64_t r, uint8_t* out) {
          thread_local std::vector<float> row, permuted;
          row.resize(size_t(n));
          quant::dequantize_row(st, first + uint64_t(r) * in_row, n, row.data());
          float* x = row.data();
          if (!p.col_perm.empty()) {
            permuted.resize(size_t(n));
            for (int64_t j = 0; j < n; ++j) permuted[size_t(j)] = row[size_t(p.col_perm[size_t(j)])];
            x = permuted.data();
          }
          apply(p.fn, x, n);
          quant::quantize_row(type, x, n, out);
        });
      }
      report.bytes_in += uint64_t(run.count) * in_row;
      if (opts.progress) progress.advance(uint64_t(run.count) * in_row);
    }
    w.end_tensor();
    report.bytes_out += w.tensor_bytes(p.name);
    ++report.n_tensors;
  }
  w.finish();
  if (opts.progress) progress.finish();
  return report;
}

}  // namespace kestrel
