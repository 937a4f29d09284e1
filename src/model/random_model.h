// Random-weight checkpoints with the exact shapes of released models, for benchmarks and tests
// (no real weights can be downloaded here).
//
// The directory holds config.json and generation_config.json as the model ships them, and the
// text weights in bf16 under the released tensor names: model.safetensors, or shards of at most
// `max_shard_bytes` named by model.safetensors.index.json. No vision tower and no MTP layer are
// written. Weights are seeded and deterministic (each tensor chunk has its own stream, so the
// output does not depend on the thread count), scaled so activations stay O(1), streamed to disk
// chunk by chunk, and the directory appears only once complete (built under a temporary name).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/config.h"

namespace kestrel {

struct RandomModelParams {
  std::string like;                                  // preset name: "Qwen3.5-0.8B", "tiny-qwen3.5", ...
  std::string out;                                   // output directory (replaced if it exists)
  uint64_t seed = 0;
  int64_t vocab = 512;                               // tiny presets only
  uint64_t max_shard_bytes = 4ull * 1000 * 1000 * 1000;
  bool progress = true;
  std::vector<std::string> extra_files;              // copied into the directory (tokenizer files)
};

struct RandomModelReport {
  uint64_t n_tensors = 0;
  uint64_t n_params = 0;
  uint64_t n_bytes = 0;
  int n_shards = 0;
};

RandomModelReport write_random_model(const RandomModelParams& params);

// The text-weight parameter count random-model writes for a preset (without writing anything).
uint64_t preset_parameter_count(const std::string& like, int64_t vocab);

// How a tensor is initialised.
enum class InitKind : uint8_t {
  kNormal,   // N(0, std^2)
  kNorm,     // RMSNorm weight: its identity value (`offset`: 0 zero-centred, 1 plain) + small noise
  kALog,     // log(U(1, 16))
  kDtBias,   // inverse softplus of dt ~ logU(1e-3, 1e-1), as state-space models initialise it
};

struct TensorSpec {
  std::string name;             // full checkpoint name
  std::vector<int64_t> shape;
  InitKind init = InitKind::kNormal;
  float scale = 0.0f;           // kNormal: std; kNorm: the identity value
};

// Every text tensor the model needs, in checkpoint order, for a config the qwen parser accepted.
std::vector<TensorSpec> qwen_tensor_specs(const ModelConfig& cfg);
// The same for a config the gemma4 parser accepted.
std::vector<TensorSpec> gemma4_tensor_specs(const ModelConfig& cfg);
// Either of the above by the config's architecture; Error for architectures random-model cannot write.
std::vector<TensorSpec> preset_tensor_specs(const ModelConfig& cfg);

}  // namespace kestrel
