// Row-wise and elementwise ops: embedding gather, RMSNorm variants, add, gates, gather, softcap,
// argmax.
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/kernels.h"
#include "core/thread_pool.h"
#include "quant/quant.h"

namespace kestrel::cpu {
namespace {

template <typename A>
inline A silu(A x) {
  return x / (A(1) + std::exp(-x));
}
template <typename A>
inline A sigmoid(A x) {
  return A(1) / (A(1) + std::exp(-x));
}
// gelu, tanh approximation, evaluated in double and rounded once.
template <typename A>
inline A gelu_tanh(A x) {
  const double d = x;
  return A(0.5 * d * (1.0 + std::tanh(0.7978845608028654 * (d + 0.044715 * d * d * d))));
}

// 1 / rms of n values; the sum of squares in double, in index order.
template <typename A>
inline A inv_rms(const A* x, int64_t n, float eps) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += double(x[i]) * double(x[i]);
  return A(1.0 / std::sqrt(ss / double(n) + double(eps)));
}

// o = x / rms(x) [* w]: one row of rms_norm (o may be x).
template <typename A>
inline void norm_row(const A* x, A* o, int64_t n, const Tensor& w, float eps) {
  const A s = inv_rms(x, n, eps);
  if (w.empty()) {
    for (int64_t i = 0; i < n; ++i) o[i] = x[i] * s;
  } else {
    const float* wr = w.f32();
    for (int64_t i = 0; i < n; ++i) o[i] = (x[i] * s) * A(wr[i]);
  }
}

template <typename T>
void widen_row(const Tensor& t, int64_t row, T* dst) {
  const int64_t n = t.cols;
  if (dtype_is_quantized(t.dtype)) {  // ggml's dequantize_row: what widening the file at load gives
    const uint8_t* s = static_cast<const uint8_t*>(t.data) + size_t(row) * t.row_bytes();
    const GgmlType type = *dtype_to_ggml(t.dtype);
    if constexpr (std::is_same_v<T, float>) {
      quant::dequantize_row(type, s, n, dst);
    } else {
      thread_local std::vector<float> scratch;  // [n]
      if (scratch.size() < size_t(n)) scratch.resize(size_t(n));
      quant::dequantize_row(type, s, n, scratch.data());
      for (int64_t i = 0; i < n; ++i) dst[i] = scratch[size_t(i)];
    }
    return;
  }
  switch (t.dtype) {
    case DType::kF32: {
      const float* s = t.as<const float>() + row * n;
      for (int64_t i = 0; i < n; ++i) dst[i] = s[i];
      break;
    }
    case DType::kBF16: {
      const uint16_t* s = t.as<const uint16_t>() + row * n;
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      break;
    }
    case DType::kF16: {
      const uint16_t* s = t.as<const uint16_t>() + row * n;
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
      break;
    }
    default: KCHECK_MSG(false, "load_row: unsupported dtype ", dtype_name(t.dtype));
  }
}

}  // namespace

float load_element(const Tensor& t, int64_t row, int64_t col) {
  int64_t i = row * t.cols + col;
  switch (t.dtype) {
    case DType::kF32: return t.as<const float>()[i];
    case DType::kBF16: return bf16_to_f32(t.as<const uint16_t>()[i]);
    case DType::kF16: return f16_to_f32(t.as<const uint16_t>()[i]);
    default: KCHECK_MSG(false, "load_element: unsupported dtype ", dtype_name(t.dtype));
  }
  return 0.0f;
}

void load_row(const Tensor& t, int64_t row, float* dst) {
  if (t.dtype == DType::kF32) {
    std::memcpy(dst, t.as<const float>() + row * t.cols, size_t(t.cols) * 4);
    return;
  }
  widen_row(t, row, dst);
}

void load_row(const Tensor& t, int64_t row, double* dst) {
  if (t.dtype == DType::kF64) {
    std::memcpy(dst, t.as<const double>() + row * t.cols, size_t(t.cols) * 8);
    return;
  }
  widen_row(t, row, dst);
}

void embed(const Tensor& out, const Tensor& table, const StepPlan& plan, double scale) {
  KCHECK(out.rows == plan.n_rows() && out.cols == table.cols);
  with_act(out, [&]<typename A>() {
    ThreadPool::global().parallel_for(out.rows, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        int32_t id = plan.tokens[size_t(r)];
        KCHECK_MSG(id >= 0 && id < table.rows, "token id ", id, " outside the vocabulary");
        A* dst = act<A>(out) + r * out.cols;
        load_row(table, id, dst);
        if (scale != 1.0) {
          for (int64_t i = 0; i < out.cols; ++i) dst[i] *= A(scale);
        }
      }
    });
  });
}

void rms_norm(const Tensor& out, const Tensor& x, const Tensor& w, float eps) {
  KCHECK(out.rows == x.rows && out.cols == x.cols);
  KCHECK(w.empty() || w.cols == x.cols);
  const int64_t n = x.cols;
  with_act(x, [&]<typename A>() {
    ThreadPool::global().parallel_for(x.rows, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        norm_row(act<A>(x) + r * n, act<A>(out) + r * n, n, w, eps);
      }
    });
  });
}

void add_rms_norm(const Tensor& residual, const Tensor& x, const Tensor& w, const Tensor& out, float eps) {
  KCHECK(x.rows == residual.rows && x.cols == residual.cols && out.rows == residual.rows && out.cols == residual.cols);
  KCHECK(w.empty() || w.cols == residual.cols);
  KCHECK_MSG(out.data != residual.data, "add_rms_norm: out must not be the residual");
  const int64_t n = residual.cols;
  with_act(residual, [&]<typename A>() {
    ThreadPool::global().parallel_for(residual.rows, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        A* res = act<A>(residual) + r * n;
        const A* xr = act<A>(x) + r * n;
        A* o = act<A>(out) + r * n;
        for (int64_t i = 0; i < n; ++i) res[i] = res[i] + xr[i];  // as add(), before o may overwrite x
        norm_row(res, o, n, w, eps);
      }
    });
  });
}

void head_rms_norm(const Tensor& x, const Tensor& w, int head_dim, float eps) {
  KCHECK(x.cols % head_dim == 0);
  KCHECK(w.empty() || w.cols == head_dim);
  const int64_t groups = x.rows * (x.cols / head_dim);
  with_act(x, [&]<typename A>() {
    ThreadPool::global().parallel_for(groups, [&](int64_t g0, int64_t g1) {
      for (int64_t g = g0; g < g1; ++g) {
        A* v = act<A>(x) + g * head_dim;
        A s = inv_rms(v, head_dim, eps);
        if (w.empty()) {
          for (int i = 0; i < head_dim; ++i) v[i] = v[i] * s;
        } else {
          for (int i = 0; i < head_dim; ++i) v[i] = (v[i] * s) * A(w.f32()[i]);
        }
      }
    }, 16);
  });
}

void add(const Tensor& out, const Tensor& a, const Tensor& b) {
  KCHECK(a.numel() == b.numel() && out.numel() == a.numel());
  with_act(a, [&]<typename A>() {
    A* o = act<A>(out);
    const A* pa = act<A>(a);
    const A* pb = act<A>(b);
    for (int64_t i = 0, n = a.numel(); i < n; ++i) o[i] = pa[i] + pb[i];
  });
}

void mul_sigmoid(const Tensor& x, const Tensor& gate) {
  with_act(x, [&]<typename A>() {
    A* px = act<A>(x);
    const A* pg = act<A>(gate);
    if (gate.cols == 1 && x.cols != 1) {  // one gate per row
      KCHECK(gate.rows == x.rows);
      for (int64_t r = 0; r < x.rows; ++r) {
        const A s = sigmoid(pg[r]);
        for (int64_t c = 0; c < x.cols; ++c) px[r * x.cols + c] *= s;
      }
      return;
    }
    KCHECK(x.numel() == gate.numel());
    for (int64_t i = 0, n = x.numel(); i < n; ++i) px[i] *= sigmoid(pg[i]);
  });
}

void silu_mul(const Tensor& out, const Tensor& gate, const Tensor& up) {
  KCHECK(gate.numel() == up.numel() && out.numel() == gate.numel());
  with_act(out, [&]<typename A>() {
    A* o = act<A>(out);
    const A* g = act<A>(gate);
    const A* u = act<A>(up);
    for (int64_t i = 0, n = out.numel(); i < n; ++i) o[i] = silu(g[i]) * u[i];
  });
}

void gelu_tanh_mul(const Tensor& out, const Tensor& gate, const Tensor& up) {
  KCHECK(gate.numel() == up.numel() && out.numel() == gate.numel());
  with_act(out, [&]<typename A>() {
    A* o = act<A>(out);
    const A* g = act<A>(gate);
    const A* u = act<A>(up);
    for (int64_t i = 0, n = out.numel(); i < n; ++i) o[i] = gelu_tanh(g[i]) * u[i];
  });
}

void scale(const Tensor& x, double s) {
  with_act(x, [&]<typename A>() {
    A* p = act<A>(x);
    for (int64_t i = 0, n = x.numel(); i < n; ++i) p[i] *= A(s);
  });
}

void slice_cols(const Tensor& out, const Tensor& x, int64_t begin) {
  KCHECK(out.rows == x.rows && out.dtype == x.dtype && begin >= 0 && begin + out.cols <= x.cols);
  const size_t es = dtype_size(x.dtype);
  for (int64_t r = 0; r < x.rows; ++r) {
    std::memcpy(static_cast<uint8_t*>(out.data) + size_t(r * out.cols) * es,
                static_cast<const uint8_t*>(x.data) + size_t(r * x.cols + begin) * es, size_t(out.cols) * es);
  }
}

void gather_rows(const Tensor& out, const Tensor& x, const std::vector<int32_t>& rows) {
  KCHECK(out.rows == int64_t(rows.size()) && out.cols == x.cols && out.dtype == x.dtype);
  size_t row_bytes = size_t(x.cols) * dtype_size(x.dtype);
  for (size_t i = 0; i < rows.size(); ++i) {
    KCHECK(rows[i] >= 0 && rows[i] < x.rows);
    std::memcpy(static_cast<uint8_t*>(out.data) + i * row_bytes,
                static_cast<const uint8_t*>(x.data) + size_t(rows[i]) * row_bytes, row_bytes);
  }
}

void softcap(const Tensor& x, float cap) {
  with_act(x, [&]<typename A>() {
    A* p = act<A>(x);
    const A c = cap;
    for (int64_t i = 0, n = x.numel(); i < n; ++i) p[i] = c * std::tanh(p[i] / c);
  });
}

void argmax(const Tensor& ids, const Tensor& x) {
  KCHECK(ids.dtype == DType::kI32 && ids.rows == x.rows && ids.cols == 1);
  with_act(x, [&]<typename A>() {
    for (int64_t r = 0; r < x.rows; ++r) static_cast<int32_t*>(ids.data)[r] = first_argmax(act<A>(x) + r * x.cols, x.cols);
  });
}

void activation(const Tensor& x, Activation fn) {
  with_act(x, [&]<typename A>() {
    A* p = act<A>(x);
    for (int64_t i = 0, n = x.numel(); i < n; ++i) {
      switch (fn) {
        case Activation::kSilu: p[i] = silu(p[i]); break;
        case Activation::kSigmoid: p[i] = sigmoid(p[i]); break;
        case Activation::kGeluTanh: p[i] = gelu_tanh(p[i]); break;
      }
    }
  });
}

void mul(const Tensor& out, const Tensor& a, const Tensor& b) {
  KCHECK(a.numel() == b.numel() && out.numel() == a.numel());
  with_act(a, [&]<typename A>() {
    for (int64_t i = 0, n = a.numel(); i < n; ++i) act<A>(out)[i] = act<A>(a)[i] * act<A>(b)[i];
  });
}

void group_rms_norm(const Tensor& out, const Tensor& x, const Tensor& w, int group, float eps) {
  KCHECK(out.rows == x.rows && out.cols == x.cols && x.cols % group == 0);
  KCHECK(w.empty() || w.cols == x.cols);
  const int64_t groups = x.rows * (x.cols / group);
  with_act(x, [&]<typename A>() {
    ThreadPool::global().parallel_for(groups, [&](int64_t g0, int64_t g1) {
      for (int64_t g = g0; g < g1; ++g) {
        const A* v = act<A>(x) + g * group;
        A* o = act<A>(out) + g * group;
        const float* wg = w.empty() ? nullptr : w.f32() + (g % (x.cols / group)) * group;
        const A s = inv_rms(v, group, eps);
        for (int i = 0; i < group; ++i) o[i] = wg ? (v[i] * s) * A(wg[i]) : v[i] * s;
      }
    }, 16);
  });
}

void embed_rows(const Tensor& out, const std::vector<Tensor>& shards, const std::vector<int32_t>& ids) {
  KCHECK(out.rows == int64_t(ids.size()) && !shards.empty());
  with_act(out, [&]<typename A>() {
    for (size_t i = 0; i < ids.size(); ++i) {
      int64_t row = ids[i];
      size_t s = 0;
      while (s < shards.size() && row >= shards[s].rows) row -= shards[s++].rows;
      KCHECK_MSG(s < shards.size() && row >= 0, "embedding row ", ids[i], " outside the table");
      KCHECK(shards[s].cols == out.cols);
      load_row(shards[s], row, act<A>(out) + int64_t(i) * out.cols);
    }
  });
}

void gated_rms_norm(const Tensor& x, const Tensor& z, const Tensor& w, int head_dim, float eps) {
  KCHECK(x.numel() == z.numel() && x.cols % head_dim == 0 && w.cols == head_dim);
  const int64_t groups = x.rows * (x.cols / head_dim);
  with_act(x, [&]<typename A>() {
    ThreadPool::global().parallel_for(groups, [&](int64_t g0, int64_t g1) {
      for (int64_t g = g0; g < g1; ++g) {
        A* v = act<A>(x) + g * head_dim;
        const A* zg = act<A>(z) + g * head_dim;
        A s = inv_rms(v, head_dim, eps);
        for (int i = 0; i < head_dim; ++i) v[i] = ((v[i] * s) * A(w.f32()[i])) * silu(zg[i]);
      }
    }, 16);
  });
}

}  // namespace kestrel::cpu
