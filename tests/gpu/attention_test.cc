// CUDA vs CPU rope and attention (GQA, sliding window, mixed prefill and decode rows): over the
// paged cache, over sliding-window rings, over KV another layer wrote (write_kv = false, or no
// step k/v at all), over per-row selections (QSA), and kv_write.
// Tolerances: rope does the CPU's arithmetic (1e-5). Attention uses an online softmax split
// over 4 warps instead of the CPU's two passes: same math, different rounding order (1e-5).
// Cache writes are copies (exact).
#include <algorithm>
#include <cstring>
#include <string>
#include <tuple>

#include "cache/model_cache.h"
#include "gpu_test_util.h"

namespace kestrel::test {
namespace {

TEST_F(GpuTest, Rope) {
  struct Case { int hd, rot, freq_dim, heads; double theta; };
  for (Case c : {Case{64, 64, 0, 4, 10000.0}, Case{64, 16, 0, 4, 10000.0}, Case{128, 32, 128, 2, 1e6},
                 Case{256, 64, 0, 3, 5e6}, Case{32, 32, 0, 1, 500.0}}) {
    StepPlan plan = make_plan({{0, 9}, {1000, 1}, {70000, 3}}, 100, rng_);
    Buffer x = random(plan.n_rows(), int64_t(c.heads) * c.hd);
    Buffer dx = up(x);
    RopeConfig rc{.theta = c.theta, .rotary_dim = c.rot, .freq_dim = c.freq_dim};
    cpu_.rope(x, c.hd, rc, plan);
    gpu().begin_step(plan);
    gpu().rope(dx, c.hd, rc, plan);
    EXPECT_LE(rel_err(down(dx), host(x)), 1e-5) << "hd " << c.hd << " rot " << c.rot;
  }
}

// Gemma 4's proportional RoPE: pairs (i, i + head_dim/2), the first rotary_dim/2 rotating.
TEST_F(GpuTest, RopeWholeHeadPairs) {
  struct Case { int hd, rot, heads; double theta; };
  for (Case c : {Case{512, 128, 2, 1e6}, Case{64, 16, 4, 1e6}, Case{256, 64, 3, 1e4}, Case{128, 128, 1, 1e4}}) {
    StepPlan plan = make_plan({{0, 9}, {1000, 1}, {70000, 3}}, 100, rng_);
    Buffer x = random(plan.n_rows(), int64_t(c.heads) * c.hd);
    Buffer dx = up(x);
    RopeConfig rc{.theta = c.theta, .rotary_dim = c.rot, .freq_dim = c.hd, .whole_head_pairs = true};
    cpu_.rope(x, c.hd, rc, plan);
    gpu().begin_step(plan);
    gpu().rope(dx, c.hd, rc, plan);
    EXPECT_LE(rel_err(down(dx), host(x)), 1e-5) << "hd " << c.hd << " rot " << c.rot;
  }
}

// qk_norm_rope's one launch is bit-identical to head_rms_norm then rope of q and of k (the ops
// the CPU and the default run): head_dim 64 ... 256 (96: a lane's three values), partial, full
// and whole-head-pair rotations, with and without the norm weights, and without k (KV-shared).
TEST_F(GpuTest, QkNormRopeEqualsNormThenRope) {
  struct Case { int hd, rot, q_heads, k_heads; bool whole, q_norm, k_norm; };
  for (Case c : {Case{256, 64, 16, 2, false, true, true}, Case{128, 128, 8, 4, false, true, true},
                 Case{256, 64, 4, 1, true, true, true}, Case{96, 64, 3, 1, false, true, false},
                 Case{64, 64, 4, 0, false, false, false}, Case{512, 128, 2, 1, true, true, true},
                 Case{32, 32, 2, 2, false, true, true}}) {
    StepPlan plan = make_plan({{0, 9}, {1000, 1}, {70000, 3}}, 100, rng_);
    const int64_t T = plan.n_rows();
    Buffer hq = random(T, int64_t(c.q_heads) * c.hd), hk = random(T, int64_t(std::max(c.k_heads, 1)) * c.hd);
    Buffer q = up(hq), q2 = up(hq), k = up(hk), k2 = up(hk);
    Buffer qn = c.q_norm ? up(random(1, c.hd)) : Buffer{}, kn = c.k_norm ? up(random(1, c.hd)) : Buffer{};
    RopeConfig rc{.theta = 1e6, .rotary_dim = c.rot, .freq_dim = c.whole ? c.hd : 0, .whole_head_pairs = c.whole};
    const Tensor none{};
    const Tensor& tk = c.k_heads ? k.view() : none;
    gpu().begin_step(plan);
    gpu().qk_norm_rope(q, c.q_norm ? qn.view() : none, tk, c.k_norm ? kn.view() : none, c.hd, 1e-6f, rc, plan);
    if (c.q_norm) gpu().head_rms_norm(q2, qn, c.hd, 1e-6f);
    gpu().rope(q2, c.hd, rc, plan);
    if (c.k_heads) {
      if (c.k_norm) gpu().head_rms_norm(k2, kn, c.hd, 1e-6f);
      gpu().rope(k2, c.hd, rc, plan);
      EXPECT_EQ(down(k), down(k2)) << "k, hd " << c.hd << " rot " << c.rot;
    }
    EXPECT_EQ(down(q), down(q2)) << "q, hd " << c.hd << " rot " << c.rot;
  }
}

// norm_rope_attention's CUDA path (q and k normed and rotated with k and v written into the cache
// in one launch, the output gate in the attention's combine kernel) is bit-identical to the ops it
// stands for run on the GPU: the output, q, k and both caches. Batches: short mixed rows (one
// split), decode rows deep in their context (several splits), a 80-row prefill chunk (the tiled
// prefill kernel, then mul_sigmoid), and 70 decode rows (one split a row by the grid's size: the
// combine kernel runs for the gate alone). Caches F32 and BF16 (at head_dim 256 the tensor-core
// decode kernel), with and without the gate and the norms, partial and full rotations, GQA groups
// of 1 to 8 query heads (the 9B's 16 / 4) and Gemma 4's pairs across the head.
TEST_F(GpuTest, NormRopeAttentionEqualsTheOps) {
  struct Case { int heads, kv, hd, rot; bool gate, norms; DType cache; bool whole = false; };
  const std::vector<Case> cases = {{16, 2, 256, 64, true, true, DType::kF32},   {16, 2, 256, 64, true, true, DType::kBF16},
                                   {8, 2, 128, 128, true, false, DType::kF32},  {4, 1, 64, 32, false, true, DType::kBF16},
                                   {4, 4, 32, 32, false, false, DType::kF32},   {6, 1, 256, 256, true, true, DType::kF32},
                                   {16, 4, 256, 64, true, true, DType::kF32},   {16, 4, 256, 64, true, true, DType::kBF16},
                                   {4, 1, 256, 256, false, true, DType::kF32},  {6, 2, 256, 128, true, false, DType::kF32},
                                   {8, 2, 256, 64, true, true, DType::kF32, true}};
  std::vector<std::pair<int, int>> many;
  for (int i = 0; i < 70; ++i) many.push_back({i * 3, 1});
  const std::vector<std::vector<std::pair<int, int>>> batches = {
      {{0, 20}, {5, 1}, {33, 1}, {17, 9}}, {{300, 1}, {1000, 1}, {5, 1}}, {{40, 80}, {7, 1}}, many};
  auto bits = [&](const Tensor& t) {
    std::vector<uint8_t> b(size_t(t.numel()) * dtype_size(t.dtype));
    gpu().to_host(t, b.data());
    return b;
  };
  for (const Case& c : cases) {
    for (const auto& seqs : batches) {
      int32_t n_blocks = 0;
      StepPlan plan = make_plan(seqs, 100, rng_, 16, &n_blocks);
      const int64_t T = plan.n_rows(), kvw = int64_t(c.kv) * c.hd, qw = int64_t(c.heads) * c.hd;
      const int64_t cache_rows = int64_t(n_blocks) * 16;
      Buffer hq = random(T, qw), hk = random(T, kvw), hv = random(T, kvw), hg = random(T, qw);
      Buffer hkc = random(c.cache, cache_rows, kvw), hvc = random(c.cache, cache_rows, kvw);
      Buffer qa = up(hq), qb = up(hq), ka = up(hk), kb = up(hk), va = up(hv), vb = up(hv), g = up(hg);
      Buffer kca = up(hkc), kcb = up(hkc), vca = up(hvc), vcb = up(hvc);
      Buffer qn = up(random(1, c.hd)), kn = up(random(1, c.hd));
      Buffer oa = gpu().alloc(DType::kF32, T, qw), ob = gpu().alloc(DType::kF32, T, qw);
      const Tensor none{};
      const Tensor& gate = c.gate ? g.view() : none;
      const Tensor& tqn = c.norms ? qn.view() : none;
      const Tensor& tkn = c.norms ? kn.view() : none;
      const RopeConfig rc{.theta = 1e7, .rotary_dim = c.rot, .freq_dim = c.whole ? c.hd : 0,
                          .whole_head_pairs = c.whole};
      const AttentionParams p{.n_heads = c.heads, .n_kv_heads = c.kv, .head_dim = c.hd,
                              .scale = 1.0f / std::sqrt(float(c.hd))};
      gpu().begin_step(plan);
      gpu().norm_rope_attention(oa, qa, tqn, ka, tkn, va, gate, 1e-6f, rc, {.k = kca, .v = vca}, p, plan);
      gpu().qk_norm_rope(qb, tqn, kb, tkn, c.hd, 1e-6f, rc, plan);
      gpu().attention(ob, qb, kb, vb, {.k = kcb, .v = vcb}, p, plan);
      if (c.gate) gpu().mul_sigmoid(ob, gate);
      const std::string what = "heads " + std::to_string(c.heads) + "/" + std::to_string(c.kv) + " hd " +
                               std::to_string(c.hd) + (c.gate ? " gate" : "") + (c.norms ? " norms" : "") +
                               (c.cache == DType::kBF16 ? " bf16 cache" : "") + " rows " + std::to_string(T);
      EXPECT_EQ(bits(oa), bits(ob)) << what << ": output";
      EXPECT_EQ(bits(qa), bits(qb)) << what << ": q";
      EXPECT_EQ(bits(ka), bits(kb)) << what << ": k";
      EXPECT_EQ(bits(kca), bits(kcb)) << what << ": k cache";
      EXPECT_EQ(bits(vca), bits(vcb)) << what << ": v cache";
    }
  }
}

TEST_F(GpuTest, Attention) {
  struct Case { int heads, kv, hd; };
  // A mixed prefill/decode batch (one split per row), and decode rows over long contexts (the
  // split-KV path: several splits per row, merged by the combine kernel).
  const std::vector<std::vector<std::pair<int, int>>> batches = {
      {{0, 20}, {5, 1}, {33, 1}, {17, 9}, {0, 1}, {100, 40}}, {{300, 1}, {1000, 1}, {5, 1}}};
  // head_dim 256 and 512 take the tiled split-KV kernel: GQA groups of 4, 8 (two blocks a KV
  // head) and 6 (a block of 4 heads and one of 2)
  const std::vector<Case> cases = {{4, 2, 32}, {4, 4, 64}, {8, 2, 128}, {4, 1, 256}, {2, 1, 80},
                                   {16, 2, 256}, {6, 1, 256}, {8, 2, 512}, {2, 2, 512}};
  for (size_t i = 0; i < cases.size() * batches.size(); ++i) {
    const Case c = cases[i % cases.size()];
    const auto& seqs = batches[i / cases.size()];
    for (int window : {0, 5, 64, 200}) {
      AttentionParams p{.n_heads = c.heads, .n_kv_heads = c.kv, .head_dim = c.hd,
                        .scale = 1.0f / std::sqrt(float(c.hd)), .window = window};
      const AttentionStep s = attention_step(seqs, p);
      const std::string what = "heads " + std::to_string(c.heads) + "/" + std::to_string(c.kv) + " hd " +
                               std::to_string(c.hd) + " window " + std::to_string(window) + " rows " +
                               std::to_string(s.rows);
      EXPECT_LE(rel_err(s.gpu, s.cpu), 1e-5) << what;
      EXPECT_EQ(s.k_gpu, s.k_cpu) << what << ": k cache";
      EXPECT_EQ(s.v_gpu, s.v_cpu) << what << ": v cache";
    }
  }
}

// The general attention path against the CPU: one batch of mixed prefill chunks (some continuing
// a cached past) and decode rows, with the cache as a ring per sequence slot (sliding layers) or
// paged blocks, the step's k/v written or not (KV-shared readers), no step k/v at all, or a
// selection of positions per row.
struct GeneralAttention {
  int heads, kv, hd;
  int window = 0;
  bool ring = false;      // the cache is a ring of ring_rows(window, 16) rows per slot
  bool write_kv = true;
  bool step_kv = true;    // false: k, v empty (every position from the cache)
  int select_cols = 0;    // > 0: a random selection of this many entries per row (-1 padded)
};

// A case and its step's row count, for failure messages.
std::string describe(const GeneralAttention& c, int64_t rows) {
  return "heads " + std::to_string(c.heads) + "/" + std::to_string(c.kv) + " hd " + std::to_string(c.hd) + " window " +
         std::to_string(c.window) + (c.ring ? " ring" : "") + (c.write_kv ? "" : " no-write") +
         (c.step_kv ? "" : " cache-only") + " select " + std::to_string(c.select_cols) + " rows " +
         std::to_string(rows);
}

class AttentionGeneral : public GpuTest {
 protected:
  void check(const GeneralAttention& c, const std::vector<std::pair<int, int>>& seqs) {
    int32_t n_blocks = 0;
    StepPlan plan = make_plan(seqs, 100, rng_, 16, &n_blocks);
    const int64_t T = plan.n_rows(), kvw = int64_t(c.kv) * c.hd, qw = int64_t(c.heads) * c.hd;
    const int rr = c.ring ? ring_rows(c.window, 16) : 0;
    const int64_t cache_rows = c.ring ? int64_t(seqs.size()) * rr : int64_t(n_blocks) * 16;
    Buffer kc = random(cache_rows, kvw), vc = random(cache_rows, kvw);
    Buffer dkc = up(kc), dvc = up(vc);
    Buffer q = random(T, qw), k = random(T, kvw), v = random(T, kvw);
    Buffer dq = up(q), dk = up(k), dv = up(v);
    Buffer sel, dsel;
    if (c.select_cols > 0) {
      sel = cpu_.alloc(DType::kI32, T, c.select_cols);
      for (int64_t r = 0; r < T; ++r) {
        const int pos = plan.positions[size_t(r)];
        std::vector<int32_t> all(size_t(pos) + 1);
        std::iota(all.begin(), all.end(), 0);
        std::shuffle(all.begin(), all.end(), rng_);
        all.resize(std::min<size_t>(all.size(), size_t(c.select_cols) - 2));  // at least two -1 entries
        all.resize(size_t(c.select_cols), -1);
        std::shuffle(all.begin(), all.end(), rng_);
        std::copy(all.begin(), all.end(), sel.view().as<int32_t>() + r * c.select_cols);
      }
      dsel = up(sel);
    }
    Buffer ref = cpu_.alloc(DType::kF32, T, qw), out = gpu().alloc(DType::kF32, T, qw);
    AttentionParams p{.n_heads = c.heads, .n_kv_heads = c.kv, .head_dim = c.hd, .scale = 1.0f / std::sqrt(float(c.hd)),
                      .window = c.window, .write_kv = c.write_kv};
    const Tensor hk = c.step_kv ? k.view() : Tensor{}, hv = c.step_kv ? v.view() : Tensor{};
    const Tensor gk = c.step_kv ? dk.view() : Tensor{}, gv = c.step_kv ? dv.view() : Tensor{};
    p.select = sel.view();
    cpu_.attention(ref, q, hk, hv, {.k = kc, .v = vc, .ring_rows = rr}, p, plan);
    p.select = dsel.view();
    gpu().begin_step(plan);
    gpu().attention(out, dq, gk, gv, {.k = dkc, .v = dvc, .ring_rows = rr}, p, plan);
    const std::string what = describe(c, T);
    EXPECT_LE(rel_err(down(out), host(ref)), 1e-5) << what;
    EXPECT_EQ(down(dkc), host(kc)) << what << ": k cache";
    EXPECT_EQ(down(dvc), host(vc)) << what << ": v cache";
  }
};

// Prefill chunks longer than the ring (the step's own positions come from k/v), chunks continuing
// a past, decode rows; slots 0..5.
const std::vector<std::vector<std::pair<int, int>>> kGeneralBatches = {
    {{0, 70}, {5, 1}, {40, 1}, {17, 9}, {0, 1}, {100, 40}}, {{300, 1}, {1000, 1}, {5, 1}, {33, 2}}};

TEST_F(AttentionGeneral, RingCache) {
  for (const auto& seqs : kGeneralBatches) {
    for (int window : {5, 16, 40}) {
      for (auto [heads, kv, hd] : {std::tuple{4, 2, 32}, std::tuple{8, 1, 256}, std::tuple{2, 2, 80}}) {
        check({.heads = heads, .kv = kv, .hd = hd, .window = window, .ring = true}, seqs);
        check({.heads = heads, .kv = kv, .hd = hd, .window = window, .ring = true, .write_kv = false}, seqs);
      }
    }
  }
}

TEST_F(AttentionGeneral, SharedKv) {
  for (const auto& seqs : kGeneralBatches) {
    for (int window : {0, 16}) {
      for (auto [heads, kv, hd] : {std::tuple{4, 2, 32}, std::tuple{4, 1, 512}, std::tuple{4, 2, 64}}) {
        check({.heads = heads, .kv = kv, .hd = hd, .window = window, .write_kv = false}, seqs);
        check({.heads = heads, .kv = kv, .hd = hd, .window = window, .write_kv = false, .step_kv = false}, seqs);
      }
    }
  }
}

TEST_F(AttentionGeneral, Selection) {
  for (const auto& seqs : kGeneralBatches) {
    for (int cols : {3, 19, 200}) {
      for (auto [heads, kv, hd] : {std::tuple{4, 2, 64}, std::tuple{8, 2, 128}}) {
        check({.heads = heads, .kv = kv, .hd = hd, .select_cols = cols}, seqs);
        check({.heads = heads, .kv = kv, .hd = hd, .write_kv = false, .select_cols = cols}, seqs);
      }
    }
  }
}

// A BF16 KV cache (Ops::set_kv_cache_bf16) attends what an F32 cache does when every key and
// value — the cache's and the step's — is rounded to BF16 beforehand, and the caches hold the same
// values after the step. Bit for bit where both run the same arithmetic: the general path (rings,
// KV-shared readers with and without the step's k/v) and the tiled prefill kernel; the split-KV
// kernel's lanes hold BF16 dims in pairs (F32: one per 32) and take twice the keys a group, a
// different summation order: 1e-6 there; at head_dim 256 the BF16 cache's decode rows take the
// tensor-core kernel (q and p in three BF16 terms each: F32's rounding, so the same 1e-6). Against
// the CPU oracle over the same BF16 cache: 1e-5, as the F32 tests. And kv_write stores what the
// CPU's does. Cases as GeneralAttention's, without selections.

class AttentionBf16Cache : public GpuTest {
 protected:
  static std::vector<float> rounded(const Tensor& t) {
    std::vector<float> v(t.f32(), t.f32() + t.numel());
    for (float& x : v) x = bf16_to_f32(f32_to_bf16(x));
    return v;
  }
  Buffer host_f32(const std::vector<float>& v, int64_t rows, int64_t cols) {
    Buffer b = host_buffer(DType::kF32, rows, cols);
    std::copy(v.begin(), v.end(), b.view().f32());
    return b;
  }
  Buffer host_bf16(const std::vector<float>& v, int64_t rows, int64_t cols) {
    Buffer b = host_buffer(DType::kBF16, rows, cols);
    for (size_t i = 0; i < v.size(); ++i) b.view().as<uint16_t>()[i] = f32_to_bf16(v[i]);
    return b;
  }
  std::vector<float> down_bf16(const Tensor& dev) {
    std::vector<uint16_t> raw(size_t(dev.numel()));
    gpu().to_host(dev, raw.data());
    std::vector<float> v(raw.size());
    for (size_t i = 0; i < raw.size(); ++i) v[i] = bf16_to_f32(raw[i]);
    return v;
  }

  void check(const GeneralAttention& c, const std::vector<std::pair<int, int>>& seqs) {
    ASSERT_EQ(c.select_cols, 0) << "selections are not among these cases";
    int32_t n_blocks = 0;
    StepPlan plan = make_plan(seqs, 100, rng_, 16, &n_blocks);
    const int64_t T = plan.n_rows(), kvw = int64_t(c.kv) * c.hd, qw = int64_t(c.heads) * c.hd;
    const int rr = c.ring ? ring_rows(c.window, 16) : 0;
    const int64_t cache_rows = c.ring ? int64_t(seqs.size()) * rr : int64_t(n_blocks) * 16;
    Buffer q = random(T, qw), k = random(T, kvw), v = random(T, kvw), kc = random(cache_rows, kvw),
           vc = random(cache_rows, kvw);
    const std::vector<float> kcr = rounded(kc), vcr = rounded(vc);
    Buffer dq = up(q);
    // the F32 cache over rounded keys and values
    Buffer fk = up(host_f32(rounded(k), T, kvw)), fv = up(host_f32(rounded(v), T, kvw));
    Buffer fkc = up(host_f32(kcr, cache_rows, kvw)), fvc = up(host_f32(vcr, cache_rows, kvw));
    // the BF16 cache (the same cached values), the step's k/v unrounded
    Buffer bk = up(k), bv = up(v);
    Buffer bkc = up(host_bf16(kcr, cache_rows, kvw)), bvc = up(host_bf16(vcr, cache_rows, kvw));
    AttentionParams p{.n_heads = c.heads, .n_kv_heads = c.kv, .head_dim = c.hd, .scale = 1.0f / std::sqrt(float(c.hd)),
                      .window = c.window, .write_kv = c.write_kv};
    Buffer out_f = gpu().alloc(DType::kF32, T, qw), out_b = gpu().alloc(DType::kF32, T, qw);
    gpu().begin_step(plan);
    gpu().attention(out_f, dq, c.step_kv ? fk.view() : Tensor{}, c.step_kv ? fv.view() : Tensor{},
                    {.k = fkc, .v = fvc, .ring_rows = rr}, p, plan);
    gpu().attention(out_b, dq, c.step_kv ? bk.view() : Tensor{}, c.step_kv ? bv.view() : Tensor{},
                    {.k = bkc, .v = bvc, .ring_rows = rr}, p, plan);
    const std::string what = describe(c, T);
    const std::vector<float> of = down(out_f), ob = down(out_b);
    int max_rows = 0;
    for (auto [past, n] : seqs) max_rows = std::max(max_rows, n);
    const bool split_kv = c.write_kv && c.step_kv && !c.ring &&
                          !(max_rows >= 64 && (c.hd == 64 || c.hd == 128 || c.hd == 256));
    if (split_kv) EXPECT_LE(rel_err(ob, of), 1e-6) << what;
    else EXPECT_EQ(0, std::memcmp(of.data(), ob.data(), of.size() * sizeof(float))) << what;
    // the CPU oracle over a BF16 cache of the same contents
    Buffer ck = host_bf16(kcr, cache_rows, kvw), cv = host_bf16(vcr, cache_rows, kvw);
    Buffer ref = cpu_.alloc(DType::kF32, T, qw);
    cpu_.attention(ref, q, c.step_kv ? k.view() : Tensor{}, c.step_kv ? v.view() : Tensor{},
                   {.k = ck, .v = cv, .ring_rows = rr}, p, plan);
    EXPECT_LE(rel_err(ob, host(ref)), 1e-5) << what << ": vs the CPU";
    EXPECT_EQ(down_bf16(bkc), down(fkc)) << what << ": k cache";
    EXPECT_EQ(down_bf16(bvc), down(fvc)) << what << ": v cache";
    // and kv_write alone into the BF16 cache stores what the CPU's BF16 kv_write does
    if (!c.step_kv) return;
    Buffer hkc = host_bf16(kcr, cache_rows, kvw), hvc = host_bf16(vcr, cache_rows, kvw);
    Buffer gkc = up(hkc), gvc = up(hvc);
    cpu_.kv_write({.k = hkc, .v = hvc, .ring_rows = rr}, k, v, plan);
    gpu().kv_write({.k = gkc, .v = gvc, .ring_rows = rr}, bk, bv, plan);
    std::vector<uint16_t> got(size_t(hkc.view().numel()));
    gpu().to_host(gkc.view(), got.data());
    EXPECT_EQ(0, std::memcmp(got.data(), hkc.view().data, got.size() * 2)) << what << ": kv_write k";
    gpu().to_host(gvc.view(), got.data());
    EXPECT_EQ(0, std::memcmp(got.data(), hvc.view().data, got.size() * 2)) << what << ": kv_write v";
  }
};

TEST_F(AttentionBf16Cache, EqualsF32CacheOfRoundedRows) {
  const std::vector<std::vector<std::pair<int, int>>> batches = {
      {{0, 20}, {5, 1}, {33, 1}, {17, 9}, {0, 1}, {100, 40}},  // one split per row
      {{300, 1}, {1000, 1}, {5, 1}},                           // split-KV decode
      {{0, 100}, {40, 1}},                                     // the tiled prefill kernel (>= 64 rows)
      {{130, 70}, {3, 1}},
      {{2500, 1}, {63, 1}, {64, 1}, {200, 1}}};  // many 64-key tiles, and a split of exactly one
  for (const auto& seqs : batches) {
    // head_dim 256 takes the tensor-core split-KV kernel (attention_mma.cu) for decode rows: GQA
    // groups of 4, 8 (one block), 6 and 12 (a block of 8 heads and one of 4)
    for (auto [heads, kv, hd] : {std::tuple{4, 2, 32}, std::tuple{8, 2, 128}, std::tuple{4, 1, 256}, std::tuple{2, 1, 80},
                                 std::tuple{4, 2, 512}, std::tuple{16, 2, 256}, std::tuple{6, 1, 256},
                                 std::tuple{24, 2, 256}}) {
      for (int window : {0, 40}) check({.heads = heads, .kv = kv, .hd = hd, .window = window}, seqs);
      check({.heads = heads, .kv = kv, .hd = hd, .window = 16, .ring = true}, seqs);
      check({.heads = heads, .kv = kv, .hd = hd, .window = 16, .ring = true, .write_kv = false}, seqs);
      check({.heads = heads, .kv = kv, .hd = hd, .write_kv = false}, seqs);
      check({.heads = heads, .kv = kv, .hd = hd, .write_kv = false, .step_kv = false}, seqs);
    }
  }
}

// kv_write: paged blocks, and rings that keep only each sequence's last ring_rows positions.
TEST_F(GpuTest, KvWrite) {
  for (bool ring : {false, true}) {
    int32_t n_blocks = 0;
    StepPlan plan = make_plan({{0, 70}, {5, 1}, {40, 3}, {0, 20}}, 100, rng_, 16, &n_blocks);
    const int rr = ring ? ring_rows(16, 16) : 0;
    const int64_t rows = ring ? 4 * int64_t(rr) : int64_t(n_blocks) * 16, w = 96;
    Buffer kc = random(rows, w), vc = random(rows, w), k = random(plan.n_rows(), w), v = random(plan.n_rows(), w);
    Buffer dkc = up(kc), dvc = up(vc), dk = up(k), dv = up(v);
    cpu_.kv_write({.k = kc, .v = vc, .ring_rows = rr}, k, v, plan);
    gpu().begin_step(plan);
    gpu().kv_write({.k = dkc, .v = dvc, .ring_rows = rr}, dk, dv, plan);
    EXPECT_EQ(down(dkc), host(kc)) << (ring ? "ring" : "paged");
    EXPECT_EQ(down(dvc), host(vc)) << (ring ? "ring" : "paged");
  }
}

}  // namespace
}  // namespace kestrel::test
