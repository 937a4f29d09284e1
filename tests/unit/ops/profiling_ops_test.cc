// ProfilingOps: transparent (the same logits bit for bit), and its profile accounts for every op
// of every recorded step, attributed to the phases the model marks.
#include <gtest/gtest.h>

#include <cstring>

#include "core/dtype.h"
#include "engine/runner.h"
#include "ops/profiling_ops.h"
#include "support/fixture_model.h"

namespace kestrel {
namespace {

std::vector<float> decode(Model& model, const std::vector<int32_t>& prompt, int steps) {
  Runner runner(model, cpu_cache_sizing(model.config(), 1, 128));
  SequenceState seq;
  runner.start(seq);
  std::vector<float> all = runner.step({{.seq = &seq, .tokens = prompt}});
  for (int i = 0; i < steps; ++i) {
    std::vector<int32_t> one = {int32_t(7 * i + 3)};
    const auto& row = runner.step({{.seq = &seq, .tokens = one}});
    all.insert(all.end(), row.begin(), row.end());
  }
  return all;
}

TEST(ProfilingOps, TransparentAndAccountsForEveryStep) {
  for (const char* family : {"qwen3_5_moe", "gemma4_text_moe"}) {
    SCOPED_TRACE(family);
    const std::string dir = test::data_path(std::string("fixtures/") + family);
    const std::vector<int32_t> prompt = test::reference_prompt(family, 2);
    CpuOps plain_ops;
    LoadedModel plain = load_model(dir, plain_ops);
    CpuOps inner;
    ProfilingOps prof(inner);
    LoadedModel wrapped = load_model(dir, prof);

    prof.set_recording(true);
    const std::vector<float> got = decode(*wrapped.model, prompt, 4);
    prof.set_recording(false);
    prof.collect();
    EXPECT_EQ(got, decode(*plain.model, prompt, 4)) << "profiling changed the results";

    const OpProfile& p = prof.profile();
    EXPECT_EQ(p.steps, 5);
    EXPECT_GT(p.span, 0.0);
    EXPECT_LE(p.in_ops, p.span * 1.0001);
    const bool hybrid = std::string(family) == "qwen3_5_moe";
    EXPECT_GT(p.by_phase[int(Phase::kAttention)].calls, 0);
    EXPECT_EQ(p.by_phase[int(Phase::kDeltaNet)].calls > 0, hybrid);
    EXPECT_GT(p.by_phase[int(Phase::kFfn)].calls, 0);
    EXPECT_EQ(p.by_phase[int(Phase::kEmbed)].calls, std::string(family) == "gemma4_text_moe" ? 5 * 2 : 5);
    EXPECT_EQ(p.by_phase[int(Phase::kHead)].calls > 0, true);
    int64_t calls = 0;
    double seconds = 0;
    for (const auto& r : p.by_phase) {
      calls += r.calls;
      seconds += r.seconds;
    }
    int64_t op_calls = 0;
    for (const auto& [name, r] : p.by_op) op_calls += r.calls;
    EXPECT_EQ(calls, op_calls);
    EXPECT_NEAR(seconds, p.in_ops, 1e-9);
    EXPECT_EQ(p.by_op.at("begin_step").calls, 5);
    // Only a step with rows that want no logits gathers the head's rows: the prompt's, when it
    // has more than one token; the decode steps' norm reads the rows in place.
    const auto gather = p.by_op.find("gather_rows");
    EXPECT_EQ(gather == p.by_op.end() ? 0 : gather->second.calls, prompt.size() > 1 ? 1 : 0);
    EXPECT_GT(p.matmul_flops, 0.0);
    // not recording: nothing is added
    prof.clear();
    decode(*wrapped.model, prompt, 1);
    prof.collect();
    EXPECT_EQ(prof.profile().steps, 0);
  }
}

// The matrix products count 2 FLOPs per multiply-add their shapes ask for, only while recording:
// matmul, matmul_multi and matmul_gated T x N x K, moe_experts and moe_experts_shared each (row,
// expert) pair's gate, up and down.
TEST(ProfilingOps, CountsMatrixProductFlops) {
  CpuOps inner;
  ProfilingOps prof(inner);
  auto filled = [&](DType dt, int64_t rows, int64_t cols) {
    Buffer b = host_buffer(dt, rows, cols);
    for (int64_t i = 0; i < rows * cols; ++i) {
      const float v = float(i % 7) * 0.125f - 0.25f;
      if (dt == DType::kF32) b.view().f32()[i] = v;
      else b.view().as<uint16_t>()[i] = f32_to_bf16(v);
    }
    return b;
  };
  const int64_t T = 3, K = 8, H = 8, F = 6, E = 3;
  Buffer x = filled(DType::kF32, T, K), w = filled(DType::kBF16, 5, K), w2 = filled(DType::kBF16, 4, K);
  Buffer out = host_buffer(DType::kF32, T, 5), out2 = host_buffer(DType::kF32, T, 4);
  ExpertWeights ex;
  std::vector<Buffer> keep;
  for (int64_t e = 0; e < E; ++e) {
    keep.push_back(filled(DType::kBF16, F, H));
    ex.gate.push_back(keep.back().view());
    keep.push_back(filled(DType::kBF16, F, H));
    ex.up.push_back(keep.back().view());
    keep.push_back(filled(DType::kBF16, H, F));
    ex.down.push_back(keep.back().view());
  }
  Buffer ids = host_buffer(DType::kI32, T, 2), weights = filled(DType::kF32, T, 2), moe_out = host_buffer(DType::kF32, T, H);
  for (int64_t i = 0; i < T * 2; ++i) ids.view().as<int32_t>()[i] = int32_t(i % E);
  auto run_all = [&] {
    prof.matmul(out.view(), x.view(), w.view());
    const MatmulTarget targets[] = {{out.view(), w.view()}, {out2.view(), w2.view()}};
    prof.matmul_multi(x.view(), targets);
    prof.moe_experts(moe_out.view(), x.view(), ids.view(), weights.view(), ex);
    Buffer g = filled(DType::kF32, T, F), u = filled(DType::kF32, T, F), wd = filled(DType::kBF16, H, F);
    prof.matmul_gated(moe_out.view(), g.view(), u.view(), wd.view(), Activation::kSilu);
    Buffer shared = filled(DType::kF32, T, H);
    prof.moe_experts_shared(moe_out.view(), x.view(), ids.view(), weights.view(), ex, shared.view(), Tensor{});
  };
  run_all();  // not recording
  EXPECT_EQ(prof.profile().matmul_flops, 0.0);
  prof.set_recording(true);
  run_all();
  prof.set_recording(false);
  const double expect = 2.0 * T * 5 * K            // matmul
                        + 2.0 * T * (5 + 4) * K    // matmul_multi
                        + T * 2 * 2.0 * (3 * F * H)   // moe_experts: 6 pairs, each F x H three times
                        + 2.0 * T * H * F             // matmul_gated
                        + T * 2 * 2.0 * (3 * F * H);  // moe_experts_shared
  EXPECT_EQ(prof.profile().matmul_flops, expect);
  prof.clear();
  EXPECT_EQ(prof.profile().matmul_flops, 0.0);
}

// The fused ops reach the wrapped backend as themselves, not as the defaults' parts: a profile
// runs the kernels a plain run does, and an op only the backend implements (sample_candidates:
// the Ops default refuses it) works through the wrapper.
TEST(ProfilingOps, PassesTheFusedOpsThrough) {
  CpuOps inner;
  ProfilingOps prof(inner);
  const int64_t R = 2, V = 40, M = 5;
  Buffer x = host_buffer(DType::kF32, R, V);
  for (int64_t i = 0; i < R * V; ++i) x.view().f32()[i] = float((i * 37) % 23) * 0.25f - 2.0f;
  const float temps[] = {0.7f, 1.3f};
  Buffer ids = host_buffer(DType::kI32, R, M), scaled = host_buffer(DType::kF32, R, M), mass = host_buffer(DType::kF64, R, 1);
  Buffer ids2 = host_buffer(DType::kI32, R, M), scaled2 = host_buffer(DType::kF32, R, M), mass2 = host_buffer(DType::kF64, R, 1);
  prof.set_recording(true);
  prof.sample_candidates(ids.view(), scaled.view(), mass.view(), x.view(), temps);
  prof.set_recording(false);
  prof.collect();
  inner.sample_candidates(ids2.view(), scaled2.view(), mass2.view(), x.view(), temps);
  EXPECT_EQ(0, std::memcmp(ids.view().data, ids2.view().data, size_t(R * M) * 4));
  EXPECT_EQ(0, std::memcmp(scaled.view().data, scaled2.view().data, size_t(R * M) * 4));
  EXPECT_EQ(0, std::memcmp(mass.view().data, mass2.view().data, size_t(R) * 8));
  const OpProfile& p = prof.profile();
  EXPECT_EQ(p.by_op.count("sample_candidates"), 1u);
  EXPECT_EQ(p.by_op.count("argmax"), 0u);
}

}  // namespace
}  // namespace kestrel
