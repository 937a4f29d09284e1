// Helpers for tests that run fixture models: load one on the CPU, read its reference prompts.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "engine/generate.h"
#include "engine/runner.h"
#include "io/safetensors.h"
#include "model/loader.h"
#include "support/paths.h"

namespace kestrel::test {

// The fixture's model on the CPU backend, loaded once per test; activations F32, or F64 for the
// float64 oracle mode.
struct FixtureModel {
  explicit FixtureModel(const std::string& family, DType activations = DType::kF32)
      : dir(data_path("fixtures/" + family)), ops(activations), lm(load_model(dir, ops)) {}
  std::string dir;
  CpuOps ops;
  LoadedModel lm;
  Model& model() { return *lm.model; }
};

// Prompt p's token ids from the family's reference.safetensors.
inline std::vector<int32_t> reference_prompt(const std::string& family, int p) {
  SafetensorsFile ref = SafetensorsFile::open(data_path("fixtures/" + family + "/reference.safetensors"));
  const TensorInfo& t = ref.tensors().at("p" + std::to_string(p) + ".ids");
  const int32_t* ids = reinterpret_cast<const int32_t*>(t.data);
  return std::vector<int32_t>(ids, ids + t.numel());
}

// Every position's logits of the family's first n reference prompts, one forward pass each.
inline std::vector<std::vector<float>> prompt_logits(Model& model, const std::string& family, int n) {
  std::vector<std::vector<float>> out;
  for (int p = 0; p < n; ++p) {
    const std::vector<int32_t> ids = reference_prompt(family, p);
    Runner runner(model, cpu_cache_sizing(model.config(), 1, int64_t(ids.size()) + 1));
    SequenceState seq;
    runner.start(seq);
    out.push_back(runner.step({{.seq = &seq, .tokens = ids, .all_logits = true}}));
    runner.finish(seq);
  }
  return out;
}

// The first n tokens `model` generates for `prompt` decoding alone (64-token prefill chunks): what
// a batched or scheduled run of the same request must reproduce.
inline std::vector<int32_t> decode_alone(Model& model, const std::vector<int32_t>& prompt, int n,
                                         SamplingParams sampling = {}) {
  Runner r(model, cpu_cache_sizing(model.config(), 1, int64_t(prompt.size()) + n));
  GenerateOptions o;
  o.max_new_tokens = n;
  o.sampling = sampling;
  o.prefill_chunk = 64;
  return generate(r, prompt, o).tokens;
}

}  // namespace kestrel::test
