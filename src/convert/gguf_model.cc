#include "convert/gguf_model.h"

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "convert/qwen_gguf_names.h"
#include "core/error.h"
#include "core/files.h"
#include "model/registry.h"
#include "quant/quant.h"

namespace kestrel {

bool is_gguf_file(const std::string& path) {
  if (!file_exists(path)) return false;
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  return in.gcount() == 4 && std::memcmp(magic, "GGUF", 4) == 0;
}

ModelConfig gguf_model_config(const GgufFile& f) {
  const std::string arch = f.get_string("general.architecture");
  const std::string model_type = model_type_for_gguf_arch(arch);
  if (model_type.empty())
    unsupported(f.path(), ": GGUF architecture '", arch, "' is not supported (supported: qwen3, qwen3moe)");
  const std::string a = arch + ".";
  const GgufTensor* embd = f.find_tensor("token_embd.weight");
  if (!embd || embd->shape.size() != 2) bad_input(f.path(), ": missing 2-D tensor 'token_embd.weight'");
  // The config.json these keys came from, for the architecture's own validation.
  nlohmann::json c = {
      {"model_type", model_type},
      {"vocab_size", embd->shape[0]},
      {"hidden_size", f.get_int(a + "embedding_length")},
      {"num_hidden_layers", f.get_int(a + "block_count")},
      {"num_attention_heads", f.get_int(a + "attention.head_count")},
      {"num_key_value_heads", f.get_int(a + "attention.head_count_kv")},
      {"rms_norm_eps", f.get_float(a + "attention.layer_norm_rms_epsilon")},
      {"rope_theta", f.get_float(a + "rope.freq_base")},
      {"tie_word_embeddings", f.find_tensor("output.weight") == nullptr},
  };
  if (f.find(a + "context_length")) c["max_position_embeddings"] = f.get_int(a + "context_length");
  if (f.find(a + "attention.key_length")) c["head_dim"] = f.get_int(a + "attention.key_length");
  if (f.find(a + "feed_forward_length")) c["intermediate_size"] = f.get_int(a + "feed_forward_length");
  if (model_type == "qwen3_moe") {
    c["num_experts"] = f.get_int(a + "expert_count");
    c["num_experts_per_tok"] = f.get_int(a + "expert_used_count");
    c["moe_intermediate_size"] = f.get_int(a + "expert_feed_forward_length");
    const GgufValue* norm = f.find(a + "expert_weights_norm");
    c["norm_topk_prob"] = norm && norm->to_bool() ? *norm->to_bool() : true;
  }
  ModelConfig cfg = find_architecture(model_type)->parse_config(c, f.path() + " (GGUF metadata)");
  if (const GgufValue* eos = f.find("tokenizer.ggml.eos_token_id"); eos && eos->to_int())
    cfg.eos_token_ids = {int(*eos->to_int())};
  return cfg;
}

Checkpoint gguf_checkpoint(std::shared_ptr<const GgufFile> f, const ModelConfig& cfg) {
  std::vector<TensorInfo> infos;
  auto buffers = std::make_shared<std::vector<std::vector<float>>>();  // dequantized block tensors
  for (const GgufNameMap& m : qwen_gguf_names(cfg)) {
    const GgufTensor* t = f->find_tensor(m.gguf);
    if (!t) bad_input(f->path(), ": tensor '", m.gguf, "' is missing");
    std::vector<int64_t> shape = m.hf_shape;
    if (m.hf.size() > 1) shape.insert(shape.begin(), int64_t(m.hf.size()));
    if (t->shape != shape) {
      std::string got, want;
      for (int64_t d : t->shape) got += std::to_string(d) + " ";
      for (int64_t d : shape) want += std::to_string(d) + " ";
      bad_input(f->path(), ": tensor '", m.gguf, "' has shape [ ", got, "], expected [ ", want, "]");
    }
    const uint8_t* data = t->data;
    DType dtype;
    if (auto d = ggml_to_dtype(t->type); d && (*d == DType::kBF16 || *d == DType::kF16 || *d == DType::kF32)) {
      dtype = *d;
    } else if (quant::has_kernels(t->type)) {
      buffers->emplace_back(static_cast<size_t>(t->numel()));
      quant::dequantize_row(t->type, t->data, t->numel(), buffers->back().data());
      data = reinterpret_cast<const uint8_t*>(buffers->back().data());
      dtype = DType::kF32;
    } else {
      unsupported(f->path(), ": tensor '", m.gguf, "' is ", ggml_type_name(t->type), ", which kestrel cannot load yet");
    }
    // Stacked experts split back into one tensor per expert.
    const uint64_t each = uint64_t(t->numel() / int64_t(m.hf.size())) * dtype_size(dtype);
    for (size_t i = 0; i < m.hf.size(); ++i) {
      TensorInfo info;
      info.name = m.hf[i];
      info.dtype = dtype;
      info.shape = m.hf_shape;
      info.data = data + i * each;
      info.nbytes = each;
      infos.push_back(std::move(info));
    }
  }
  struct Keep {
    std::shared_ptr<const GgufFile> file;
    std::shared_ptr<std::vector<std::vector<float>>> buffers;
  };
  const std::string source = f->path();
  return Checkpoint::from_tensors(source, std::move(infos), std::make_shared<Keep>(Keep{std::move(f), buffers}));
}

}  // namespace kestrel
