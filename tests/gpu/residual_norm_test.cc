// The ResidualNorm ops (ops.h) on CUDA. A one-row step folds the norm between two sub-layers into
// their GEMVs: the producer adds its product into the residual and leaves the sums of squares, the
// consumer normalizes the residual as it loads it. Checked: the folded ops give the bits of the
// unfolded ones (matmul, residual_norm's one kernel, matmul_multi on the stored rows), a row in a
// batch (no folding) has the bits it has alone (folded), and both are within 1e-5 of the CPU's
// add_rms_norm path.
#include "gpu_test_util.h"

namespace kestrel::test {
namespace {

class ResidualNormTest : public GpuTest {
 protected:
  // One boundary between sub-layers: residual x0 [T, H], the last activations o [T, K] and the
  // output projection wo [H, K] of the first; the norm's weight [1, H]; the next one's
  // projections wa [Na, H], wb [Nb, H].
  struct Inputs {
    Buffer x0, o, wo, norm, wa, wb;
  };
  struct Outputs {
    std::vector<float> residual, h, a, b;
    bool left = false;  // the producer left the norm to the consumer
  };

  Inputs make(DType dt, int64_t T, int64_t H, int64_t K, int64_t Na, int64_t Nb) {
    Inputs in{random(T, H), random(T, K), random(dt, H, K, 0.05f), random(1, H, 0.5f), random(dt, Na, H, 0.05f),
              random(dt, Nb, H, 0.05f)};
    for (int64_t i = 0; i < H; ++i) in.norm.view().f32()[i] += 1.0f;
    return in;
  }

  // The boundary on `ops` over rows [r0, r0 + T) of the inputs. fold: matmul_residual and
  // matmul_multi_normed; else Ops' defaults for them (matmul, residual_norm, matmul_multi).
  Outputs run(Ops& ops, const Inputs& in, int64_t r0, int64_t T, bool fold) {
    const int64_t H = in.x0.view().cols, K = in.o.view().cols;
    Buffer x = ops.upload(in.x0.view().rows_slice(r0, T)), o = ops.upload(in.o.view().rows_slice(r0, T));
    Buffer wo = ops.upload(in.wo), norm = ops.upload(in.norm), wa = ops.upload(in.wa), wb = ops.upload(in.wb);
    Buffer y = ops.alloc(DType::kF32, T, H), h = ops.alloc(DType::kF32, T, H);
    Buffer stats = ops.alloc(DType::kF64, T, residual_norm_groups(H));
    Buffer a = ops.alloc(DType::kF32, T, in.wa.view().rows), b = ops.alloc(DType::kF32, T, in.wb.view().rows);
    ResidualNorm rn{.residual = x, .w = norm, .out = h, .stats = stats, .eps = 1e-6f};
    const MatmulTarget proj[] = {{a, wa}, {b, wb}};
    Outputs out;
    if (fold) {
      ops.matmul_residual(rn, y, o, wo);
      out.left = !rn.materialized;
      ops.matmul_multi_normed(rn, proj);
    } else {
      ops.Ops::matmul_residual(rn, y, o, wo);
      ops.Ops::matmul_multi_normed(rn, proj);
    }
    auto get = [&](const Tensor& t) {
      std::vector<float> v(size_t(t.numel()));
      ops.to_host(t, v.data());
      return v;
    };
    (void)K;
    out.residual = get(x);
    out.h = get(h);
    out.a = get(a);
    out.b = get(b);
    return out;
  }
};

template <typename T>
std::vector<T> rows_of(const std::vector<T>& v, int64_t cols, int64_t r0, int64_t n) {
  return std::vector<T>(v.begin() + r0 * cols, v.begin() + (r0 + n) * cols);
}

TEST_F(ResidualNormTest, FoldedOneRowHasTheBitsOfTheOpsItReplaces) {
  struct Shape {
    int64_t H, K;
    bool folds;  // the producer's GEMV takes H (a whole number of its blocks)
  };
  // 4096 x 4096: the deep one-row GEMV (16 columns a block); 4096 x 12288 likewise; 8192: the
  // 32-column blocks; 2064: deep, 16 | 2064; 5136 = 16 * 321: 32-column blocks do not divide it,
  // so the producer does not fold; 1000: not a whole number of groups (the last is padded).
  for (const Shape s : {Shape{4096, 4096, true}, Shape{4096, 12288, true}, Shape{8192, 1024, true},
                        Shape{2064, 512, true}, Shape{5136, 512, false}, Shape{1000, 256, false}}) {
    for (DType dt : {DType::kBF16, DType::kF32}) {
      const Inputs in = make(dt, 1, s.H, s.K, 1024, 40);
      const Outputs folded = run(gpu(), in, 0, 1, true);
      const Outputs parts = run(gpu(), in, 0, 1, false);
      const std::string at = std::string(dtype_name(dt)) + " H=" + std::to_string(s.H) + " K=" + std::to_string(s.K);
      EXPECT_EQ(folded.left, s.folds) << at;
      EXPECT_EQ(folded.residual, parts.residual) << at;
      EXPECT_EQ(folded.h, parts.h) << at << ": the consumer's kernel stores the rows it normalizes";
      EXPECT_EQ(folded.a, parts.a) << at;
      EXPECT_EQ(folded.b, parts.b) << at;
      const Outputs ref = run(cpu_, in, 0, 1, false);
      EXPECT_LE(rel_err(folded.residual, ref.residual), 1e-5) << at;
      EXPECT_LE(rel_err(folded.h, ref.h), 1e-5) << at;
      EXPECT_LE(rel_err(folded.a, ref.a), 1e-5) << at;
      EXPECT_LE(rel_err(folded.b, ref.b), 1e-5) << at;
    }
  }
}

// Deterministic mode's promise at this boundary: three rows together (one norm kernel, the R-row
// GEMVs) give each row the bits it has alone (the folded one-row kernels).
TEST_F(ResidualNormTest, RowsBatchedHaveTheirBitsAlone) {
  const int64_t T = 3, H = 4096;
  const Inputs in = make(DType::kBF16, T, H, 4096, 512, 48);
  const Outputs together = run(gpu(), in, 0, T, true);
  EXPECT_FALSE(together.left);
  for (int64_t r = 0; r < T; ++r) {
    const Outputs alone = run(gpu(), in, r, 1, true);
    EXPECT_TRUE(alone.left);
    EXPECT_EQ(alone.residual, rows_of(together.residual, H, r, 1)) << "row " << r;
    EXPECT_EQ(alone.h, rows_of(together.h, H, r, 1)) << "row " << r;
    EXPECT_EQ(alone.a, rows_of(together.a, 512, r, 1)) << "row " << r;
    EXPECT_EQ(alone.b, rows_of(together.b, 48, r, 1)) << "row " << r;
  }
}

// gated_mlp_residual as both ends: the norm of `in` folded into the gate and up GEMVs, the down
// projection into the next residual, against gated_mlp and residual_norm on stored rows; F =
// 12288 takes the pair kernel and a one-row down GEMV, F = 512 matmul_multi and the down GEMV
// that forms act(g) * u as it loads (K <= 1024).
TEST_F(ResidualNormTest, GatedMlpFoldsBothEnds) {
  const int64_t H = 2048;
  for (int64_t F : {int64_t(512), int64_t(12288)}) {
    for (Activation act : {Activation::kSilu, Activation::kGeluTanh}) {
      const Inputs in = make(DType::kBF16, 1, H, 1024, 256, 16);
      Buffer wg = random(DType::kBF16, F, H, 0.05f), wu = random(DType::kBF16, F, H, 0.05f);
      Buffer wd = random(DType::kBF16, H, F, 0.05f), norm2 = random(1, H, 0.5f);
      auto chain = [&](bool fold) {
        Buffer x = up(in.x0), o = up(in.o), wo = up(in.wo), norm = up(in.norm), wa = up(in.wa), wb = up(in.wb);
        Buffer dwg = up(wg), dwu = up(wu), dwd = up(wd), dnorm2 = up(norm2);
        Buffer y = gpu().alloc(DType::kF32, 1, H), h = gpu().alloc(DType::kF32, 1, H);
        Buffer stats = gpu().alloc(DType::kF64, 1, residual_norm_groups(H));
        Buffer g = gpu().alloc(DType::kF32, 1, F), u = gpu().alloc(DType::kF32, 1, F);
        Buffer a = gpu().alloc(DType::kF32, 1, 256), b = gpu().alloc(DType::kF32, 1, 16);
        ResidualNorm first{.residual = x, .w = norm, .out = h, .stats = stats, .eps = 1e-6f};
        ResidualNorm second{.residual = x, .w = dnorm2, .out = h, .stats = stats, .eps = 1e-6f};
        const MatmulTarget proj[] = {{a, wa}, {b, wb}};
        std::vector<bool> left;
        if (fold) {
          gpu().matmul_residual(first, y, o, wo);
          left.push_back(!first.materialized);
          gpu().gated_mlp_residual(y, first, dwg, dwu, dwd, act, g, u, &second);
          left.push_back(!second.materialized);
          gpu().matmul_multi_normed(second, proj);
        } else {
          gpu().Ops::matmul_residual(first, y, o, wo);
          gpu().Ops::gated_mlp_residual(y, first, dwg, dwu, dwd, act, g, u, &second);
          gpu().Ops::matmul_multi_normed(second, proj);
        }
        return std::tuple{down(x), down(h), down(a), down(b), left};
      };
      const auto [x1, h1, a1, b1, left] = chain(true);
      [[maybe_unused]] const auto [x2, h2, a2, b2, unused] = chain(false);
      const std::string at = std::string(act == Activation::kSilu ? "silu" : "gelu") + " F=" + std::to_string(F);
      EXPECT_EQ(left, (std::vector<bool>{true, true})) << at;
      EXPECT_EQ(x1, x2) << at;
      EXPECT_EQ(h1, h2) << at;
      EXPECT_EQ(a1, a2) << at;
      EXPECT_EQ(b1, b2) << at;
    }
  }
}

}  // namespace
}  // namespace kestrel::test
