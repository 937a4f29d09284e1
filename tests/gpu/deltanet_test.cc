// CUDA vs CPU conv1d_silu and gated_delta_rule, over sequences that start mid-chunk, cross the
// 64-aligned chunk grid and decode single tokens, checking outputs and the carried states.
// Tolerances: conv1d sums in double on both sides (1e-6). The delta rule's recurrent form runs in
// double on the GPU against the CPU's chunked form in double; both round to F32 at the end (1e-5
// on outputs and states, kRecurrentTol, checked with the chunked form off). The GPU's chunked form
// (whole chunks of the grid) runs in F32: kChunkedTol below derives its bound.
#include <cstdlib>
#include <cstdio>
#include <cstring>

#include "gpu_test_util.h"

namespace kestrel::test {
namespace {

const std::vector<std::pair<int, int>> kSeqs = {{0, 100}, {3, 1}, {60, 9}, {130, 64}, {0, 1}, {64, 64}};

TEST_F(GpuTest, Conv1dSilu) {
  for (int C : {64, 200}) {
    for (int K : {2, 4}) {
      StepPlan plan = make_plan(kSeqs, 10, rng_);
      const int n_slots = int(plan.seqs.size());
      Buffer x = random(plan.n_rows(), C), w = random(C, K, 0.5f), st = random(n_slots, int64_t(C) * (K - 1));
      Buffer dx = up(x), dw = up(w), dst = up(st);
      StateLayerView cs{.conv = st, .ssm = {}}, gs{.conv = dst, .ssm = {}};
      cpu_.conv1d_silu(x, w, cs, K, plan);
      gpu().begin_step(plan);
      gpu().conv1d_silu(dx, dw, gs, K, plan);
      EXPECT_LE(rel_err(down(dx), host(x)), 1e-6) << "C " << C << " K " << K;
      EXPECT_LE(rel_err(down(dst), host(st)), 1e-6) << "state C " << C << " K " << K;
    }
  }
}

// Steps of short sequences (at most 4 rows each: decode) take the fused kernel: within 1e-6 of
// the CPU, and bit for bit what the same sequences get in a step with a long prefill beside them
// (the general path), outputs and states.
TEST_F(GpuTest, Conv1dSiluDecodeFused) {
  const std::vector<std::pair<int, int>> short_seqs = {{5, 1}, {0, 1}, {3, 4}, {9, 2}, {1, 3}};
  std::vector<std::pair<int, int>> with_long = short_seqs;
  with_long.emplace_back(0, 40);
  for (int C : {64, 200}) {
    for (int K : {2, 4}) {
      const int keep = K - 1;
      const int64_t S = int64_t(short_seqs.size());
      StepPlan fused = make_plan(short_seqs, 10, rng_), general = make_plan(with_long, 10, rng_);
      const int64_t T = fused.n_rows();
      Buffer xl = random(general.n_rows(), C), w = random(C, K, 0.5f);
      Buffer st = random(int64_t(with_long.size()), int64_t(C) * keep);
      Buffer x = host_buffer(DType::kF32, T, C);
      std::memcpy(x.view().f32(), xl.view().f32(), size_t(T * C) * 4);  // the short rows come first
      Buffer x_cpu = copy(x), st_cpu = copy(st);
      Buffer dx = up(x), dxl = up(xl), dw = up(w), dst = up(st), dst_l = up(st);
      StateLayerView cs{.conv = st_cpu, .ssm = {}}, gs{.conv = dst, .ssm = {}}, gl{.conv = dst_l, .ssm = {}};
      cpu_.conv1d_silu(x_cpu, w, cs, K, fused);
      gpu().begin_step(fused);
      gpu().conv1d_silu(dx, dw, gs, K, fused);
      gpu().begin_step(general);
      gpu().conv1d_silu(dxl, dw, gl, K, general);
      const std::vector<float> got = down(dx), got_l = down(dxl);
      EXPECT_LE(rel_err(got, host(x_cpu)), 1e-6) << "C " << C << " K " << K;
      EXPECT_TRUE(std::equal(got.begin(), got.end(), got_l.begin())) << "vs the general path, C " << C << " K " << K;
      const std::vector<float> s = down(dst), s_l = down(dst_l);
      EXPECT_LE(rel_err(s, host(st_cpu)), 1e-6) << "state C " << C << " K " << K;
      const size_t n = size_t(S * C * keep);
      EXPECT_TRUE(std::equal(s.begin(), s.begin() + long(n), s_l.begin())) << "state vs the general path";
    }
  }
}

constexpr double kRecurrentTol = 1e-5;
// The chunked form in F32 (unit roundoff u = 2^-24) against the double oracle. Per chunk every
// output and state entry is a chain of F32 sums: the k.k and q.k dots (dk terms each), the
// forward substitution (<= 64), W S and Q' S (dk each), P V' (<= 64) and K'^T V' (64), over
// F32-rounded q, k and gate factors (4 roundings). To first order the error is at most
// (3 dk + 3 * 64 + 4) u of the magnitude of the terms summed: 3.5e-5 at dk = 128, the largest dk
// here, which is the tolerance (norm-wise, outputs and states). It holds as long as T = (I - A)^-1
// stays near I and the state carried from earlier chunks, which enters with its earlier error
// times decays <= 1, does not cancel: true of random unit keys. Measured (H200, two runs):
// 2.9e-8 ... 4.2e-7 (printed as MEASURED lines; docs/cuda.md).
constexpr double kChunkedTol = (3 * 128 + 3 * 64 + 4) * 0x1p-24;

// Turns the chunked form off for the scope (KESTREL_CUDA_CHUNKED_DELTANET=0).
struct RecurrentOnly {
  RecurrentOnly() { setenv("KESTREL_CUDA_CHUNKED_DELTANET", "0", 1); }
  ~RecurrentOnly() { unsetenv("KESTREL_CUDA_CHUNKED_DELTANET"); }
};

struct GdrCase {
  int nk, nv, dk, dv;
  std::vector<std::pair<int, int>> seqs = kSeqs;  // (n_past, n_tokens)
  float decay = 1.0f;                             // scales a_neg: < 1 carries the state further
  bool tiled = false;                             // value heads in llama.cpp's tiled order
};

class DeltaRuleTest : public GpuTest {
 protected:
  struct Errors {
    double out = 0, state = 0;
  };
  // Random inputs through the CPU op and the GPU op; the GPU's relative errors.
  Errors compare(const GdrCase& c, bool recurrent_only) {
    StepPlan plan = make_plan(c.seqs, 10, rng_);
    DeltaNetConfig cfg{.n_k_heads = c.nk, .n_v_heads = c.nv, .k_head_dim = c.dk, .v_head_dim = c.dv,
                       .conv_kernel = 4};
    cfg.tiled_value_heads = c.tiled;
    const int64_t T = plan.n_rows(), S = int64_t(plan.seqs.size());
    Buffer qkv = random(T, cfg.conv_dim()), a = random(T, c.nv), b = random(T, c.nv);
    Buffer a_neg = random(1, c.nv), dt_bias = random(1, c.nv, 0.5f);
    for (int i = 0; i < c.nv; ++i) a_neg.view().f32()[i] = -std::exp(a_neg.view().f32()[i] * 0.5f) * c.decay;
    Buffer ssm = random(S, int64_t(c.nv) * c.dk * c.dv, 0.1f);
    Buffer dqkv = up(qkv), da = up(a), db = up(b), dan = up(a_neg), ddt = up(dt_bias), dssm = up(ssm);
    Buffer ref = cpu_.alloc(DType::kF32, T, int64_t(c.nv) * c.dv), out = gpu().alloc(DType::kF32, T, ref.view().cols);
    cpu_.gated_delta_rule(ref, qkv, a, b, a_neg, dt_bias, {.conv = {}, .ssm = ssm}, cfg, plan);
    gpu().begin_step(plan);
    if (recurrent_only) {
      RecurrentOnly off;
      gpu().gated_delta_rule(out, dqkv, da, db, dan, ddt, {.conv = {}, .ssm = dssm}, cfg, plan);
    } else {
      gpu().gated_delta_rule(out, dqkv, da, db, dan, ddt, {.conv = {}, .ssm = dssm}, cfg, plan);
    }
    return {rel_err(down(out), host(ref)), rel_err(down(dssm), host(ssm))};
  }
  // Both forms against the CPU: the recurrent alone within kRecurrentTol, the default dispatch
  // (chunked for whole chunks) within kChunkedTol.
  void check(const GdrCase& c) {
    const std::string what = std::to_string(c.nk) + "/" + std::to_string(c.nv) + (c.tiled ? " tiled" : "") + " heads, dk " +
                             std::to_string(c.dk) + " dv " + std::to_string(c.dv) + " decay x" +
                             std::to_string(c.decay);
    const Errors rec = compare(c, true);
    EXPECT_LE(rec.out, kRecurrentTol) << what;
    EXPECT_LE(rec.state, kRecurrentTol) << what << ": state";
    const Errors chk = compare(c, false);
    EXPECT_LE(chk.out, kChunkedTol) << what << " (chunked)";
    EXPECT_LE(chk.state, kChunkedTol) << what << ": state (chunked)";
    std::printf("MEASURED gated_delta_rule %s: recurrent out %.2e state %.2e, chunked out %.2e state %.2e\n",
                what.c_str(), rec.out, rec.state, chk.out, chk.state);
  }
};

// Long prefills (several whole chunks, starting on and off the grid) with a decode row beside them.
const std::vector<std::pair<int, int>> kLongSeqs = {{0, 320}, {37, 300}, {128, 256}, {5, 1}};

TEST_F(DeltaRuleTest, SmallHeads) { check({2, 4, 32, 32}); }
TEST_F(DeltaRuleTest, Qwen35Heads) { check({2, 4, 128, 128}); }
TEST_F(DeltaRuleTest, UnevenDims) { check({1, 3, 64, 96}); }
TEST_F(DeltaRuleTest, LongQwen35Heads) {
  check({2, 8, 128, 128, kLongSeqs});
  check({2, 8, 128, 128, kLongSeqs, 0.02f});
}
TEST_F(DeltaRuleTest, LongUnevenDims) {
  check({2, 6, 100, 80, kLongSeqs});
  check({1, 3, 64, 96, kLongSeqs, 0.02f});
  check({2, 4, 30, 40, kLongSeqs});  // dk not a multiple of 4: the recurrent form throughout
}
// The value heads in llama.cpp's tiled order (a Qwen3.5 GGUF with a block-format ssm_out): head h
// reads key head h mod nk in both forms (the CPU op's tiled order is checked against its grouped
// one in tests/unit/backend/gated_delta_rule_order_test.cc).
TEST_F(DeltaRuleTest, TiledValueHeads) {
  check({2, 8, 128, 128, kSeqs, 1.0f, true});
  check({4, 8, 64, 64, kLongSeqs, 1.0f, true});
  check({2, 6, 100, 80, kLongSeqs, 0.02f, true});
}
// Qwen3.5-9B's heads over 55 whole chunks: more than one group of chunk scratch (256 MiB).
TEST_F(DeltaRuleTest, LongPrefillCrossesScratchGroups) {
  const GdrCase c{16, 32, 128, 128, {{0, 55 * 64}}, 0.05f};
  const Errors chk = compare(c, false);
  EXPECT_LE(chk.out, kChunkedTol);
  EXPECT_LE(chk.state, kChunkedTol);
  std::printf("MEASURED gated_delta_rule 16/32 heads, 3520 tokens: chunked out %.2e state %.2e\n", chk.out,
              chk.state);
}

#ifdef KESTREL_HAVE_CUDA
// At --matmul-precision bf16 the chunked form's prep and scan run their products on the tensor
// cores with BF16 operands (gated_delta_rule_chunked_mma.cu; dk a multiple of 16, at most 128). Each
// product's operands are rounded to BF16 once (2^-9 each, so 2 * 2^-9 a term), and a chunk's
// outputs and state sit at most five products deep in those roundings: k.k^T and q.k^T (A and P;
// T = (I - A)^-1 carries A's error to first order, its scaled copy is an operand of the next),
// W = (T diag) K and U = (T diag) V, V' = U - W S, then o = Q' S + P V' and S' = K'^T V' on V',
// and the next chunk's W S and Q' S on that state (which enters with its error times decays <= 1).
// To first order the error is then at most 5 * 2 * 2^-9 of the magnitude of the terms, plus the
// F32 sums' kChunkedTol, under kChunkedTol's conditions. (The prep's gates and their running sum
// are F32 at this precision: ~64 u |gc| relative in a decay, ~2e-4 at this test's |gc| <= ~50,
// well inside the BF16 terms.)
constexpr double kChunkedBf16Tol = 10 * 0x1p-9 + kChunkedTol;

TEST_F(DeltaRuleTest, Bf16PrecisionOnTensorCores) {
  auto& cuda = static_cast<CudaOps&>(gpu());
  cuda.set_matmul_precision(MatmulPrecision::kBf16);
  const std::vector<GdrCase> cases = {{2, 8, 128, 128, kLongSeqs},
                                      {2, 8, 128, 128, kLongSeqs, 0.02f},
                                      {1, 3, 64, 96, kLongSeqs},
                                      {2, 4, 32, 40, kLongSeqs},  // a partial 32-column tile
                                      {1, 2, 64, 200, kLongSeqs},  // V's tile padded to 208 columns
                                      {4, 8, 64, 64, kLongSeqs, 1.0f, true}};
  for (const GdrCase& c : cases) {
    const Errors e = compare(c, false);
    const std::string what = "dk " + std::to_string(c.dk) + " dv " + std::to_string(c.dv);
    EXPECT_LE(e.out, kChunkedBf16Tol) << what;
    EXPECT_LE(e.state, kChunkedBf16Tol) << what << ": state";
    // BF16 operands leave errors far above the F32 kernels' (<= 4.2e-7 measured): the path ran.
    EXPECT_GT(e.out, 1e-5) << what << ": the tensor-core kernels did not run";
    std::printf("MEASURED gated_delta_rule bf16 precision, %d/%d heads, %s decay x%.2f: chunked out %.2e state %.2e\n",
                c.nk, c.nv, what.c_str(), c.decay, e.out, e.state);
  }
  cuda.set_matmul_precision(MatmulPrecision::kBf16x3);
}
#endif

// A sequence's outputs and state are the same bits alone or batched with others (decode rows,
// other prefills, chunked or not), at the default precision and at bf16 (the tensor-core prep and scan).
TEST_F(DeltaRuleTest, BatchedEqualsAlone) {
  auto check = [&](const std::string& what) {
    DeltaNetConfig cfg{.n_k_heads = 2, .n_v_heads = 4, .k_head_dim = 128, .v_head_dim = 128, .conv_kernel = 4};
    const int nv = 4, state_cols = nv * 128 * 128;
    const std::pair<int, int> target = {30, 300};
    const std::vector<std::pair<int, int>> batch = {{7, 1}, {64, 200}, target, {100, 20}};
    StepPlan alone = make_plan({target}, 10, rng_), mixed = make_plan(batch, 10, rng_);
    const int64_t T = mixed.n_rows(), target_row = mixed.seqs[2].row_begin;
    Buffer qkv = random(T, cfg.conv_dim()), a = random(T, nv), b = random(T, nv);
    Buffer a_neg = random(1, nv), dt_bias = random(1, nv, 0.5f);
    for (int i = 0; i < nv; ++i) a_neg.view().f32()[i] = -std::exp(a_neg.view().f32()[i] * 0.5f) * 0.1f;
    Buffer ssm = random(4, state_cols, 0.1f);
    Buffer dqkv = up(qkv), da = up(a), db = up(b), dan = up(a_neg), ddt = up(dt_bias);
    // batched: the target in slot 2
    Buffer dssm = up(ssm), out = gpu().alloc(DType::kF32, T, nv * 128);
    gpu().begin_step(mixed);
    gpu().gated_delta_rule(out, dqkv, da, db, dan, ddt, {.conv = {}, .ssm = dssm}, cfg, mixed);
    const std::vector<float> o_mixed = down(out), s_mixed = down(dssm);
    // alone: its rows and slot 2's state copied into slot 0
    Buffer s_one = cpu_.alloc(DType::kF32, 1, state_cols);
    std::memcpy(s_one.view().f32(), ssm.view().f32() + 2 * int64_t(state_cols), size_t(state_cols) * 4);
    Buffer dssm1 = up(s_one), out1 = gpu().alloc(DType::kF32, target.second, nv * 128);
    auto rows = [&](const Buffer& x) { return x.view().rows_slice(target_row, target.second); };
    gpu().begin_step(alone);
    gpu().gated_delta_rule(out1, rows(dqkv), rows(da), rows(db), dan, ddt, {.conv = {}, .ssm = dssm1}, cfg, alone);
    const std::vector<float> o_one = down(out1), s_alone = down(dssm1);
    const std::vector<float> o_part(o_mixed.begin() + target_row * nv * 128,
                                    o_mixed.begin() + (target_row + target.second) * nv * 128);
    const std::vector<float> s_part(s_mixed.begin() + 2 * int64_t(state_cols),
                                    s_mixed.begin() + 3 * int64_t(state_cols));
    EXPECT_EQ(o_one, o_part) << what;
    EXPECT_EQ(s_alone, s_part) << what;
  };
#ifdef KESTREL_HAVE_CUDA
  auto& cuda = static_cast<CudaOps&>(gpu());
  for (MatmulPrecision p : {MatmulPrecision::kBf16x3, MatmulPrecision::kBf16}) {
    cuda.set_matmul_precision(p);
    check(std::string("precision ") + matmul_precision_name(p));
  }
  cuda.set_matmul_precision(MatmulPrecision::kBf16x3);
#else
  check("");
#endif
}

// A decode step (one token a sequence) takes the one-token kernel, register-capped from 16
// sequences on: within kRecurrentTol of the CPU, and the same bits as the general kernel, which the
// same sequences take when a two-token sequence shares their step.
TEST_F(DeltaRuleTest, ManyDecodeSeqsMatchTheGeneralKernel) {
  DeltaNetConfig cfg{.n_k_heads = 2, .n_v_heads = 4, .k_head_dim = 128, .v_head_dim = 128, .conv_kernel = 4};
  const int nv = 4;
  const int64_t state_cols = int64_t(nv) * 128 * 128;
  for (int n : {3, 20}) {
    std::vector<std::pair<int, int>> seqs(size_t(n), {50, 1});
    check({2, 4, 128, 128, seqs, 0.1f});
    StepPlan decode = make_plan(seqs, 10, rng_);
    seqs.push_back({3, 2});
    StepPlan mixed = make_plan(seqs, 10, rng_);  // the decode rows first, as in `decode`
    const int64_t T = mixed.n_rows();
    Buffer qkv = random(T, cfg.conv_dim()), a = random(T, nv), b = random(T, nv);
    Buffer a_neg = random(1, nv), dt_bias = random(1, nv, 0.5f);
    for (int i = 0; i < nv; ++i) a_neg.view().f32()[i] = -std::exp(a_neg.view().f32()[i] * 0.5f) * 0.1f;
    Buffer ssm = random(n + 1, state_cols, 0.1f);
    Buffer dqkv = up(qkv), da = up(a), db = up(b), dan = up(a_neg), ddt = up(dt_bias);
    auto run = [&](const StepPlan& plan, int64_t rows) {
      Buffer dssm = up(ssm), out = gpu().alloc(DType::kF32, rows, int64_t(nv) * 128);
      auto first = [&](const Buffer& x) { return x.view().rows_slice(0, rows); };
      RecurrentOnly off;
      gpu().begin_step(plan);
      gpu().gated_delta_rule(out, first(dqkv), first(da), first(db), dan, ddt, {.conv = {}, .ssm = dssm}, cfg, plan);
      std::vector<float> o = down(out), st = down(dssm);
      o.resize(size_t(n) * nv * 128);
      st.resize(size_t(n) * size_t(state_cols));
      return std::pair{o, st};
    };
    const auto [o_one, s_one] = run(decode, n);
    const auto [o_gen, s_gen] = run(mixed, T);
    EXPECT_EQ(o_one, o_gen) << n << " sequences: outputs";
    EXPECT_EQ(s_one, s_gen) << n << " sequences: states";
  }
}

// A decode step's deltanet_recurrence (conv, one-token recurrence and gated norm in one launch of
// clustered blocks) gives the same bits as conv1d_silu, gated_delta_rule and gated_rms_norm in
// turn: outputs, recurrent states and conv states; grouped and tiled value heads, one to eight
// value heads a key head, 1..4 column blocks a head, the register-capped kernel from 16
// sequences on; and within kRecurrentTol of the CPU. It leaves qkv as it was (the parts convolve
// it in place), which shows the fused kernel ran. A step with a longer sequence takes the parts.
TEST_F(DeltaRuleTest, RecurrenceFusedEqualsParts) {
  struct Case {
    int nk, nv, dk, dv, n;
    bool tiled;
    bool fused;
  };
  const Case cases[] = {{2, 4, 128, 128, 1, false, true}, {2, 4, 128, 128, 3, false, true},
                        {2, 4, 128, 128, 20, false, true}, {2, 4, 128, 128, 3, true, true},
                        {3, 3, 64, 96, 2, false, true},    {1, 8, 32, 32, 2, true, true},
                        {1, 4, 64, 128, 2, false, false}};  // 4 x 4 blocks: over the cluster bound
  const float eps = 1e-6f;
  for (const Case& c : cases) {
    DeltaNetConfig cfg{.n_k_heads = c.nk, .n_v_heads = c.nv, .k_head_dim = c.dk, .v_head_dim = c.dv,
                       .conv_kernel = 4};
    cfg.tiled_value_heads = c.tiled;
    for (bool mixed : {false, true}) {
      std::vector<std::pair<int, int>> seqs;
      for (int i = 0; i < c.n; ++i) seqs.push_back({int(rng_() % 200), 1});
      if (mixed) seqs.push_back({7, 3});
      const StepPlan plan = make_plan(seqs, 10, rng_);
      const int64_t T = plan.n_rows(), S = int64_t(plan.seqs.size()), C = cfg.conv_dim();
      const int64_t width = int64_t(c.nv) * c.dv;
      Buffer qkv = random(T, C), z = random(T, width), a = random(T, c.nv), b = random(T, c.nv);
      Buffer conv_w = random(C, 4, 0.5f), norm = random(1, c.dv), a_neg = random(1, c.nv), dt_bias = random(1, c.nv, 0.5f);
      for (int i = 0; i < c.nv; ++i) a_neg.view().f32()[i] = -std::exp(a_neg.view().f32()[i] * 0.5f) * 0.1f;
      Buffer ssm = random(S, int64_t(c.nv) * c.dk * c.dv, 0.1f), conv = random(S, C * 3);
      const Buffer dz = up(z), da = up(a), db = up(b), dw = up(conv_w), dnorm = up(norm), dan = up(a_neg),
                   ddt = up(dt_bias);
      const std::string what = std::to_string(c.nk) + "/" + std::to_string(c.nv) + (c.tiled ? " tiled" : "") +
                               " heads, dk " + std::to_string(c.dk) + " dv " + std::to_string(c.dv) + ", " +
                               std::to_string(c.n) + " sequences" + (mixed ? " and a 3-token one" : "");
      // parts
      Buffer q1 = up(qkv), s1 = up(ssm), c1 = up(conv), o1 = gpu().alloc(DType::kF32, T, width);
      const StateLayerView st1{.conv = c1, .ssm = s1};
      gpu().begin_step(plan);
      gpu().conv1d_silu(q1, dw, st1, 4, plan);
      gpu().gated_delta_rule(o1, q1, da, db, dan, ddt, st1, cfg, plan);
      gpu().gated_rms_norm(o1, dz, dnorm, c.dv, eps);
      // fused
      Buffer q2 = up(qkv), s2 = up(ssm), c2 = up(conv), o2 = gpu().alloc(DType::kF32, T, width);
      gpu().begin_step(plan);
      gpu().deltanet_recurrence(o2, q2, dz, da, db, dw, dan, ddt, dnorm, eps, {.conv = c2, .ssm = s2}, cfg, plan);
      EXPECT_EQ(down(o2), down(o1)) << what << ": outputs";
      EXPECT_EQ(down(s2), down(s1)) << what << ": recurrent states";
      EXPECT_EQ(down(c2), down(c1)) << what << ": conv states";
      if (c.fused && !mixed) EXPECT_EQ(down(q2), host(qkv)) << what << ": qkv (the fused kernel leaves it)";
      else EXPECT_EQ(down(q2), down(q1)) << what << ": qkv (the parts convolve it)";
      // the CPU
      Buffer ref = cpu_.alloc(DType::kF32, T, width);
      cpu_.deltanet_recurrence(ref, qkv, z, a, b, conv_w, a_neg, dt_bias, norm, eps, {.conv = conv, .ssm = ssm},
                               cfg, plan);
      EXPECT_LE(rel_err(down(o2), host(ref)), kRecurrentTol) << what << ": against the CPU";
      EXPECT_LE(rel_err(down(s2), host(ssm)), kRecurrentTol) << what << ": states against the CPU";
    }
  }
}

// Prefill split on the 64-aligned chunk grid is bit-identical to one pass on the GPU (the whole
// chunks run the chunked form either way); a split off the grid moves tokens between the chunked
// and the recurrent forms, so it agrees to kChunkedTol.
class DeltaRuleSplitTest : public DeltaRuleTest, public ::testing::WithParamInterface<int> {};

TEST_P(DeltaRuleSplitTest, SplitOnChunkGridIsBitIdentical) {
  const int d = GetParam(), nv = 4, T = d == 32 ? 150 : 300;
  DeltaNetConfig cfg{.n_k_heads = 2, .n_v_heads = nv, .k_head_dim = d, .v_head_dim = d, .conv_kernel = 4};
  Buffer qkv = random(T, cfg.conv_dim()), a = random(T, nv), b = random(T, nv);
  Buffer a_neg = random(1, nv), dt_bias = random(1, nv);
  for (int i = 0; i < nv; ++i) a_neg.view().f32()[i] = -std::exp(a_neg.view().f32()[i] * 0.5f);
  Buffer dqkv = up(qkv), da = up(a), db = up(b), dan = up(a_neg), ddt = up(dt_bias);
  auto run = [&](const std::vector<int>& splits) {
    Buffer ssm = gpu().alloc(DType::kF32, 1, int64_t(nv) * d * d);
    Buffer out = gpu().alloc(DType::kF32, T, int64_t(nv) * d);
    int begin = 0;
    for (int n : splits) {
      StepPlan plan;
      std::vector<int32_t> toks(size_t(n), 0), blocks(size_t((begin + n + 15) / 16), 0);
      plan.add_sequence(toks.data(), n, begin, 0, blocks, false, true);
      gpu().begin_step(plan);
      gpu().gated_delta_rule(out.view().rows_slice(begin, n), dqkv.view().rows_slice(begin, n),
                             da.view().rows_slice(begin, n), db.view().rows_slice(begin, n), dan, ddt,
                             {.conv = {}, .ssm = ssm}, cfg, plan);
      begin += n;
    }
    std::vector<float> o = down(out), s = down(ssm);
    o.insert(o.end(), s.begin(), s.end());
    return o;
  };
  if (T == 150) {
    const std::vector<float> whole = run({150});
    EXPECT_EQ(run({64, 64, 22}), whole);
    EXPECT_EQ(run({128, 22}), whole);
    EXPECT_EQ(run({64, 86}), whole);
    EXPECT_LE(rel_err(run({1, 63, 70, 16}), whole), kChunkedTol);
    EXPECT_LE(rel_err(run({37, 1, 1, 111}), whole), kChunkedTol);
  } else {
    const std::vector<float> whole = run({300});
    EXPECT_EQ(run({64, 64, 172}), whole);
    EXPECT_EQ(run({128, 128, 44}), whole);
    EXPECT_EQ(run({256, 44}), whole);
    EXPECT_LE(rel_err(run({1, 63, 70, 166}), whole), kChunkedTol);
    EXPECT_LE(rel_err(run({37, 1, 1, 261}), whole), kChunkedTol);
  }
}

INSTANTIATE_TEST_SUITE_P(HeadSizes, DeltaRuleSplitTest, ::testing::Values(32, 128));

}  // namespace
}  // namespace kestrel::test
