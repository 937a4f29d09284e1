// CUDA vs CPU MoE routing and routed experts.
// Tolerances: routing picks the same experts (exactly) with weights from the same double
// softmax (1e-6); the experts are F32 dot products of the stored weights in a different order
// than the CPU's grouped matmuls (1e-5). Steps of more than 8 tokens run BF16 experts on the
// tensor cores (moe_mma.cu) with the activations split into BF16 terms as the matmuls split
// them: 1e-5 at the default bf16x3, 1e-4 at bf16x2, 1e-2 at bf16 (the matmul row's bounds).
#include <algorithm>
#include <limits>
#include <tuple>

#include "gpu_test_util.h"

namespace kestrel::test {
namespace {

// Deterministic mode belongs to the CUDA backend (without it every test here skips).
void set_deterministic(Ops& ops, bool on) {
#ifdef KESTREL_HAVE_CUDA
  static_cast<CudaOps&>(ops).set_deterministic(on);
#else
  (void)ops, (void)on;
#endif
}

TEST_F(GpuTest, MoeRoute) {
  for (int E : {8, 64, 128, 512}) {
    for (int k : {1, 3, 8}) {
      for (bool norm : {false, true}) {
        const int T = 37;
        Buffer logits = random(T, E, 2.0f);
        logits.view().f32()[5] = logits.view().f32()[6];  // a tie: the lower index wins on both
        Buffer dl = up(logits);
        Buffer ids = cpu_.alloc(DType::kI32, T, k), w = cpu_.alloc(DType::kF32, T, k);
        Buffer dids = gpu().alloc(DType::kI32, T, k), dw = gpu().alloc(DType::kF32, T, k);
        cpu_.moe_route(ids, w, logits, k, norm);
        gpu().moe_route(dids, dw, dl, k, norm);
        std::vector<int32_t> gids(size_t(T * k));
        gpu().to_host(dids, gids.data());
        EXPECT_EQ(gids, std::vector<int32_t>(ids.view().as<int32_t>(), ids.view().as<int32_t>() + T * k))
            << "E " << E << " k " << k;
        EXPECT_LE(rel_err(down(dw), host(w)), 1e-6) << "E " << E << " k " << k << " norm " << norm;
      }
    }
  }
}

// matmul_gated_and_route (a shared expert's down projection and the layer's route in one launch
// for up to 8 rows with K <= 1024; otherwise the two ops) is bit-identical to matmul_gated then
// moe_route: 1, 2 and 8 rows, 9 rows and K 2048 (the two ops), silu and gelu-tanh, 8 to 512
// experts, top 1 and top 8.
TEST_F(GpuTest, MatmulGatedAndRouteEqualsTheTwoOps) {
  struct Case { int T; int64_t K, N; int E, k; Activation act; };
  for (Case c : {Case{1, 512, 2048, 256, 8, Activation::kSilu}, Case{1, 512, 257, 8, 1, Activation::kGeluTanh},
                 Case{2, 1024, 2048, 128, 8, Activation::kSilu}, Case{8, 512, 2048, 512, 8, Activation::kSilu},
                 Case{8, 256, 1000, 64, 3, Activation::kGeluTanh}, Case{9, 512, 2048, 256, 8, Activation::kSilu},
                 Case{1, 2048, 2048, 256, 8, Activation::kSilu}}) {
    const std::string what = "T " + std::to_string(c.T) + " K " + std::to_string(c.K) + " N " + std::to_string(c.N) +
                             " E " + std::to_string(c.E) + " k " + std::to_string(c.k);
    Buffer w = random(DType::kBF16, c.N, c.K, 0.05f), g = random(c.T, c.K, 3.0f), u = random(c.T, c.K);
    Buffer logits = random(c.T, c.E, 2.0f);
    Buffer dw = up(w), dg = up(g), dg2 = up(g), du = up(u), dl = up(logits);
    Buffer out = gpu().alloc(DType::kF32, c.T, c.N), out2 = gpu().alloc(DType::kF32, c.T, c.N);
    Buffer ids = gpu().alloc(DType::kI32, c.T, c.k), ids2 = gpu().alloc(DType::kI32, c.T, c.k);
    Buffer wts = gpu().alloc(DType::kF32, c.T, c.k), wts2 = gpu().alloc(DType::kF32, c.T, c.k);
    gpu().matmul_gated_and_route(out, dg, du, dw, c.act, ids, wts, dl, c.k, true);
    gpu().matmul_gated(out2, dg2, du, dw, c.act);
    gpu().moe_route(ids2, wts2, dl, c.k, true);
    EXPECT_EQ(down(out), down(out2)) << what;
    EXPECT_EQ(down(wts), down(wts2)) << what;
    std::vector<int32_t> a(size_t(c.T * c.k)), b(a.size());
    gpu().to_host(ids, a.data());
    gpu().to_host(ids2, b.data());
    EXPECT_EQ(a, b) << what;
  }
}

// Logits with NaNs (a diverged router) still route every slot to a distinct expert in range,
// so the expert kernels never index past the table.
TEST_F(GpuTest, MoeRouteNanLogitsStayInRange) {
  const int T = 3, E = 64, k = 8;
  Buffer logits = random(T, E, 2.0f);
  float* l = logits.view().f32();
  for (int e = 0; e < E; e += 3) l[e] = std::numeric_limits<float>::quiet_NaN();  // row 0: some NaN
  for (int e = 0; e < E; ++e) l[E + e] = std::numeric_limits<float>::quiet_NaN();  // row 1: all NaN
  l[2 * E + 7] = std::numeric_limits<float>::infinity();                           // row 2: +inf
  Buffer dl = up(logits), dids = gpu().alloc(DType::kI32, T, k), dw = gpu().alloc(DType::kF32, T, k);
  gpu().moe_route(dids, dw, dl, k, true);
  std::vector<int32_t> ids(size_t(T * k));
  gpu().to_host(dids, ids.data());
  for (int t = 0; t < T; ++t) {
    std::vector<int32_t> row(ids.begin() + t * k, ids.begin() + (t + 1) * k);
    for (int32_t e : row) EXPECT_TRUE(e >= 0 && e < E) << "row " << t << " expert " << e;
    std::sort(row.begin(), row.end());
    EXPECT_EQ(std::adjacent_find(row.begin(), row.end()), row.end()) << "row " << t << ": an expert twice";
  }
}

TEST_F(GpuTest, MoeExperts) {
  struct Case { int T, E, k, H, F; DType dt; };
  for (Case c : {Case{1, 8, 3, 128, 64, DType::kBF16}, Case{5, 8, 3, 128, 64, DType::kBF16},
                 Case{40, 16, 4, 256, 96, DType::kBF16}, Case{3, 8, 2, 100, 36, DType::kBF16},
                 Case{7, 8, 3, 128, 64, DType::kF32},
                 // many pairs per expert (several passes of 8), H past the shared-memory tile
                 Case{96, 16, 8, 2056, 512, DType::kBF16},
                 // decode: far fewer pairs than experts (the grid covers only min(E, pairs) experts),
                 // and more experts than the scan's 1024 threads
                 Case{1, 256, 8, 256, 64, DType::kBF16}, Case{2, 1500, 8, 128, 64, DType::kBF16}}) {
    ExpertWeights hw, dw;
    std::vector<Buffer> keep;
    for (int e = 0; e < c.E; ++e) {
      keep.push_back(random(c.dt, c.F, c.H, 0.1f));
      hw.gate.push_back(keep.back());
      keep.push_back(up(keep.back()));
      dw.gate.push_back(keep.back());
      keep.push_back(random(c.dt, c.F, c.H, 0.1f));
      hw.up.push_back(keep.back());
      keep.push_back(up(keep.back()));
      dw.up.push_back(keep.back());
      keep.push_back(random(c.dt, c.H, c.F, 0.1f));
      hw.down.push_back(keep.back());
      keep.push_back(up(keep.back()));
      dw.down.push_back(keep.back());
    }
    Buffer x = random(c.T, c.H), logits = random(c.T, c.E);
    Buffer ids = cpu_.alloc(DType::kI32, c.T, c.k), w = cpu_.alloc(DType::kF32, c.T, c.k);
    cpu_.moe_route(ids, w, logits, c.k, true);
    Buffer dx = up(x), dids = up(ids), dwts = up(w);
    Buffer ref = cpu_.alloc(DType::kF32, c.T, c.H), out = gpu().alloc(DType::kF32, c.T, c.H);
    cpu_.moe_experts(ref, x, ids, w, hw);
    gpu().moe_experts(out, dx, dids, dwts, dw);
    EXPECT_LE(rel_err(down(out), host(ref)), 1e-5) << "T " << c.T << " E " << c.E << " H " << c.H << " F " << c.F;
  }
}

// A token's expert output does not depend on what else is in the batch: bit-identical alone in
// deterministic mode (the CUDA-core grouped kernels), within the tensor cores' 1e-5 otherwise.
// k = 10 (Qwen3-Next's top 10): more pairs a token than the per-pair down kernel has warps.
TEST_F(GpuTest, MoeExpertsBatchedEqualAlone) {
  for (auto [k, det] : {std::pair{3, true}, std::pair{10, true}, std::pair{3, false}, std::pair{10, false}}) {
    set_deterministic(gpu(), det);
    const int T = 24, E = 16, H = 1032, F = 256;
    ExpertWeights dw;
    std::vector<Buffer> keep;
    for (int e = 0; e < E; ++e) {
      for (auto* list : {&dw.gate, &dw.up}) {
        keep.push_back(up(random(DType::kBF16, F, H, 0.1f)));
        list->push_back(keep.back());
      }
      keep.push_back(up(random(DType::kBF16, H, F, 0.1f)));
      dw.down.push_back(keep.back());
    }
    Buffer x = random(T, H), logits = random(T, E);
    Buffer ids = cpu_.alloc(DType::kI32, T, k), w = cpu_.alloc(DType::kF32, T, k);
    cpu_.moe_route(ids, w, logits, k, true);
    Buffer dx = up(x), dids = up(ids), dwts = up(w);
    Buffer all = gpu().alloc(DType::kF32, T, H);
    gpu().moe_experts(all, dx, dids, dwts, dw);
    const std::vector<float> together = down(all);
    for (int t = 0; t < T; ++t) {
      Buffer one = gpu().alloc(DType::kF32, 1, H);
      gpu().moe_experts(one, dx.view().rows_slice(t, 1), dids.view().rows_slice(t, 1), dwts.view().rows_slice(t, 1),
                        dw);
      const std::vector<float> alone = down(one);
      const std::vector<float> in_batch(together.begin() + t * H, together.begin() + (t + 1) * H);
      if (det) {
        for (int c = 0; c < H; ++c)
          ASSERT_EQ(alone[size_t(c)], in_batch[size_t(c)]) << "k " << k << " token " << t << " col " << c;
      } else {
        EXPECT_LE(rel_err(in_batch, alone), 1e-5) << "k " << k << " token " << t;
      }
    }
    Buffer eight = gpu().alloc(DType::kF32, 8, H);  // 8 rows: the per-pair kernels' largest step
    gpu().moe_experts(eight, dx.view().rows_slice(8, 8), dids.view().rows_slice(8, 8), dwts.view().rows_slice(8, 8),
                      dw);
    const std::vector<float> rows = down(eight);
    const std::vector<float> in_batch(together.begin() + 8 * H, together.begin() + 16 * H);
    if (det) {
      for (int i = 0; i < 8 * H; ++i)
        ASSERT_EQ(rows[size_t(i)], in_batch[size_t(i)]) << "k " << k << " of 8 rows, element " << i;
    } else {
      EXPECT_LE(rel_err(in_batch, rows), 1e-5) << "k " << k << " of 8 rows";
    }
  }
  set_deterministic(gpu(), false);
}

#ifdef KESTREL_HAVE_CUDA
// A prefill step's BF16 experts on the tensor cores (moe_mma.cu) at each precision against the
// CPU, and at bf16x3 against the CUDA-core grouped kernels (kExact runs those): several passes of
// 32 pairs an expert, a last pass of a few, an output tile past F and H (F 96, H 2080: 33 tiles
// of 64), inputs past the 128-column staging chunk (H 2080: 16 chunks and 32), both activations.
TEST_F(GpuTest, MoeExpertsTensorCoresEachPrecision) {
  CudaOps& cuda = static_cast<CudaOps&>(gpu());
  struct Case { int T, E, k, H, F; Activation act; };
  for (Case c : {Case{96, 8, 3, 2080, 96, Activation::kSilu}, Case{45, 4, 2, 256, 512, Activation::kSilu},
                 Case{40, 16, 4, 512, 160, Activation::kGeluTanh}}) {
    ExpertWeights hw, dw;
    hw.act = dw.act = c.act;
    std::vector<Buffer> keep;
    for (int e = 0; e < c.E; ++e) {
      for (auto [host_list, dev_list, rows, cols] : {std::tuple{&hw.gate, &dw.gate, c.F, c.H},
                                                     std::tuple{&hw.up, &dw.up, c.F, c.H},
                                                     std::tuple{&hw.down, &dw.down, c.H, c.F}}) {
        keep.push_back(random(DType::kBF16, rows, cols, 0.1f));
        host_list->push_back(keep.back());
        keep.push_back(up(keep.back()));
        dev_list->push_back(keep.back());
      }
    }
    Buffer x = random(c.T, c.H), logits = random(c.T, c.E);
    Buffer ids = cpu_.alloc(DType::kI32, c.T, c.k), w = cpu_.alloc(DType::kF32, c.T, c.k);
    cpu_.moe_route(ids, w, logits, c.k, true);
    Buffer dx = up(x), dids = up(ids), dwts = up(w);
    Buffer ref = cpu_.alloc(DType::kF32, c.T, c.H);
    cpu_.moe_experts(ref, x, ids, w, hw);
    const std::vector<float> want = host(ref);
    const std::string what = "T " + std::to_string(c.T) + " H " + std::to_string(c.H) + " F " + std::to_string(c.F);
    std::vector<float> x3, exact;
    for (auto [p, tol] : {std::pair{MatmulPrecision::kBf16x3, 1e-5}, std::pair{MatmulPrecision::kBf16x2, 1e-4},
                          std::pair{MatmulPrecision::kBf16, 1e-2}, std::pair{MatmulPrecision::kExact, 1e-5}}) {
      cuda.set_matmul_precision(p);
      Buffer out = gpu().alloc(DType::kF32, c.T, c.H);
      gpu().moe_experts(out, dx, dids, dwts, dw);
      const std::vector<float> got = down(out);
      EXPECT_LE(rel_err(got, want), tol) << what << " precision " << int(p);
      if (p == MatmulPrecision::kBf16x3) x3 = got;
      if (p == MatmulPrecision::kExact) exact = got;
    }
    cuda.set_matmul_precision(MatmulPrecision::kBf16x3);
    EXPECT_LE(rel_err(x3, exact), 1e-5) << what << ": tensor cores against the CUDA-core kernels";
  }
}
#endif

// moe_experts_shared adds a shared expert's output in the routed sum's pass: bit-identical to
// moe_experts then add_mul_sigmoid (a [T, 1] or [T, H] gate) or add (no gate), which the model ran
// before, and within 1e-5 of the CPU's default (the same two ops).
TEST_F(GpuTest, MoeExpertsSharedEqualsExpertsThenAdd) {
  const int E = 16, k = 4, H = 1032, F = 256;
  ExpertWeights hw, dw;
  std::vector<Buffer> keep;
  for (int e = 0; e < E; ++e) {
    for (auto [host_list, dev_list] : {std::pair{&hw.gate, &dw.gate}, std::pair{&hw.up, &dw.up}}) {
      keep.push_back(random(DType::kBF16, F, H, 0.1f));
      host_list->push_back(keep.back());
      keep.push_back(up(keep.back()));
      dev_list->push_back(keep.back());
    }
    keep.push_back(random(DType::kBF16, H, F, 0.1f));
    hw.down.push_back(keep.back());
    keep.push_back(up(keep.back()));
    dw.down.push_back(keep.back());
  }
  for (int T : {1, 3, 20}) {
    for (int gate_cols : {0, 1, H}) {
      Buffer x = random(T, H), logits = random(T, E), s = random(T, H, 2.0f);
      Buffer g = random(T, gate_cols ? gate_cols : 1, 3.0f);
      Buffer ids = cpu_.alloc(DType::kI32, T, k), w = cpu_.alloc(DType::kF32, T, k);
      cpu_.moe_route(ids, w, logits, k, true);
      Buffer dx = up(x), dids = up(ids), dwts = up(w), ds = up(s), dg = up(g), ds2 = up(s);
      const Tensor gate = gate_cols ? dg.view() : Tensor{};
      Buffer fused = gpu().alloc(DType::kF32, T, H), two = gpu().alloc(DType::kF32, T, H);
      gpu().moe_experts_shared(fused, dx, dids, dwts, dw, ds, gate);
      gpu().moe_experts(two, dx, dids, dwts, dw);
      if (gate_cols) gpu().add_mul_sigmoid(two, ds2, gate);
      else gpu().add(two, two, ds2);
      const std::vector<float> got = down(fused);
      ASSERT_EQ(got, down(two)) << "T " << T << " gate cols " << gate_cols;
      Buffer ref = cpu_.alloc(DType::kF32, T, H);
      cpu_.moe_experts_shared(ref, x, ids, w, hw, s, gate_cols ? g.view() : Tensor{});
      EXPECT_LE(rel_err(got, host(ref)), 1e-5) << "T " << T << " gate cols " << gate_cols;
    }
  }
}

// Gemma 4's experts: GeGLU, routing weights times a per-expert scale, the experts' matrices row
// ranges of fused [E, 2F, H] gate_up and [E, H, F] down tensors (as the loader splits them).
struct GemmaExperts {
  Buffer gate_up, down, scale;        // host
  Buffer dgate_up, ddown, dscale;     // device
  ExpertWeights host, dev;
};

class MoeGemma : public GpuTest {
 protected:
  GemmaExperts experts(int E, int H, int F) {
    GemmaExperts g;
    g.gate_up = random(DType::kBF16, int64_t(E) * 2 * F, H, 0.1f);
    g.down = random(DType::kBF16, int64_t(E) * H, F, 0.1f);
    g.scale = random(DType::kF32, 1, E, 0.5f);
    for (int e = 0; e < E; ++e) g.scale.view().f32()[e] += 1.0f;
    g.dgate_up = up(g.gate_up);
    g.ddown = up(g.down);
    g.dscale = up(g.scale);
    for (auto [w, gu, dn, sc] : {std::tuple{&g.host, &g.gate_up, &g.down, &g.scale},
                                 std::tuple{&g.dev, &g.dgate_up, &g.ddown, &g.dscale}}) {
      w->act = Activation::kGeluTanh;
      w->expert_scale = sc->view();
      for (int e = 0; e < E; ++e) {
        w->gate.push_back(gu->view().rows_slice(int64_t(e) * 2 * F, F));
        w->up.push_back(gu->view().rows_slice(int64_t(e) * 2 * F + F, F));
        w->down.push_back(dn->view().rows_slice(int64_t(e) * H, H));
      }
    }
    return g;
  }
};

TEST_F(MoeGemma, GeluExpertsWithScales) {
  struct Case { int T, E, k, H, F; };
  // aligned shapes (grouped kernels) including the fixture's (H 128, F 64) and 26B-A4B-like rows
  // (H 2816 past the shared-memory tile, F 704), and an unaligned one (per-pair kernels)
  for (Case c : {Case{1, 8, 3, 128, 64}, Case{37, 8, 3, 128, 64}, Case{20, 16, 8, 2816, 704}, Case{5, 8, 2, 100, 36}}) {
    GemmaExperts g = experts(c.E, c.H, c.F);
    Buffer x = random(c.T, c.H), logits = random(c.T, c.E);
    Buffer ids = cpu_.alloc(DType::kI32, c.T, c.k), w = cpu_.alloc(DType::kF32, c.T, c.k);
    cpu_.moe_route(ids, w, logits, c.k, true);
    Buffer dx = up(x), dids = up(ids), dwts = up(w);
    Buffer ref = cpu_.alloc(DType::kF32, c.T, c.H), out = gpu().alloc(DType::kF32, c.T, c.H);
    cpu_.moe_experts(ref, x, ids, w, g.host);
    gpu().moe_experts(out, dx, dids, dwts, g.dev);
    EXPECT_LE(rel_err(down(out), host(ref)), 1e-5) << "T " << c.T << " E " << c.E << " H " << c.H << " F " << c.F;
  }
}

// GeGLU experts with scales keep the batch invariance of the SwiGLU ones: bit-identical alone in
// deterministic mode (MoeExpertsBatchedEqualAlone covers the default mode's tolerance).
TEST_F(MoeGemma, BatchedEqualAlone) {
  const int T = 24, E = 8, k = 3, H = 1032, F = 256;
  set_deterministic(gpu(), true);
  GemmaExperts g = experts(E, H, F);
  Buffer x = random(T, H), logits = random(T, E);
  Buffer ids = cpu_.alloc(DType::kI32, T, k), w = cpu_.alloc(DType::kF32, T, k);
  cpu_.moe_route(ids, w, logits, k, true);
  Buffer dx = up(x), dids = up(ids), dwts = up(w);
  Buffer all = gpu().alloc(DType::kF32, T, H);
  gpu().moe_experts(all, dx, dids, dwts, g.dev);
  const std::vector<float> together = down(all);
  for (int t = 0; t < T; ++t) {
    Buffer one = gpu().alloc(DType::kF32, 1, H);
    gpu().moe_experts(one, dx.view().rows_slice(t, 1), dids.view().rows_slice(t, 1), dwts.view().rows_slice(t, 1),
                      g.dev);
    const std::vector<float> alone = down(one);
    for (int c = 0; c < H; ++c) ASSERT_EQ(alone[size_t(c)], together[size_t(t * H + c)]) << "token " << t << " col " << c;
  }
  set_deterministic(gpu(), false);
}

}  // namespace
}  // namespace kestrel::test
