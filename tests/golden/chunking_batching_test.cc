// The engine's invariants on the fixture models:
//  - chunking: prefill split into chunks of any sizes gives the same logits as one pass (fp32
//    tolerance), bit-identical when the splits fall on the DeltaNet chunk grid (multiples of 64);
//  - batching: sequences decoded together give bit-identical logits to each decoded alone.
// A parameter "FAMILY+bf16kv" runs the family with a BF16 KV cache (Ops::set_kv_cache_bf16).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <regex>

#include "engine/runner.h"
#include "support/compare.h"
#include "support/fixture_model.h"

namespace kestrel {
namespace {

// Logits of every prompt position, prefilled in chunks of the given sizes (cycled).
std::vector<float> chunked_logits(Model& model, const std::vector<int32_t>& prompt, const std::vector<int>& sizes) {
  Runner runner(model, cpu_cache_sizing(model.config(), 1, int64_t(prompt.size()) + 1));
  SequenceState seq;
  runner.start(seq);
  std::vector<float> out;
  size_t begin = 0, i = 0;
  while (begin < prompt.size()) {
    size_t n = std::min(size_t(sizes[i++ % sizes.size()]), prompt.size() - begin);
    const auto& l = runner.step({{.seq = &seq, .tokens = std::span<const int32_t>(prompt.data() + begin, n),
                                  .all_logits = true}});
    out.insert(out.end(), l.begin(), l.end());
    begin += n;
  }
  runner.finish(seq);
  return out;
}

// The fixture of a test parameter, with a BF16 KV cache for "FAMILY+bf16kv"; family() is its name.
struct ParamModel : test::FixtureModel {
  explicit ParamModel(const std::string& param) : test::FixtureModel(param.substr(0, param.find('+'))) {
    ops.set_kv_cache_bf16(param.ends_with("+bf16kv"));
  }
  std::string family() const { return dir.substr(dir.rfind('/') + 1); }
};

class Chunking : public ::testing::TestWithParam<std::string> {};

TEST_P(Chunking, AnySplitMatchesOnePassAndGridSplitsAreBitIdentical) {
  ParamModel fm(GetParam());
  const auto prompt = test::reference_prompt(fm.family(), 4);  // 300 tokens
  const auto whole = chunked_logits(fm.model(), prompt, {int(prompt.size())});
  for (const std::vector<int>& sizes : std::vector<std::vector<int>>{{1}, {3}, {16}, {64}, {5, 59, 100, 7}, {37, 91}}) {
    const auto got = chunked_logits(fm.model(), prompt, sizes);
    ASSERT_EQ(got.size(), whole.size());
    EXPECT_LE(test::max_rel_diff(got, whole), 1e-4) << "chunk sizes starting " << sizes[0];
  }
  for (const std::vector<int>& sizes : std::vector<std::vector<int>>{{64}, {128, 64}, {192}}) {
    const auto got = chunked_logits(fm.model(), prompt, sizes);
    EXPECT_EQ(0, std::memcmp(got.data(), whole.data(), whole.size() * sizeof(float)))
        << "grid-aligned split starting " << sizes[0] << " is not bit-identical";
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Chunking,
                         ::testing::Values("qwen3", "qwen3_moe", "qwen3_next", "qwen3_5_moe", "qwen3_next+bf16kv"),
                         [](const auto& info) { return std::regex_replace(info.param, std::regex("\\+"), "_"); });

class Batching : public ::testing::TestWithParam<std::string> {};

// Decodes 4 sequences (prompts of lengths 7, 37, 100, 300) for 8 steps, alone and together,
// where the batched run also mixes a prefill chunk into the first step (split at 128, on the
// DeltaNet chunk grid, so that sequence too must match bit for bit).
TEST_P(Batching, BatchedDecodeIsBitIdenticalToDecodingAlone) {
  ParamModel fm(GetParam());
  Model& model = fm.model();
  const int64_t V = model.config().vocab_size;
  constexpr int kSteps = 8;
  std::vector<std::vector<int32_t>> prompts;
  for (int p = 1; p <= 4; ++p) prompts.push_back(test::reference_prompt(fm.family(), p));

  // alone: prefill, then greedy decode; record each step's logits and tokens
  std::vector<std::vector<std::vector<float>>> alone(4);
  std::vector<std::vector<int32_t>> tokens(4);
  for (size_t s = 0; s < 4; ++s) {
    Runner r(model, cpu_cache_sizing(model.config(), 1, 400));
    SequenceState seq;
    r.start(seq);
    std::vector<float> last = r.step({{.seq = &seq, .tokens = prompts[s]}});
    for (int i = 0; i < kSteps; ++i) {
      int32_t t = int32_t(std::max_element(last.begin(), last.end()) - last.begin());
      tokens[s].push_back(t);
      last = r.step({{.seq = &seq, .tokens = std::span<const int32_t>(&tokens[s].back(), 1)}});
      alone[s].push_back(last);
    }
  }

  // together: sequences 0-2 prefilled first; sequence 3's prompt is prefilled in the same step
  // as the others' first decode token.
  Runner r(model, cpu_cache_sizing(model.config(), 4, 400));
  SequenceState seqs[4];
  for (auto& q : seqs) r.start(q);
  for (size_t s = 0; s < 3; ++s) r.step({{.seq = &seqs[s], .tokens = prompts[s]}});
  std::vector<float> last3 = r.step({{.seq = &seqs[3], .tokens = std::span<const int32_t>(prompts[3]).first(128)}});
  for (int i = 0; i < kSteps; ++i) {
    std::vector<StepItem> items;
    for (size_t s = 0; s < 4; ++s) {
      if (s == 3 && i == 0) {
        items.push_back({.seq = &seqs[3], .tokens = std::span<const int32_t>(prompts[3]).subspan(128)});
      } else if (s == 3) {
        items.push_back({.seq = &seqs[3], .tokens = std::span<const int32_t>(&tokens[3][size_t(i - 1)], 1)});
      } else {
        items.push_back({.seq = &seqs[s], .tokens = std::span<const int32_t>(&tokens[s][size_t(i)], 1)});
      }
    }
    const auto& l = r.step(items);
    ASSERT_EQ(l.size(), size_t(4 * V));
    for (size_t s = 0; s < 3; ++s) {
      EXPECT_EQ(0, std::memcmp(l.data() + s * V, alone[s][size_t(i)].data(), size_t(V) * sizeof(float)))
          << "sequence " << s << " step " << i;
    }
    if (i > 0) {
      EXPECT_EQ(0, std::memcmp(l.data() + 3 * V, alone[3][size_t(i - 1)].data(), size_t(V) * sizeof(float)))
          << "sequence 3 step " << i - 1;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Batching,
                         ::testing::Values("qwen3", "qwen3_moe", "qwen3_next", "qwen3_5_moe", "qwen3_next+bf16kv"),
                         [](const auto& info) { return std::regex_replace(info.param, std::regex("\\+"), "_"); });

}  // namespace
}  // namespace kestrel
