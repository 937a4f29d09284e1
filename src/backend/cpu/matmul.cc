// matmul: out[T, N] = x[T, K] . w[N, K]^T, accumulated in double, rounded to f32 once.
//
// Every output element is one dot product with the same fixed accumulation order (16 lanes of
// double in four 4-wide vectors, a fixed reduction tree, then the tail), whatever T is and
// however the rows are grouped, so a row's result never depends on the rest of the batch. Rows go through
// in groups of 4 so each weight row loaded from memory serves 4 dot products.
//
// Block-format weights (Q8_0 ... MXFP4) are dequantized a tile of rows at a time into a per-thread
// float scratch (ggml's dequantize_row: the values widening the file to F32 at load gives) and
// dotted by the very routine F32 weights use, so a quantized model computes bit for bit what the
// same file widened to F32 would. Each weight row is dequantized once per call. The scratch is
// float in the float64 oracle mode too: F32 weights there are floats widened inside the dot.
#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "backend/cpu/kernels.h"
#include "core/thread_pool.h"
#include "quant/quant.h"

namespace kestrel::cpu {
namespace {

inline __m256 load8_bf16(const uint16_t* p) {
  __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline __m256 load8_f16(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline __m256 load8_f32(const float* p) { return _mm256_loadu_ps(p); }

template <typename W>
inline __m256 load8(const W* p);
template <>
inline __m256 load8<uint16_t>(const uint16_t* p) { return load8_bf16(p); }
template <>
inline __m256 load8<float>(const float* p) { return load8_f32(p); }

struct F16Tag {};

inline float scalar_w(const uint16_t* w, int64_t i, bool f16) { return f16 ? f16_to_f32(w[i]) : bf16_to_f32(w[i]); }

// Four consecutive activations as doubles (exact for float).
inline __m256d load4d(const float* p) { return _mm256_cvtps_pd(_mm_loadu_ps(p)); }
inline __m256d load4d(const double* p) { return _mm256_loadu_pd(p); }

// R rows of x (float, or double in the float64 oracle mode) against one weight row. Products of
// two floats are exact in double, so the accumulation runs in double (4 lanes x 4 accumulators)
// and rounds once at the end: the CPU backend is the oracle, and hybrid models amplify f32
// rounding in their projections where a DeltaNet output is tiny and its gated RMSNorm rescales it
// by up to 1/sqrt(eps). Identical per-row arithmetic for every R.
// One step of the dot below: weights w[0, 16) against x[r][i, i + 16) into the accumulators.
template <int R, typename W, bool kF16, typename A>
inline void dot_step(const A* const* x, int64_t i, const W* w, __m256d (&acc)[R][4]) {
  __m256 w0, w1;
  if constexpr (kF16) {
    w0 = load8_f16(reinterpret_cast<const uint16_t*>(w));
    w1 = load8_f16(reinterpret_cast<const uint16_t*>(w) + 8);
  } else {
    w0 = load8<W>(w);
    w1 = load8<W>(w + 8);
  }
  const __m256d wd[4] = {_mm256_cvtps_pd(_mm256_castps256_ps128(w0)), _mm256_cvtps_pd(_mm256_extractf128_ps(w0, 1)),
                         _mm256_cvtps_pd(_mm256_castps256_ps128(w1)), _mm256_cvtps_pd(_mm256_extractf128_ps(w1, 1))};
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < 4; ++j) acc[r][j] = _mm256_fmadd_pd(load4d(x[r] + i + 4 * j), wd[j], acc[r][j]);
  }
}

// The fixed reduction tree of the accumulators, plus the tail's sum.
template <typename A>
inline A dot_reduce(const __m256d (&acc)[4], double tail) {
  __m256d s = _mm256_add_pd(_mm256_add_pd(acc[0], acc[1]), _mm256_add_pd(acc[2], acc[3]));
  __m128d h = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
  h = _mm_add_sd(h, _mm_unpackhi_pd(h, h));
  return A(_mm_cvtsd_f64(h) + tail);
}

// R rows of x (float, or double in the float64 oracle mode) against one weight row. Products of
// two floats are exact in double, so the accumulation runs in double (4 lanes x 4 accumulators)
// and rounds once at the end: the CPU backend is the oracle, and hybrid models amplify f32
// rounding in their projections where a DeltaNet output is tiny and its gated RMSNorm rescales it
// by up to 1/sqrt(eps). Identical per-row arithmetic for every R.
template <int R, typename W, bool kF16 = false, typename A>
inline void dot_rows(const A* const* x, const W* w, int64_t n, A* out) {
  __m256d acc[R][4];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < 4; ++j) acc[r][j] = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) dot_step<R, W, kF16>(x, i, w + i, acc);
  for (int r = 0; r < R; ++r) {
    double tail = 0.0;
    for (int64_t j = i; j < n; ++j) {
      float wv;
      if constexpr (kF16) wv = f16_to_f32(reinterpret_cast<const uint16_t*>(w)[j]);
      else if constexpr (std::is_same_v<W, uint16_t>) wv = bf16_to_f32(w[j]);
      else wv = w[j];
      tail += double(x[r][j]) * double(wv);
    }
    out[r] = dot_reduce<A>(acc[r], tail);
  }
}

// R rows of x against one weight row, R = min(4, rows left).
template <typename W, bool kF16 = false, typename A>
inline void dot_upto4(const A* const* rows, int R, const W* w, int64_t n, A* res) {
  switch (R) {
    case 4: dot_rows<4, W, kF16>(rows, w, n, res); break;
    case 3: dot_rows<3, W, kF16>(rows, w, n, res); break;
    case 2: dot_rows<2, W, kF16>(rows, w, n, res); break;
    default: dot_rows<1, W, kF16>(rows, w, n, res); break;
  }
}

template <typename A, typename W, bool kF16 = false>
void matmul_impl(const Tensor& out, const Tensor& x, const Tensor& w) {
  const int64_t T = x.rows, K = x.cols, N = w.rows;
  const A* xs = act<A>(x);
  A* os = act<A>(out);
  const W* ws = static_cast<const W*>(w.data);
  // Columns are split across threads; each thread walks all rows for its columns.
  ThreadPool::global().parallel_for(N, [&](int64_t n0, int64_t n1) {
    for (int64_t t = 0; t < T; t += 4) {
      int R = int(std::min<int64_t>(4, T - t));
      const A* rows[4] = {xs + t * K, xs + std::min(t + 1, T - 1) * K, xs + std::min(t + 2, T - 1) * K,
                          xs + std::min(t + 3, T - 1) * K};
      for (int64_t n = n0; n < n1; ++n) {
        A res[4] = {0, 0, 0, 0};
        dot_upto4<W, kF16>(rows, R, ws + n * K, K, res);
        for (int r = 0; r < R; ++r) os[(t + r) * N + n] = res[r];
      }
    }
  }, 8);
}

// Weight rows dequantized per tile: kQuantTile rows of K floats stay in cache while every row of
// x passes over them.
constexpr int64_t kQuantTile = 8;

// Up to 4 rows of x (decode): each weight row is dequantized 256 values at a time into a buffer
// that stays in L1 and fed to the accumulation steps of dot_rows in the same order (K is a
// multiple of 32 for every block format, so every chunk is whole 16-value steps and dot_rows would
// have no tail): the same bits as the tiled path below, without writing and re-reading whole rows.
constexpr int64_t kQuantChunk = 256;  // a multiple of every block size: chunks start on blocks

template <int R, typename A>
void dot_quant_row(const A* const* rows, const uint8_t* wrow, GgmlType type, size_t chunk_bytes, int64_t K, A* res) {
  alignas(32) float buf[kQuantChunk];
  __m256d acc[R][4];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < 4; ++j) acc[r][j] = _mm256_setzero_pd();
  for (int64_t c0 = 0; c0 < K; c0 += kQuantChunk) {
    const int64_t n = std::min(kQuantChunk, K - c0);
    quant::dequantize_row(type, wrow + size_t(c0 / kQuantChunk) * chunk_bytes, n, buf);
    for (int64_t i = 0; i < n; i += 16) dot_step<R, float, false>(rows, c0 + i, buf + i, acc);
  }
  for (int r = 0; r < R; ++r) res[r] = dot_reduce<A>(acc[r], 0.0);
}

template <typename A>
void matmul_quant_impl(const Tensor& out, const Tensor& x, const Tensor& w) {
  const int64_t T = x.rows, K = x.cols, N = w.rows;
  const GgmlType type = *dtype_to_ggml(w.dtype);
  const size_t row_bytes = w.row_bytes();
  const A* xs = act<A>(x);
  A* os = act<A>(out);
  const uint8_t* ws = static_cast<const uint8_t*>(w.data);
  if (T == 0) return;
  if (T <= 4) {
    KCHECK_MSG(K % 32 == 0, "matmul: a block-format weight row of ", K, " values");
    const size_t chunk_bytes = dtype_row_bytes(w.dtype, kQuantChunk);
    const A* rows[4] = {xs, xs + std::min<int64_t>(1, T - 1) * K, xs + std::min<int64_t>(2, T - 1) * K,
                        xs + std::min<int64_t>(3, T - 1) * K};
    ThreadPool::global().parallel_for(N, [&](int64_t n0, int64_t n1) {
      for (int64_t n = n0; n < n1; ++n) {
        A res[4] = {0, 0, 0, 0};
        const uint8_t* wrow = ws + size_t(n) * row_bytes;
        switch (T) {
          case 4: dot_quant_row<4>(rows, wrow, type, chunk_bytes, K, res); break;
          case 3: dot_quant_row<3>(rows, wrow, type, chunk_bytes, K, res); break;
          case 2: dot_quant_row<2>(rows, wrow, type, chunk_bytes, K, res); break;
          default: dot_quant_row<1>(rows, wrow, type, chunk_bytes, K, res); break;
        }
        for (int64_t r = 0; r < T; ++r) os[r * N + n] = res[r];
      }
    }, 8);
    return;
  }
  ThreadPool::global().parallel_for(N, [&](int64_t n0, int64_t n1) {
    thread_local std::vector<float> scratch;  // [kQuantTile, K] dequantized weight rows
    if (scratch.size() < size_t(kQuantTile * K)) scratch.resize(size_t(kQuantTile * K));
    for (int64_t nt = n0; nt < n1; nt += kQuantTile) {
      const int64_t nn = std::min(kQuantTile, n1 - nt);
      for (int64_t i = 0; i < nn; ++i)
        quant::dequantize_row(type, ws + size_t(nt + i) * row_bytes, K, scratch.data() + i * K);
      for (int64_t t = 0; t < T; t += 4) {
        const int R = int(std::min<int64_t>(4, T - t));
        const A* rows[4] = {xs + t * K, xs + std::min(t + 1, T - 1) * K, xs + std::min(t + 2, T - 1) * K,
                            xs + std::min(t + 3, T - 1) * K};
        for (int64_t i = 0; i < nn; ++i) {
          A res[4] = {0, 0, 0, 0};
          dot_upto4<float>(rows, R, scratch.data() + i * K, K, res);
          for (int r = 0; r < R; ++r) os[(t + r) * N + nt + i] = res[r];
        }
      }
    }
  }, 8);
}

}  // namespace

float dot_f32(const float* x, const float* w, int64_t n) {
  float r;
  const float* rows[1] = {x};
  dot_rows<1, float>(rows, w, n, &r);
  return r;
}

double dot_f64(const double* x, const double* w, int64_t n) {
  // four lanes in index order, then a fixed reduction
  double acc[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int j = 0; j < 4; ++j) acc[j] += x[i + j] * w[i + j];
  double tail = 0.0;
  for (; i < n; ++i) tail += x[i] * w[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + tail;
}

float dot_bf16(const float* x, const uint16_t* w, int64_t n) {
  float r;
  const float* rows[1] = {x};
  dot_rows<1, uint16_t>(rows, w, n, &r);
  return r;
}

void matmul(const Tensor& out, const Tensor& x, const Tensor& w) {
  KCHECK(x.dtype == out.dtype);
  KCHECK_MSG(x.cols == w.cols && out.rows == x.rows && out.cols == w.rows, "matmul shapes: x [", x.rows, ",", x.cols,
             "] w [", w.rows, ",", w.cols, "] out [", out.rows, ",", out.cols, "]");
  if (x.rows == 0) return;
  with_act(x, [&]<typename A>() {
    switch (w.dtype) {
      case DType::kBF16: matmul_impl<A, uint16_t>(out, x, w); break;
      case DType::kF16: matmul_impl<A, uint16_t, true>(out, x, w); break;
      case DType::kF32: matmul_impl<A, float>(out, x, w); break;
      default:
        KCHECK_MSG(dtype_is_quantized(w.dtype), "matmul: unsupported weight dtype ", dtype_name(w.dtype));
        matmul_quant_impl<A>(out, x, w);
        break;
    }
  });
}

}  // namespace kestrel::cpu
