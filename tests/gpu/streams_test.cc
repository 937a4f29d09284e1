// CUDA vs CPU residual-stream ops of hyper-connections (Qwen4-Exp) over a grid of stream counts and
// widths. Tolerances: expand and inject are copies and single products / sums done in the same
// order as the CPU (exact); mix sums the streams' products in double in stream order on both sides
// (exact); stream_gate's dot products run in double in a different order (1e-6).
#include "gpu_test_util.h"

namespace kestrel::test {
namespace {

TEST_F(GpuTest, StreamsExpandMixInject) {
  for (int T : {1, 7, 40}) {
    for (int n : {2, 4}) {
      for (int H : {64, 100, 1024}) {
        const int64_t HC = int64_t(n) * H;
        const std::string what = std::to_string(T) + " rows, " + std::to_string(n) + " streams of " + std::to_string(H);
        Buffer y = random(T, H), x = random(T, HC), w = random(T, HC), wi = random(T, n);
        Buffer dy = up(y), dx = up(x), dw = up(w), dwi = up(wi);
        Buffer ref = cpu_.alloc(DType::kF32, T, HC), out = gpu().alloc(DType::kF32, T, HC);
        cpu_.streams_expand(ref, y);
        gpu().streams_expand(out, dy);
        EXPECT_EQ(down(out), host(ref)) << "expand, " << what;
        Buffer m = cpu_.alloc(DType::kF32, T, H), dm = gpu().alloc(DType::kF32, T, H);
        cpu_.streams_mix(m, w, x);
        gpu().streams_mix(dm, dw, dx);
        EXPECT_EQ(down(dm), host(m)) << "mix, " << what;
        for (bool accumulate : {true, false}) {
          cpu_.streams_inject(x, y, wi, accumulate);
          gpu().streams_inject(dx, dy, dwi, accumulate);
          EXPECT_EQ(down(dx), host(x)) << "inject (accumulate " << accumulate << "), " << what;
        }
      }
    }
  }
}

TEST_F(GpuTest, StreamGate) {
  for (int T : {1, 9, 33}) {
    for (int n : {2, 4}) {
      for (int H : {32, 128, 2048}) {
        Buffer a = random(T, int64_t(n) * H), b = random(T, int64_t(n) * H);
        // a few rows with tiny dot products: the signed sqrt's 1e-6 floor
        for (int64_t i = 0; i < int64_t(n) * H; ++i) b.view().f32()[i] *= 1e-5f;
        Buffer da = up(a), db = up(b);
        Buffer g = cpu_.alloc(DType::kF32, T, n), dg = gpu().alloc(DType::kF32, T, n);
        cpu_.stream_gate(g, a, b);
        gpu().stream_gate(dg, da, db);
        EXPECT_LE(rel_err(down(dg), host(g)), 1e-6) << T << " rows, " << n << " streams of " << H;
      }
    }
  }
}

}  // namespace
}  // namespace kestrel::test
