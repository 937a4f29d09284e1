// CUDA vs CPU parity of the row-wise and elementwise ops over a grid of shapes.
// Tolerances: these ops do the same float arithmetic as the CPU (norms sum in double on both,
// gelu-tanh runs in double on both), so they agree to a few float ulps: relative error <= 1e-5;
// copies (slice_cols, embed_rows) are exact.
#include <cstring>
#include <limits>
#include <tuple>

#include "gpu_test_util.h"

namespace kestrel::test {
namespace {

constexpr double kTol = 1e-5;

TEST_F(GpuTest, Embed) {
  for (DType dt : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (int H : {64, 100, 256}) {
      Buffer table = random(dt, 300, H);
      Buffer dtable = up(table);
      StepPlan plan = make_plan({{0, 5}, {7, 1}, {3, 12}}, 300, rng_);
      Buffer ref = cpu_.alloc(DType::kF32, plan.n_rows(), H);
      Buffer out = gpu().alloc(DType::kF32, plan.n_rows(), H);
      cpu_.embed(ref, table, plan, 1.5f);
      gpu().begin_step(plan);
      gpu().embed(out, dtable, plan, 1.5f);
      EXPECT_LE(rel_err(down(out), host(ref)), 1e-7) << dtype_name(dt) << " H=" << H;
    }
  }
}

// The embedding fused with the first layer's norm: the same x and out bits as the device's embed
// then rms_norm (the model code swaps one for the other), within kTol of the CPU's; rows of 64 ...
// 8192 take the one launch (1 ... 16 elements a thread), 9000 the two ops.
TEST_F(GpuTest, EmbedRmsNormEqualsTheTwoOps) {
  for (DType dt : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (int H : {64, 200, 1000, 4096, 8192, 9000}) {
      for (bool weight : {false, true}) {
        for (float scale : {1.0f, 45.25f}) {
          Buffer table = random(dt, 300, H);
          Buffer w = random(1, H);
          Buffer dtable = up(table), dw = up(w);
          const Tensor wt = weight ? dw.view() : Tensor{};
          StepPlan plan = make_plan({{0, 5}, {7, 1}, {3, 12}}, 300, rng_);
          const int64_t T = plan.n_rows();
          Buffer rx = cpu_.alloc(DType::kF32, T, H), rout = cpu_.alloc(DType::kF32, T, H);
          cpu_.embed_rms_norm(rx, rout, table, plan, scale, weight ? w.view() : Tensor{}, 1e-6f);
          Buffer x1 = gpu().alloc(DType::kF32, T, H), out1 = gpu().alloc(DType::kF32, T, H);
          Buffer x2 = gpu().alloc(DType::kF32, T, H), out2 = gpu().alloc(DType::kF32, T, H);
          gpu().begin_step(plan);
          gpu().embed_rms_norm(x1, out1, dtable, plan, scale, wt, 1e-6f);
          gpu().embed(x2, dtable, plan, scale);
          gpu().rms_norm(out2, x2, wt, 1e-6f);
          const std::string at = std::string(dtype_name(dt)) + " H=" + std::to_string(H) + " w=" +
                                 std::to_string(weight) + " scale=" + std::to_string(scale);
          EXPECT_EQ(down(x1), down(x2)) << at;
          EXPECT_EQ(down(out1), down(out2)) << at;
          EXPECT_LE(rel_err(down(x1), host(rx)), 1e-7) << at;
          EXPECT_LE(rel_err(down(out1), host(rout)), kTol) << at;
        }
      }
    }
  }
}

// Rows of 64 ... 5120 take the register-staged kernels (1, 2, 4, 8 and 16 elements a thread),
// 9000 the loop kernel.
TEST_F(GpuTest, RmsNorm) {
  for (int T : {1, 7, 33}) {
    for (int H : {64, 128, 200, 1000, 4096, 5120, 9000}) {
      for (bool weight : {false, true}) {
        Buffer x = random(T, H, 3.0f);
        Buffer w = random(1, H);
        Buffer dx = up(x), dw = up(w);
        Buffer ref = cpu_.alloc(DType::kF32, T, H);
        Buffer out = gpu().alloc(DType::kF32, T, H);
        cpu_.rms_norm(ref, x, weight ? w.view() : Tensor{}, 1e-6f);
        gpu().rms_norm(out, dx, weight ? dw.view() : Tensor{}, 1e-6f);
        EXPECT_LE(rel_err(down(out), host(ref)), kTol) << T << "x" << H << " w=" << weight;
        gpu().rms_norm(dx, dx, weight ? dw.view() : Tensor{}, 1e-6f);  // in place
        EXPECT_LE(rel_err(down(dx), host(ref)), kTol) << "in place " << T << "x" << H;
      }
    }
  }
}

// The fused residual add + norm: within kTol of the CPU, and bit-identical to the device's own
// add then rms_norm (the model code swaps one for the other), out separate or aliasing x.
TEST_F(GpuTest, AddRmsNorm) {
  for (int T : {1, 7, 33}) {
    for (int H : {64, 200, 1000, 4096, 5120, 9000}) {
      for (bool weight : {false, true}) {
        Buffer res = random(T, H, 3.0f), x = random(T, H), w = random(1, H);
        const Tensor hw = weight ? w.view() : Tensor{};
        Buffer dres = up(res), dx = up(x), dw = up(w);
        const Tensor dwt = weight ? dw.view() : Tensor{};
        Buffer out = gpu().alloc(DType::kF32, T, H), ref = cpu_.alloc(DType::kF32, T, H);
        Buffer sep_res = up(res), sep_x = up(x), sep_out = gpu().alloc(DType::kF32, T, H);
        Buffer dres2 = up(res), dx2 = up(x);  // before the CPU call below updates res in place
        cpu_.add_rms_norm(res, x, hw, ref, 1e-6f);
        gpu().add_rms_norm(dres, dx, dwt, out, 1e-6f);
        gpu().add(sep_res, sep_res, sep_x);
        gpu().rms_norm(sep_out, sep_res, dwt, 1e-6f);
        EXPECT_LE(rel_err(down(dres), host(res)), kTol) << "residual " << T << "x" << H;
        EXPECT_LE(rel_err(down(out), host(ref)), kTol) << T << "x" << H << " w=" << weight;
        EXPECT_EQ(down(dres), down(sep_res)) << "residual vs add " << T << "x" << H;
        EXPECT_EQ(down(out), down(sep_out)) << "vs add + rms_norm " << T << "x" << H << " w=" << weight;
        gpu().add_rms_norm(dres2, dx2, dwt, dx2, 1e-6f);  // out aliasing x
        EXPECT_EQ(down(dx2), down(sep_out)) << "out = x " << T << "x" << H;
      }
    }
  }
}

// Head dims up to 256 take the register-staged kernels (1, 2, 4, 8 values a lane: 48 a partial
// lane), 512 the loop kernel.
TEST_F(GpuTest, HeadAndGatedRmsNorm) {
  for (int T : {1, 9}) {
    for (int hd : {32, 48, 64, 128, 256, 512}) {
      for (int heads : {1, 4, 6}) {
        Buffer x = random(T, int64_t(heads) * hd), z = random(T, int64_t(heads) * hd), w = random(1, hd);
        Buffer dx = up(x), dz = up(z), dw = up(w);
        Buffer x2 = copy(x), dx2 = up(x);
        cpu_.head_rms_norm(x, w, hd, 1e-6f);
        gpu().head_rms_norm(dx, dw, hd, 1e-6f);
        EXPECT_LE(rel_err(down(dx), host(x)), kTol) << "head " << T << " " << hd << " " << heads;
        cpu_.gated_rms_norm(x2, z, w, hd, 1e-6f);
        gpu().gated_rms_norm(dx2, dz, dw, hd, 1e-6f);
        EXPECT_LE(rel_err(down(dx2), host(x2)), kTol) << "gated " << T << " " << hd << " " << heads;
      }
    }
  }
}

TEST_F(GpuTest, AddGatesSoftcap) {
  for (int T : {1, 5, 70}) {
    for (int C : {1, 33, 512}) {
      Buffer a = random(T, C), b = random(T, C), g = random(T, 1);
      Buffer da = up(a), db = up(b), dg = up(g);
      Buffer ref = cpu_.alloc(DType::kF32, T, C), out = gpu().alloc(DType::kF32, T, C);
      cpu_.add(ref, a, b);
      gpu().add(out, da, db);
      EXPECT_LE(rel_err(down(out), host(ref)), 1e-7);
      cpu_.silu_mul(ref, a, b);
      gpu().silu_mul(out, da, db);
      EXPECT_LE(rel_err(down(out), host(ref)), kTol);
      Buffer x = copy(a), dx = up(a);
      cpu_.mul_sigmoid(x, b);
      gpu().mul_sigmoid(dx, db);
      EXPECT_LE(rel_err(down(dx), host(x)), kTol) << "mul_sigmoid full";
      cpu_.mul_sigmoid(x, g);  // [T, 1] gate, one per row
      gpu().mul_sigmoid(dx, dg);
      EXPECT_LE(rel_err(down(dx), host(x)), kTol) << "mul_sigmoid [T,1]";
      cpu_.softcap(x, 2.5f);
      gpu().softcap(dx, 2.5f);
      EXPECT_LE(rel_err(down(dx), host(x)), kTol) << "softcap";
    }
  }
}

// add_mul_sigmoid (a gated shared expert joining the routed experts' sum): bit-identical to the
// device's own mul_sigmoid then add, which the model ran before (its product must be rounded
// before the sum, not contracted into an FMA), and within kTol of the CPU; full and [T, 1] gates.
TEST_F(GpuTest, AddMulSigmoid) {
  for (int T : {1, 5, 70}) {
    for (int C : {1, 33, 2048}) {
      for (bool per_row : {false, true}) {
        Buffer y = random(T, C, 3.0f), s = random(T, C, 2.0f), g = random(T, per_row ? 1 : C, 4.0f);
        Buffer dy = up(y), ds = up(s), dg = up(g);
        Buffer dy2 = up(y), ds2 = up(s);
        gpu().mul_sigmoid(ds2, dg);
        gpu().add(dy2, dy2, ds2);
        gpu().add_mul_sigmoid(dy, ds, dg);
        EXPECT_EQ(down(dy), down(dy2)) << "vs mul_sigmoid + add " << T << "x" << C << " per_row=" << per_row;
        EXPECT_EQ(down(ds), host(s)) << "x is left as it was";
        cpu_.add_mul_sigmoid(y, s, g);
        EXPECT_LE(rel_err(down(dy), host(y)), kTol) << "vs CPU " << T << "x" << C << " per_row=" << per_row;
      }
    }
  }
}

// Gemma 4 / Qwen4-Exp elementwise ops: gelu_tanh_mul (also in place), scale, activation, mul.
TEST_F(GpuTest, GeluMulScaleActivationMul) {
  for (int T : {1, 5, 70}) {
    for (int C : {1, 33, 512}) {
      Buffer a = random(T, C, 2.0f), b = random(T, C);
      Buffer da = up(a), db = up(b);
      Buffer ref = cpu_.alloc(DType::kF32, T, C), out = gpu().alloc(DType::kF32, T, C);
      cpu_.gelu_tanh_mul(ref, a, b);
      gpu().gelu_tanh_mul(out, da, db);
      EXPECT_LE(rel_err(down(out), host(ref)), kTol) << "gelu_tanh_mul " << T << "x" << C;
      Buffer x = copy(a), dx = up(a);
      cpu_.gelu_tanh_mul(x, x, b);  // out = gate
      gpu().gelu_tanh_mul(dx, dx, db);
      EXPECT_LE(rel_err(down(dx), host(x)), kTol) << "gelu_tanh_mul in place " << T << "x" << C;
      cpu_.mul(ref, a, b);
      gpu().mul(out, da, db);
      EXPECT_EQ(down(out), host(ref)) << "mul " << T << "x" << C;
      cpu_.scale(x, 0.37f);
      gpu().scale(dx, 0.37f);
      EXPECT_EQ(down(dx), host(x)) << "scale " << T << "x" << C;
      for (Activation act : {Activation::kSilu, Activation::kSigmoid, Activation::kGeluTanh}) {
        cpu_.activation(x, act);
        gpu().activation(dx, act);
        EXPECT_LE(rel_err(down(dx), host(x)), kTol) << "activation " << int(act) << " " << T << "x" << C;
      }
    }
  }
}

TEST_F(GpuTest, SliceCols) {
  for (DType dt : {DType::kF32, DType::kBF16}) {
    for (auto [C, begin, n] : {std::tuple{96, 0, 16}, std::tuple{96, 80, 16}, std::tuple{100, 7, 33}}) {
      Buffer x = random(dt, 9, C);
      Buffer dx = up(x);
      Buffer ref = cpu_.alloc(dt, 9, n), out = gpu().alloc(dt, 9, n);
      cpu_.slice_cols(ref, x, begin);
      gpu().slice_cols(out, dx, begin);
      std::vector<uint8_t> got(ref.view().nbytes());
      gpu().to_host(out, got.data());
      EXPECT_EQ(0, std::memcmp(got.data(), ref.view().data, got.size())) << dtype_name(dt) << " begin " << begin;
    }
  }
}

// Per-column weights over column groups (hyper-connection streams), out of place and in place.
TEST_F(GpuTest, GroupRmsNorm) {
  for (int T : {1, 9}) {
    for (int group : {16, 128, 1000, 2048}) {
      for (int n : {1, 4}) {
        for (bool weight : {false, true}) {
          const int64_t C = int64_t(n) * group;
          Buffer x = random(T, C, 3.0f), w = random(1, C);
          Buffer dx = up(x), dw = up(w);
          const Tensor hw = weight ? w.view() : Tensor{}, gw = weight ? dw.view() : Tensor{};
          Buffer ref = cpu_.alloc(DType::kF32, T, C), out = gpu().alloc(DType::kF32, T, C);
          cpu_.group_rms_norm(ref, x, hw, group, 1e-6f);
          gpu().group_rms_norm(out, dx, gw, group, 1e-6f);
          const std::string what = std::to_string(T) + " rows, " + std::to_string(n) + " groups of " +
                                   std::to_string(group) + (weight ? ", weighted" : "");
          EXPECT_LE(rel_err(down(out), host(ref)), kTol) << what;
          gpu().group_rms_norm(dx, dx, gw, group, 1e-6f);
          EXPECT_LE(rel_err(down(dx), host(ref)), kTol) << "in place, " << what;
        }
      }
    }
  }
}

// Rows of a table split into shards of different dtypes and sizes, ids crossing every shard.
TEST_F(GpuTest, EmbedRows) {
  const int D = 48;
  std::vector<Buffer> host_shards, dev_shards;
  const std::vector<std::pair<DType, int>> shards = {{DType::kBF16, 50}, {DType::kF32, 7}, {DType::kF16, 30}};
  std::vector<Tensor> hs, ds;
  for (auto [dt, rows] : shards) {
    host_shards.push_back(random(dt, rows, D));
    dev_shards.push_back(up(host_shards.back()));
    hs.push_back(host_shards.back());
    ds.push_back(dev_shards.back());
  }
  const std::vector<int32_t> ids = {0, 49, 50, 56, 57, 86, 3, 3, 55, 70};
  Buffer ref = cpu_.alloc(DType::kF32, int64_t(ids.size()), D);
  Buffer out = gpu().alloc(DType::kF32, int64_t(ids.size()), D);
  cpu_.embed_rows(ref, hs, ids);
  gpu().embed_rows(out, ds, ids);
  EXPECT_EQ(down(out), host(ref));
}

TEST_F(GpuTest, GatherRows) {
  Buffer x = random(40, 96);
  Buffer dx = up(x);
  std::vector<int32_t> rows = {39, 0, 7, 7, 12};
  Buffer ref = cpu_.alloc(DType::kF32, 5, 96), out = gpu().alloc(DType::kF32, 5, 96);
  cpu_.gather_rows(ref, x, rows);
  gpu().gather_rows(out, dx, rows);
  EXPECT_EQ(down(out), host(ref));
}

// Argmax on the device picks the same index as the CPU op (and the sampler): rows of a vocabulary's
// width with planted ties, NaN and infinities (the device splits a row into ranges of 4096: the
// ties and the NaN fall in different ranges), then rows shorter than a range and one range and a bit,
// then the first rows again.
TEST_F(GpuTest, Argmax) {
  const int64_t R = 9, V = 248320;
  Buffer x = random(R, V);
  float* p = x.view().f32();
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  p[0 * V + 5] = 50, p[0 * V + 70000] = 50;           // tie: the first
  p[1 * V + 0] = nan, p[1 * V + V - 1] = 60;          // NaN first, the best last
  for (int64_t i = 0; i < V; ++i) p[2 * V + i] = nan;  // all NaN: 0
  p[3 * V + 1000] = inf, p[3 * V + 2000] = inf;       // infinities tie
  for (int64_t i = 0; i < V; ++i) p[4 * V + i] = 1.5f;  // all equal: 0
  Buffer ids = cpu_.alloc(DType::kI32, R, 1), dids = gpu().alloc(DType::kI32, R, 1);
  cpu_.argmax(ids, x);
  Buffer dx = up(x);
  gpu().argmax(dids, dx);
  std::vector<int32_t> got(static_cast<size_t>(R));
  gpu().to_host(dids, got.data());
  const int32_t* want = static_cast<const int32_t*>(ids.view().data);
  for (int64_t r = 0; r < R; ++r) EXPECT_EQ(got[size_t(r)], want[r]) << "row " << r;
  EXPECT_EQ(want[0], 5);
  EXPECT_EQ(want[1], V - 1);
  EXPECT_EQ(want[2], 0);
  EXPECT_EQ(want[3], 1000);
  EXPECT_EQ(want[4], 0);
  for (int64_t v : {7, 4096, 5000}) {
    Buffer y = random(3, v);
    float* q = y.view().f32();
    q[v - 1] = 40;                                  // row 0: the last element
    q[v + 0] = nan, q[v + v / 2] = 30, q[v + v - 1] = 30;  // row 1: NaN first, a tie
    for (int64_t i = 0; i < v; ++i) q[2 * v + i] = i < v - 1 ? nan : -inf;  // row 2: all NaN but the last
    Buffer yi = cpu_.alloc(DType::kI32, 3, 1), dyi = gpu().alloc(DType::kI32, 3, 1);
    cpu_.argmax(yi, y);
    Buffer dy = up(y);
    gpu().argmax(dyi, dy);
    std::vector<int32_t> g(3);
    gpu().to_host(dyi, g.data());
    const int32_t* w = static_cast<const int32_t*>(yi.view().data);
    for (int r = 0; r < 3; ++r) EXPECT_EQ(g[size_t(r)], w[r]) << "V " << v << " row " << r;
    EXPECT_EQ(w[0], v - 1);
    EXPECT_EQ(w[1], v / 2);
    EXPECT_EQ(w[2], v - 1);
  }
  // A row's last range to finish picks its best, found by a count each launch leaves at zero: the
  // same rows again, after launches of other shapes, give the same ids.
  for (int again = 0; again < 2; ++again) {
    Buffer dids2 = gpu().alloc(DType::kI32, R, 1);
    gpu().argmax(dids2, dx);
    std::vector<int32_t> got2(static_cast<size_t>(R));
    gpu().to_host(dids2, got2.data());
    EXPECT_EQ(got2, got) << "launch " << again + 2;
  }
}

}  // namespace
}  // namespace kestrel::test
