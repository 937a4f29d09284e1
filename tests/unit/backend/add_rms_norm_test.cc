// add_rms_norm (the residual add fused with the next RMSNorm) on the CPU oracle is bit-identical
// to add followed by rms_norm, in f32 and in the f64 oracle mode, with and without a weight and
// with out aliasing x: the model code may swap one for the other without moving a logit.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "backend/cpu/cpu_ops.h"
#include "ops/ops.h"

namespace kestrel::test {
namespace {

void fill(const Tensor& t, std::mt19937& rng, float scale) {
  std::normal_distribution<double> d(0.0, scale);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (t.dtype == DType::kF64) {
      t.as<double>()[i] = d(rng);
    } else {
      t.f32()[i] = float(d(rng));
    }
  }
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data, b.data, a.nbytes()) == 0;
}

TEST(AddRmsNorm, BitIdenticalToAddThenRmsNorm) {
  for (DType act : {DType::kF32, DType::kF64}) {
    CpuOps ops(act);
    std::mt19937 rng(11);
    for (int T : {1, 5, 17}) {
      for (int H : {8, 100, 1024}) {
        for (bool weight : {false, true}) {
          for (bool out_is_x : {false, true}) {
            Buffer res = ops.alloc(act, T, H), x = ops.alloc(act, T, H), w = ops.alloc(DType::kF32, 1, H);
            fill(res, rng, 3.0f);
            fill(x, rng, 1.0f);
            fill(w, rng, 1.0f);
            const Tensor wt = weight ? w.view() : Tensor{};
            // Reference: the two separate ops on copies.
            Buffer res_ref = ops.alloc(act, T, H), x_ref = ops.alloc(act, T, H), out_ref = ops.alloc(act, T, H);
            std::memcpy(res_ref.view().data, res.view().data, res.view().nbytes());
            std::memcpy(x_ref.view().data, x.view().data, x.view().nbytes());
            ops.add(res_ref, res_ref, x_ref);
            ops.rms_norm(out_ref, res_ref, wt, 1e-6f);

            Buffer out = ops.alloc(act, T, H);
            const Tensor o = out_is_x ? x.view() : out.view();
            ops.add_rms_norm(res, x, wt, o, 1e-6f);
            EXPECT_TRUE(same_bytes(res, res_ref)) << dtype_name(act) << " residual " << T << "x" << H;
            EXPECT_TRUE(same_bytes(o, out_ref))
                << dtype_name(act) << " out " << T << "x" << H << " w=" << weight << " out_is_x=" << out_is_x;
          }
        }
      }
    }
  }
}

TEST(AddRmsNorm, RefusesOutAliasingResidual) {
  CpuOps ops;
  Buffer res = ops.alloc(DType::kF32, 2, 8), x = ops.alloc(DType::kF32, 2, 8);
  EXPECT_DEATH(ops.add_rms_norm(res, x, Tensor{}, res, 1e-6f), "out must not be the residual");
}

}  // namespace
}  // namespace kestrel::test
