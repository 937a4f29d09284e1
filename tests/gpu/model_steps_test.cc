// The Gemma 4 and Qwen4-Exp fixtures driven through Runner on the CUDA backend and on the CPU with
// the same schedule: prefill split into chunks that continue a cached past (sliding-window rings
// wrapping, KV-shared layers reading their source's cache, the Qwen4-Exp n-gram context kept on
// the host per slot, QSA keys and the PLE conv state carried over), several sequences in distinct
// slots batched together, prefill chunks mixed with decode rows. Every logits row of every step
// must agree within 2e-2 of the CPU logits' RMS (the bf16-level tolerance of `kestrel parity
// --device cuda`); the worst is printed. The same for GGUF files of every converted family at
// q8_0 and q4_k_m (ModelStepsGguf).
#include <cstdio>
#include <span>

#include "convert/hf_to_gguf.h"
#include "engine/runner.h"
#include "gpu_test_util.h"
#include "model/loader.h"
#include "support/compare.h"
#include "support/paths.h"

namespace kestrel::test {
namespace {

#ifdef KESTREL_HAVE_CUDA
std::vector<int32_t> tokens_for(int n, int64_t vocab, int salt) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back(int32_t((i * 37 + salt * 101 + 11) % vocab));
  return ids;
}

// Logits of every row of every step of the schedule, concatenated.
std::vector<float> run_schedule(Model& model) {
  const int64_t V = model.config().vocab_size;
  Runner r(model, cpu_cache_sizing(model.config(), 3, 200));
  SequenceState a, b, c;
  r.start(a);
  r.start(b);
  r.start(c);
  const std::vector<int32_t> pa = tokens_for(60, V, 1), pb = tokens_for(5, V, 2), pc = tokens_for(1, V, 3);
  std::vector<float> out;
  auto step = [&](const std::vector<StepItem>& items) {
    const auto& l = r.step(items);
    out.insert(out.end(), l.begin(), l.end());
  };
  auto span = [](const std::vector<int32_t>& v, size_t begin, size_t n) {
    return std::span<const int32_t>(v.data() + begin, n);
  };
  std::vector<int32_t> dec = tokens_for(16, V, 4);
  step({{.seq = &a, .tokens = span(pa, 0, 23), .all_logits = true}, {.seq = &b, .tokens = pb, .all_logits = true}});
  step({{.seq = &a, .tokens = span(pa, 23, 30), .all_logits = true},
        {.seq = &b, .tokens = span(dec, 0, 1)},
        {.seq = &c, .tokens = pc}});
  step({{.seq = &a, .tokens = span(pa, 53, 7), .all_logits = true},
        {.seq = &b, .tokens = span(dec, 1, 1)},
        {.seq = &c, .tokens = span(dec, 2, 1)}});
  for (size_t i = 3; i + 2 < dec.size(); i += 3) {
    step({{.seq = &a, .tokens = span(dec, i, 1)}, {.seq = &b, .tokens = span(dec, i + 1, 1)},
          {.seq = &c, .tokens = span(dec, i + 2, 1)}});
  }
  r.finish(a);
  r.finish(b);
  r.finish(c);
  return out;
}

class ModelSteps : public GpuTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(ModelSteps, ChunkedBatchedStepsMatchCpu) {
  const std::string dir = data_path(std::string("fixtures/") + GetParam());
  LoadedModel on_cpu = load_model(dir, cpu_);
  LoadedModel on_gpu = load_model(dir, gpu());
  const std::vector<float> ref = run_schedule(*on_cpu.model);
  const std::vector<float> got = run_schedule(*on_gpu.model);
  ASSERT_EQ(got.size(), ref.size());
  const double rel = max_rel_diff(got, ref);
  std::printf("  %-22s max |cuda - cpu| / rms = %.3e over %zu logits\n", GetParam(), rel, ref.size());
  EXPECT_LE(rel, 2e-2) << GetParam();
}

INSTANTIATE_TEST_SUITE_P(Gemma4Qwen4Exp, ModelSteps,
                         ::testing::Values("gemma4_text", "gemma4_text_moe", "gemma4_text_kvshared", "gemma4_text_keqv",
                                           "qwen4_exp"));

// One sequence: a 200-token prefill (three whole 64-token chunks: the chunked DeltaNet form on the
// GPU) with every row's logits, then single-token decode steps.
std::vector<float> run_long(Model& model) {
  const int64_t V = model.config().vocab_size;
  Runner r(model, cpu_cache_sizing(model.config(), 1, 210));
  SequenceState a;
  r.start(a);
  const std::vector<int32_t> prompt = tokens_for(200, V, 5), dec = tokens_for(6, V, 6);
  std::vector<float> out = r.step({{.seq = &a, .tokens = prompt, .all_logits = true}});
  for (size_t i = 0; i < dec.size(); ++i) {
    const auto& l = r.step({{.seq = &a, .tokens = std::span<const int32_t>(dec.data() + i, 1)}});
    out.insert(out.end(), l.begin(), l.end());
  }
  r.finish(a);
  return out;
}

// GGUF files converted from the fixtures, kept quantized on both backends (the GPU's block GEMV
// for decode, BF16 tiles of the dequantized weights for prefill): the schedule above and the long
// prefill within the same 2e-2 of the CPU logits' RMS. The Qwen3.5 files run in their tiled
// value-head order (their ssm_out is a block format), so this is also that order on the device.
class ModelStepsGguf : public GpuTest, public ::testing::WithParamInterface<std::tuple<const char*, const char*>> {};

TEST_P(ModelStepsGguf, QuantizedStepsMatchCpu) {
  const auto [family, quant] = GetParam();
  const std::string gguf = work_path(std::string("gpu-steps-") + family + "-" + quant + ".gguf");
  ConvertOptions o{.model_dir = data_path(std::string("fixtures/") + family), .output = gguf, .progress = false};
  if (std::string(quant) == "q8_0") o.type = GgmlType::kQ8_0;
  else o.recipe = quant_recipe_from_name(quant);
  convert_hf_to_gguf(o);
  LoadedModel on_cpu = load_model(gguf, cpu_);
  LoadedModel on_gpu = load_model(gguf, gpu());
  EXPECT_EQ(on_gpu.config().gdn.tiled_value_heads, std::string(family).rfind("qwen3_5", 0) == 0);
  for (auto* run : {&run_schedule, &run_long}) {
    const std::vector<float> ref = (*run)(*on_cpu.model), got = (*run)(*on_gpu.model);
    ASSERT_EQ(got.size(), ref.size());
    const double rel = max_rel_diff(got, ref);
    std::printf("  %-14s %-7s %s max |cuda - cpu| / rms = %.3e over %zu logits\n", family, quant,
                run == &run_long ? "long    " : "schedule", rel, ref.size());
    EXPECT_LE(rel, 2e-2) << family << " " << quant;
  }
}

INSTANTIATE_TEST_SUITE_P(Families, ModelStepsGguf,
                         ::testing::Combine(::testing::Values("qwen3", "qwen3_moe", "qwen3_next", "qwen3_5",
                                                              "qwen3_5_moe", "gemma4_text", "gemma4_text_moe"),
                                            ::testing::Values("q8_0", "q4_k_m")));
#endif

}  // namespace
}  // namespace kestrel::test
