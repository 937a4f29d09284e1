// Residual-stream ops of hyper-connections: x [T, n * H] holds n streams of width H.
#include <cmath>

#include "backend/cpu/kernels.h"
#include "core/thread_pool.h"

namespace kestrel::cpu {

void streams_expand(const Tensor& out, const Tensor& y) {
  const int64_t H = y.cols, n = out.cols / H;
  KCHECK(out.rows == y.rows && out.cols == n * H);
  for (int64_t t = 0; t < y.rows; ++t) {
    for (int64_t s = 0; s < n; ++s) std::copy_n(y.f32() + t * H, H, out.f32() + t * out.cols + s * H);
  }
}

void streams_mix(const Tensor& out, const Tensor& w, const Tensor& x) {
  const int64_t H = out.cols, n = x.cols / H;
  KCHECK(x.cols == n * H && w.cols == x.cols && w.rows == x.rows && out.rows == x.rows);
  ThreadPool::global().parallel_for(x.rows, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* wr = w.f32() + t * x.cols;
      const float* xr = x.f32() + t * x.cols;
      float* o = out.f32() + t * H;
      for (int64_t i = 0; i < H; ++i) {
        double acc = 0.0;
        for (int64_t s = 0; s < n; ++s) acc += double(wr[s * H + i] * xr[s * H + i]);
        o[i] = float(acc / double(n));
      }
    }
  });
}

void streams_inject(const Tensor& x, const Tensor& y, const Tensor& w, bool accumulate) {
  const int64_t H = y.cols, n = w.cols;
  KCHECK(x.cols == n * H && x.rows == y.rows && w.rows == y.rows);
  for (int64_t t = 0; t < y.rows; ++t) {
    const float* yr = y.f32() + t * H;
    for (int64_t s = 0; s < n; ++s) {
      const float ws = w.f32()[t * n + s];
      float* xs = x.f32() + t * x.cols + s * H;
      for (int64_t i = 0; i < H; ++i) xs[i] = accumulate ? xs[i] + yr[i] * ws : yr[i] * ws;
    }
  }
}

void stream_gate(const Tensor& g, const Tensor& a, const Tensor& b) {
  const int64_t n = g.cols, H = a.cols / n;
  KCHECK(a.cols == n * H && b.cols == a.cols && g.rows == a.rows && b.rows == a.rows);
  const double inv = 1.0 / std::sqrt(double(H));
  for (int64_t t = 0; t < a.rows; ++t) {
    for (int64_t s = 0; s < n; ++s) {
      const float* as = a.f32() + t * a.cols + s * H;
      const float* bs = b.f32() + t * b.cols + s * H;
      double d = 0.0;
      for (int64_t i = 0; i < H; ++i) d += double(as[i]) * double(bs[i]);
      d *= inv;
      const double r = std::sqrt(std::max(std::fabs(d), 1e-6)) * (d > 0 ? 1.0 : d < 0 ? -1.0 : 0.0);
      g.f32()[t * n + s] = float(1.0 / (1.0 + std::exp(-r)));
    }
  }
}

}  // namespace kestrel::cpu
