// Residual-stream ops of hyper-connections: x [T, n * H] holds n streams of width H.
#include <cmath>

#include "backend/cpu/kernels.h"
#include "core/thread_pool.h"

namespace kestrel::cpu {

void streams_expand(const Tensor& out, const Tensor& y) {
  const int64_t H = y.cols, n = out.cols / H;
  KCHECK(out.rows == y.rows && out.cols == n * H);
  with_act(y, [&]<typename A>() {
    for (int64_t t = 0; t < y.rows; ++t) {
      for (int64_t s = 0; s < n; ++s) std::copy_n(act<A>(y) + t * H, H, act<A>(out) + t * out.cols + s * H);
    }
  });
}

void streams_mix(const Tensor& out, const Tensor& w, const Tensor& x) {
  const int64_t H = out.cols, n = x.cols / H;
  KCHECK(x.cols == n * H && w.cols == x.cols && w.rows == x.rows && out.rows == x.rows);
  with_act(x, [&]<typename A>() {
    ThreadPool::global().parallel_for(x.rows, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const A* wr = act<A>(w) + t * x.cols;
        const A* xr = act<A>(x) + t * x.cols;
        A* o = act<A>(out) + t * H;
        for (int64_t i = 0; i < H; ++i) {
          double acc = 0.0;
          for (int64_t s = 0; s < n; ++s) acc += double(wr[s * H + i] * xr[s * H + i]);
          o[i] = A(acc / double(n));
        }
      }
    });
  });
}

void streams_inject(const Tensor& x, const Tensor& y, const Tensor& w, bool accumulate) {
  const int64_t H = y.cols, n = w.cols;
  KCHECK(x.cols == n * H && x.rows == y.rows && w.rows == y.rows);
  with_act(y, [&]<typename A>() {
    for (int64_t t = 0; t < y.rows; ++t) {
      const A* yr = act<A>(y) + t * H;
      for (int64_t s = 0; s < n; ++s) {
        const A ws = act<A>(w)[t * n + s];
        A* xs = act<A>(x) + t * x.cols + s * H;
        for (int64_t i = 0; i < H; ++i) xs[i] = accumulate ? xs[i] + yr[i] * ws : yr[i] * ws;
      }
    }
  });
}

void stream_gate(const Tensor& g, const Tensor& a, const Tensor& b) {
  const int64_t n = g.cols, H = a.cols / n;
  KCHECK(a.cols == n * H && b.cols == a.cols && g.rows == a.rows && b.rows == a.rows);
  const double inv = 1.0 / std::sqrt(double(H));
  with_act(a, [&]<typename A>() {
  for (int64_t t = 0; t < a.rows; ++t) {
    for (int64_t s = 0; s < n; ++s) {
      const A* as = act<A>(a) + t * a.cols + s * H;
      const A* bs = act<A>(b) + t * b.cols + s * H;
      double d = 0.0;
      for (int64_t i = 0; i < H; ++i) d += double(as[i]) * double(bs[i]);
      d *= inv;
      const double r = std::sqrt(std::max(std::fabs(d), 1e-6)) * (d > 0 ? 1.0 : d < 0 ? -1.0 : 0.0);
      act<A>(g)[t * n + s] = A(1.0 / (1.0 + std::exp(-r)));
    }
  }
  });
}

}  // namespace kestrel::cpu
