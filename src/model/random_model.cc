// random-model: a released model's config with seeded random bf16 weights, streamed to disk.
//
// Scales (activations stay O(1) through any depth, since every sub-layer reads an RMSNorm'd input):
//   matrices      N(0, 1/fan_in)          fan_in = columns (conv1d: kernel width)
//   embeddings    N(0, 1/hidden)          so tied output heads give O(1) logits too
//   RMSNorm       identity + N(0, 0.02^2) identity = 0 where the checkpoint stores w for (1 + w)
//   A_log         log U(1, 16)
//   dt_bias       softplus^-1(dt), dt ~ logU(1e-3, 1e-1): decays exp(-A dt) in a useful range
#include "model/random_model.h"

#include <cmath>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/error.h"
#include "core/files.h"
#include "core/progress.h"
#include "core/thread_pool.h"
#include "io/safetensors.h"
#include "model/presets.h"
#include "model/registry.h"

namespace kestrel {
namespace {

constexpr int64_t kChunk = int64_t(1) << 20;  // elements per independently seeded stream
constexpr int64_t kBatch = 64;                // chunks generated in parallel before a write

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// xoshiro256**: small, fast, and good enough for initialising weights.
class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (auto& w : s_) w = splitmix64(seed);
  }
  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9, t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  float uniform() { return float(next() >> 40) * (1.0f / 16777216.0f); }  // [0, 1)

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

// Fills out[0, n) with one chunk of `spec`'s values, drawn from the stream `stream_seed`.
void fill_chunk(const TensorSpec& spec, uint64_t stream_seed, uint16_t* out, int64_t n) {
  Rng rng(stream_seed);
  auto normal_pair = [&](float* a, float* b) {
    const float u1 = 1.0f - rng.uniform(), u2 = rng.uniform();  // u1 in (0, 1]
    const float r = std::sqrt(-2.0f * std::log(u1)), th = 6.2831853f * u2;
    *a = r * std::cos(th);
    *b = r * std::sin(th);
  };
  switch (spec.init) {
    case InitKind::kNormal:
    case InitKind::kNorm: {
      const float mean = spec.init == InitKind::kNorm ? spec.scale : 0.0f;
      const float std = spec.init == InitKind::kNorm ? 0.02f : spec.scale;
      for (int64_t i = 0; i < n; i += 2) {
        float a, b;
        normal_pair(&a, &b);
        out[i] = f32_to_bf16(mean + std * a);
        if (i + 1 < n) out[i + 1] = f32_to_bf16(mean + std * b);
      }
      break;
    }
    case InitKind::kALog:
      for (int64_t i = 0; i < n; ++i) out[i] = f32_to_bf16(std::log(1.0f + 15.0f * rng.uniform()));
      break;
    case InitKind::kDtBias:
      for (int64_t i = 0; i < n; ++i) {
        const float dt = std::exp(std::log(1e-3f) + rng.uniform() * (std::log(1e-1f) - std::log(1e-3f)));
        out[i] = f32_to_bf16(dt + std::log(-std::expm1(-dt)));
      }
      break;
  }
}

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Generates specs [first, last) in order. Each tensor is cut into chunks of kChunk elements, each
// drawn from its own stream (seed, tensor name, chunk index), so the values do not depend on the
// thread count; up to kBatch chunks are generated in parallel at a time, across tensor boundaries
// (a mixture of experts has thousands of one-chunk tensors). sink(i, data, nbytes) receives each
// tensor's bytes in order, an empty tensor once with no bytes.
template <typename Sink>
void generate(const std::vector<TensorSpec>& specs, size_t first, size_t last, uint64_t seed, ThreadPool& pool,
              std::vector<uint16_t>& buf, Sink&& sink) {
  struct Piece {
    size_t spec;
    int64_t chunk, offset, len;  // offset into buf, in elements
  };
  std::vector<Piece> batch;
  size_t i = first;
  int64_t c = 0;  // next chunk of spec i
  while (i < last) {
    batch.clear();
    int64_t total = 0;
    while (i < last && int64_t(batch.size()) < kBatch) {
      const int64_t n = numel(specs[i].shape), begin = c * kChunk, len = std::min(kChunk, n - begin);
      batch.push_back({i, c, total, len});
      total += len;
      if (begin + len >= n) {
        ++i;
        c = 0;
      } else {
        ++c;
      }
    }
    buf.resize(size_t(total));
    pool.parallel_for(int64_t(batch.size()), [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        const Piece& p = batch[size_t(b)];
        if (p.len == 0) continue;
        uint64_t sd = seed;  // splitmix64 advances its argument
        uint64_t s = (splitmix64(sd) ^ fnv1a(specs[p.spec].name)) + uint64_t(p.chunk);
        fill_chunk(specs[p.spec], splitmix64(s), buf.data() + p.offset, p.len);
      }
    });
    for (size_t b = 0; b < batch.size();) {  // a tensor's pieces are consecutive in buf
      size_t e = b;
      int64_t len = 0;
      while (e < batch.size() && batch[e].spec == batch[b].spec) len += batch[e++].len;
      sink(batch[b].spec, buf.data() + batch[b].offset, uint64_t(len) * 2);
      b = e;
    }
  }
}

struct Shard {
  std::string file;
  size_t first = 0, last = 0;  // spec indices [first, last)
  uint64_t bytes = 0;
};

std::vector<Shard> plan_shards(const std::vector<TensorSpec>& specs, uint64_t max_bytes) {
  std::vector<Shard> shards;
  for (size_t i = 0; i < specs.size(); ++i) {
    const uint64_t b = uint64_t(numel(specs[i].shape)) * 2;
    if (shards.empty() || (shards.back().bytes > 0 && shards.back().bytes + b > max_bytes)) {
      shards.emplace_back();
      shards.back().first = i;
    }
    shards.back().last = i + 1;
    shards.back().bytes += b;
  }
  if (shards.size() == 1) {
    shards[0].file = "model.safetensors";
  } else {
    char name[64];
    for (size_t s = 0; s < shards.size(); ++s) {
      std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
      shards[s].file = name;
    }
  }
  return shards;
}

}  // namespace

std::vector<TensorSpec> qwen_tensor_specs(const ModelConfig& cfg) {
  const std::string& P = cfg.weight_prefix;
  const int64_t H = cfg.hidden_size, V = cfg.vocab_size;
  const float norm_id = cfg.zero_centered_norm ? 0.0f : 1.0f;
  std::vector<TensorSpec> s;
  auto mat = [&](const std::string& name, int64_t rows, int64_t cols) {
    s.push_back({.name = name, .shape = {rows, cols}, .init = InitKind::kNormal,
                 .scale = float(1.0 / std::sqrt(double(cols)))});
  };
  auto norm = [&](const std::string& name, int64_t n, float identity) {
    s.push_back({.name = name, .shape = {n}, .init = InitKind::kNorm, .scale = identity});
  };
  auto mlp = [&](const std::string& p, int64_t ffn) {
    mat(p + "gate_proj.weight", ffn, H);
    mat(p + "up_proj.weight", ffn, H);
    mat(p + "down_proj.weight", H, ffn);
  };
  mat(P + "embed_tokens.weight", V, H);
  for (int l = 0; l < cfg.n_layers; ++l) {
    const std::string p = P + "layers." + std::to_string(l) + ".";
    norm(p + "input_layernorm.weight", H, norm_id);
    if (cfg.layer_kinds[size_t(l)] == LayerKind::kLinearAttention) {
      const auto& g = cfg.gdn;
      const int64_t nv = g.n_v_heads, vw = nv * g.v_head_dim, C = g.conv_dim();
      const std::string a = p + "linear_attn.";
      if (cfg.model_type.rfind("qwen3_next", 0) == 0) {  // fused projections
        mat(a + "in_proj_qkvz.weight", C + vw, H);
        mat(a + "in_proj_ba.weight", 2 * nv, H);
      } else {
        mat(a + "in_proj_qkv.weight", C, H);
        mat(a + "in_proj_z.weight", vw, H);
        mat(a + "in_proj_b.weight", nv, H);
        mat(a + "in_proj_a.weight", nv, H);
      }
      s.push_back({.name = a + "conv1d.weight", .shape = {C, 1, g.conv_kernel}, .init = InitKind::kNormal,
                   .scale = float(1.0 / std::sqrt(double(g.conv_kernel)))});
      s.push_back({.name = a + "A_log", .shape = {nv}, .init = InitKind::kALog});
      s.push_back({.name = a + "dt_bias", .shape = {nv}, .init = InitKind::kDtBias});
      norm(a + "norm.weight", g.v_head_dim, 1.0f);  // gated RMSNorm: a plain weight
      mat(a + "out_proj.weight", H, vw);
    } else {
      const auto& at = cfg.attn;
      const int64_t qw = int64_t(at.n_heads) * at.head_dim, kvw = int64_t(at.n_kv_heads) * at.head_dim;
      const std::string a = p + "self_attn.";
      mat(a + "q_proj.weight", at.output_gate ? 2 * qw : qw, H);  // gated: [query, gate] per head
      mat(a + "k_proj.weight", kvw, H);
      mat(a + "v_proj.weight", kvw, H);
      mat(a + "o_proj.weight", H, qw);
      norm(a + "q_norm.weight", at.head_dim, norm_id);
      norm(a + "k_norm.weight", at.head_dim, norm_id);
    }
    norm(p + "post_attention_layernorm.weight", H, norm_id);
    if (!cfg.layer_moe[size_t(l)]) {
      mlp(p + "mlp.", cfg.ffn_size);
      continue;
    }
    const auto& m = cfg.moe;
    mat(p + "mlp.gate.weight", m.n_experts, H);
    for (int e = 0; e < m.n_experts; ++e) mlp(p + "mlp.experts." + std::to_string(e) + ".", m.expert_ffn);
    if (m.shared_ffn > 0) {
      mlp(p + "mlp.shared_expert.", m.shared_ffn);
      if (m.shared_gate) mat(p + "mlp.shared_expert_gate.weight", 1, H);
    }
  }
  norm(P + "norm.weight", H, norm_id);
  if (!cfg.tie_embeddings) mat("lm_head.weight", V, H);
  return s;
}

std::vector<TensorSpec> gemma4_tensor_specs(const ModelConfig& cfg) {
  const std::string& Pfx = cfg.weight_prefix;
  const int64_t H = cfg.hidden_size, V = cfg.vocab_size, P = cfg.per_layer_input_dim, L = cfg.n_layers;
  std::vector<TensorSpec> s;
  // std 1/sqrt(fan_in), fan_in = the last dimension (also for stacked [E, rows, cols] experts)
  auto mat = [&](const std::string& name, std::vector<int64_t> shape) {
    const double fan_in = double(shape.back());
    s.push_back({.name = name, .shape = std::move(shape), .init = InitKind::kNormal,
                 .scale = float(1.0 / std::sqrt(fan_in))});
  };
  auto norm = [&](const std::string& name, int64_t n) {  // Gemma 4 norms are x * w: identity 1
    s.push_back({.name = name, .shape = {n}, .init = InitKind::kNorm, .scale = 1.0f});
  };
  mat(Pfx + "embed_tokens.weight", {V, H});  // scaled by sqrt(H) at lookup: O(1) activations
  if (P > 0) {
    // L groups of P per token, each scaled by sqrt(P) at lookup: std 1/sqrt(P) gives O(1)
    s.push_back({.name = Pfx + "embed_tokens_per_layer.weight", .shape = {cfg.per_layer_vocab, L * P},
                 .init = InitKind::kNormal, .scale = float(1.0 / std::sqrt(double(P)))});
    mat(Pfx + "per_layer_model_projection.weight", {L * P, H});
    norm(Pfx + "per_layer_projection_norm.weight", P);
  }
  for (int l = 0; l < cfg.n_layers; ++l) {
    const std::string p = Pfx + "layers." + std::to_string(l) + ".";
    const AttentionConfig& a = cfg.attn_for(l);
    const int64_t hd = a.head_dim, qw = int64_t(a.n_heads) * hd, kvw = int64_t(a.n_kv_heads) * hd;
    for (const char* n : {"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                          "post_feedforward_layernorm"})
      norm(p + n + ".weight", H);
    mat(p + "self_attn.q_proj.weight", {qw, H});
    norm(p + "self_attn.q_norm.weight", hd);
    mat(p + "self_attn.o_proj.weight", {H, qw});
    if (cfg.kv_source(l) == l) {
      mat(p + "self_attn.k_proj.weight", {kvw, H});
      if (!a.k_eq_v) mat(p + "self_attn.v_proj.weight", {kvw, H});
      norm(p + "self_attn.k_norm.weight", hd);
    }
    const int64_t F = cfg.ffn_for(l);
    mat(p + "mlp.gate_proj.weight", {F, H});
    mat(p + "mlp.up_proj.weight", {F, H});
    mat(p + "mlp.down_proj.weight", {H, F});
    if (cfg.layer_moe[size_t(l)]) {
      const int64_t E = cfg.moe.n_experts, EF = cfg.moe.expert_ffn;
      mat(p + "router.proj.weight", {E, H});
      norm(p + "router.scale", H);
      norm(p + "router.per_expert_scale", E);
      mat(p + "experts.gate_up_proj", {E, 2 * EF, H});
      mat(p + "experts.down_proj", {E, H, EF});
      for (const char* n : {"post_feedforward_layernorm_1", "pre_feedforward_layernorm_2", "post_feedforward_layernorm_2"})
        norm(p + n + ".weight", H);
    }
    if (P > 0) {
      mat(p + "per_layer_input_gate.weight", {P, H});
      mat(p + "per_layer_projection.weight", {H, P});
      norm(p + "post_per_layer_input_norm.weight", H);
    }
    norm(p + "layer_scalar", 1);
  }
  norm(Pfx + "norm.weight", H);
  if (!cfg.tie_embeddings) mat("lm_head.weight", {V, H});
  return s;
}

std::vector<TensorSpec> preset_tensor_specs(const ModelConfig& cfg) {
  if (cfg.arch == "qwen") return qwen_tensor_specs(cfg);
  if (cfg.arch == "gemma4") return gemma4_tensor_specs(cfg);
  unsupported("random-model does not write ", cfg.model_type, " checkpoints (qwen3*, qwen3_5*, gemma4_text)");
}

namespace {

// The preset's config.json, parsed by the architecture that owns it (so random-model writes
// exactly the tensors the loader will ask for).
ModelConfig preset_model_config(const ModelPreset& preset, const nlohmann::json& config) {
  const std::string model_type = config["model_type"].get<std::string>();
  const Architecture* arch = find_architecture(model_type);
  KCHECK_MSG(arch, "preset ", preset.name, " has unregistered model_type ", model_type);
  return arch->parse_config(config, preset.name + " config.json");
}

}  // namespace

uint64_t preset_parameter_count(const std::string& like, int64_t vocab) {
  const ModelPreset& preset = find_preset(like);
  uint64_t n = 0;
  for (const auto& sp : preset_tensor_specs(preset_model_config(preset, preset_config(preset, vocab))))
    n += uint64_t(numel(sp.shape));
  return n;
}

RandomModelReport write_random_model(const RandomModelParams& params) {
  const ModelPreset& preset = find_preset(params.like);
  if (preset.vocab == 0 && (params.vocab < 16 || params.vocab > (int64_t(1) << 24)))
    bad_input("--vocab ", params.vocab, " is out of range [16, 16777216]");
  if (params.max_shard_bytes == 0) bad_input("the maximum shard size must be positive");
  const nlohmann::json config = preset_config(preset, params.vocab);
  const ModelConfig cfg = preset_model_config(preset, config);
  const std::vector<TensorSpec> specs = preset_tensor_specs(cfg);
  const std::vector<Shard> shards = plan_shards(specs, params.max_shard_bytes);

  RandomModelReport report;
  report.n_tensors = specs.size();
  report.n_shards = int(shards.size());
  for (const auto& sp : specs) report.n_params += uint64_t(numel(sp.shape));
  report.n_bytes = report.n_params * 2;

  AtomicDirectory dir(params.out);
  std::error_code ec;
  const auto space = std::filesystem::space(dir.temp_path(), ec);
  if (!ec && space.available < report.n_bytes + (1u << 20))
    fail(ErrorKind::kIo, params.out, ": ", preset.name, " needs ", human_bytes(double(report.n_bytes)), " but only ",
         human_bytes(double(space.available)), " are free there");
  write_file_atomic(path_join(dir.temp_path(), "config.json"), config.dump(2) + "\n");
  write_file_atomic(path_join(dir.temp_path(), "generation_config.json"),
                    preset_generation_config(preset, params.vocab).dump(2) + "\n");

  std::optional<Progress> progress;
  if (params.progress) progress.emplace("writing " + preset.name, report.n_bytes, true);
  ThreadPool& pool = ThreadPool::global();
  std::vector<uint16_t> buf;
  nlohmann::json weight_map = nlohmann::json::object();
  for (const Shard& shard : shards) {
    SafetensorsWriter writer(path_join(dir.temp_path(), shard.file));
    writer.set_metadata("format", "pt");
    for (size_t i = shard.first; i < shard.last; ++i) {
      writer.declare(specs[i].name, DType::kBF16, specs[i].shape);
      weight_map[specs[i].name] = shard.file;
    }
    writer.begin();
    generate(specs, shard.first, shard.last, params.seed, pool, buf, [&](size_t i, const uint16_t* data, uint64_t nbytes) {
      writer.write_chunk(specs[i].name, data, nbytes);
      if (progress) progress->advance(nbytes);
    });
    writer.finish();
  }
  if (shards.size() > 1) {
    nlohmann::json index = {{"metadata", {{"total_parameters", report.n_params}, {"total_size", report.n_bytes}}},
                            {"weight_map", weight_map}};
    write_file_atomic(path_join(dir.temp_path(), "model.safetensors.index.json"), index.dump(2) + "\n");
  }
  if (progress) progress->finish();
  for (const auto& file : params.extra_files) {
    const std::string name = file.substr(file.find_last_of('/') + 1);
    write_file_atomic(path_join(dir.temp_path(), name), read_file(file));
  }
  dir.commit();
  return report;
}

}  // namespace kestrel
