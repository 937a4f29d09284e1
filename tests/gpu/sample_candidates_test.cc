// CUDA vs CPU sample_candidates: bit for bit (the ids, their scaled logits and the mass), since the
// host sampler draws from them exactly as from the whole row (tests/unit/engine/sampler_test.cc).
#include <cstring>
#include <limits>

#include "engine/scheduler.h"
#include "gpu_test_util.h"
#include "model/loader.h"
#include "support/paths.h"
#include "support/sampled_requests.h"

namespace kestrel::test {
namespace {

class SampleCandidatesTest : public GpuTest {
 protected:
  // Rows of V logits: 0 language-model-like (a bulk and a few far above it), 1 flat, 2 a few levels
  // (many exact ties), 3 NaN, infinities and signed zeros among the bulk, 4 all equal.
  Buffer rows(int kind, int64_t R, int64_t V) {
    Buffer b = random(R, V, kind == 1 ? 0.05f : 2.0f);
    float* x = b.view().f32();
    std::uniform_int_distribution<int64_t> pick(0, V - 1);
    std::uniform_int_distribution<int> level(0, 7);
    for (int64_t r = 0; r < R; ++r) {
      float* l = x + r * V;
      if (kind == 0)
        for (int i = 0; i < 12; ++i) l[pick(rng_)] += 10.0f;
      if (kind == 2)
        for (int64_t i = 0; i < V; ++i) l[i] = float(level(rng_)) * 0.5f;
      if (kind == 3) {
        for (int64_t i = 0; i < V; i += 7) l[i] = std::numeric_limits<float>::quiet_NaN();
        for (int64_t i = 3; i < V; i += 11) l[i] = -std::numeric_limits<float>::infinity();
        for (int64_t i = 1; i < V; i += 13) l[i] = (i / 13) % 2 ? 0.0f : -0.0f;
        if (r % 2) l[V / 2] = std::numeric_limits<float>::infinity();
      }
      if (kind == 4)
        for (int64_t i = 0; i < V; ++i) l[i] = 1.5f;
    }
    return b;
  }
  void check(int kind, int64_t R, int64_t V, int64_t M) {
    Buffer x = rows(kind, R, V);
    std::vector<float> temps(static_cast<size_t>(R));
    for (int64_t r = 0; r < R; ++r) temps[size_t(r)] = 0.3f + 0.45f * float(r % 4);
    Buffer ids = cpu_.alloc(DType::kI32, R, M), sc = cpu_.alloc(DType::kF32, R, M), mass = cpu_.alloc(DType::kF64, R, 1);
    cpu_.sample_candidates(ids, sc, mass, x, temps);
    Buffer dx = up(x), dids = gpu().alloc(DType::kI32, R, M), dsc = gpu().alloc(DType::kF32, R, M),
           dmass = gpu().alloc(DType::kF64, R, 1);
    gpu().sample_candidates(dids, dsc, dmass, dx, temps);
    std::vector<int32_t> gids(static_cast<size_t>(R * M));
    std::vector<double> gmass(static_cast<size_t>(R));
    gpu().to_host(dids, gids.data());
    gpu().to_host(dmass, gmass.data());
    const std::vector<float> gsc = down(dsc);
    const std::string what = "kind " + std::to_string(kind) + " rows " + std::to_string(R) + " V " + std::to_string(V) +
                             " M " + std::to_string(M);
    EXPECT_EQ(gids, std::vector<int32_t>(ids.view().as<int32_t>(), ids.view().as<int32_t>() + R * M)) << what;
    // bits, not values: the signs of zeros and the infinities must agree too
    EXPECT_EQ(0, std::memcmp(gsc.data(), sc.view().f32(), size_t(R * M) * 4)) << what << ": scaled logits";
    EXPECT_EQ(0, std::memcmp(gmass.data(), mass.view().as<double>(), size_t(R) * 8)) << what << ": mass";
  }
};

TEST_F(SampleCandidatesTest, EqualsTheCpuBitForBit) {
  for (int kind = 0; kind < 5; ++kind) {
    for (int64_t V : {int64_t(1), int64_t(7), int64_t(300), int64_t(5000), int64_t(151936)}) {
      for (int64_t M : {int64_t(1), int64_t(16), int64_t(1024), int64_t(4096)}) {
        if (M > V) continue;
        check(kind, V > 10000 ? 3 : 5, V, M);
      }
    }
  }
}

// More tokens at the M-th key than the kernel sorts at once (20000 equal logits): the ones at the
// cut are taken in id order by a scan.
TEST_F(SampleCandidatesTest, TiesBeyondTheSortCapGoInIdOrder) {
  check(4, 2, 20000, 1024);
  check(2, 2, 60000, 4096);
}

// The scheduler on a CUDA model: sampled requests draw the same tokens whether the device reduces
// their rows to candidates (4: most walks go past them and fetch the row; 64; 1024, more than the
// fixtures' 512 tokens) or the whole rows come back, with greedy requests in the same steps.
class SampleCandidatesScheduler : public GpuTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(SampleCandidatesScheduler, DrawWhatTheWholeRowsDraw) {
  LoadedModel lm = load_model(data_path(std::string("fixtures/") + GetParam()), gpu());
  const int64_t V = lm.config().vocab_size;
  std::vector<std::vector<int32_t>> prompts(6);
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 5 + 9 * i; ++j) prompts[size_t(i)].push_back(int32_t((j * 37 + i * 101 + 11) % V));
  auto run = [&](int32_t candidates) {
    Scheduler sched(*lm.model, {.n_blocks = 128, .block_size = 16, .n_slots = 0},
                    {.max_running = 8, .max_step_tokens = 64, .prefill_chunk = 32, .sample_candidates = candidates});
    const auto got = sample_to_completion(sched, prompts, 16);
    const SchedulerMetrics m = sched.metrics();
    if (candidates == 0) EXPECT_EQ(m.candidate_rows, 0u);
    else EXPECT_GT(m.candidate_rows, m.candidate_whole_rows) << candidates << " candidates";
    for (const auto& tokens : got) EXPECT_EQ(tokens.size(), 16u);
    return got;
  };
  const auto whole = run(0);
  for (int32_t c : {4, 64, 1024}) EXPECT_EQ(run(c), whole) << c << " candidates";
}

INSTANTIATE_TEST_SUITE_P(Families, SampleCandidatesScheduler, ::testing::Values("qwen3_5", "qwen3_5_moe", "gemma4_text"));

}  // namespace
}  // namespace kestrel::test
