// sample_candidates: each row of logits reduced to the first M tokens of its sampling order and the
// mass of its weights (ops/ops.h), with the host sampler's arithmetic (ops/sampling_math.h).
#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

#include "backend/cpu/kernels.h"
#include "ops/sampling_math.h"

namespace kestrel::cpu {

void sample_candidates(const Tensor& ids, const Tensor& scaled, const Tensor& mass, const Tensor& x,
                       std::span<const float> temperatures) {
  const int64_t R = x.rows, V = x.cols, M = ids.cols;
  KCHECK_MSG(x.dtype == DType::kF32, "sample_candidates: logits in ", dtype_name(x.dtype), " (F32 expected)");
  KCHECK_MSG(ids.dtype == DType::kI32 && scaled.dtype == DType::kF32 && mass.dtype == DType::kF64 &&
                 ids.rows == R && scaled.rows == R && scaled.cols == M && mass.rows == R && mass.cols == 1,
             "sample_candidates: ids [", ids.rows, ", ", ids.cols, "] ", dtype_name(ids.dtype), ", scaled [", scaled.rows,
             ", ", scaled.cols, "] ", dtype_name(scaled.dtype), ", mass [", mass.rows, ", ", mass.cols, "] ",
             dtype_name(mass.dtype), " for ", R, " rows (I32 [R, M], F32 [R, M], F64 [R, 1])");
  KCHECK_MSG(M >= 1 && M <= V, "sample_candidates: ", M, " candidates of a row of ", V);
  KCHECK_MSG(int64_t(temperatures.size()) == R, "sample_candidates: ", temperatures.size(), " temperatures for ", R,
             " rows");
  std::vector<float> s(static_cast<size_t>(V));
  std::vector<int32_t> order(static_cast<size_t>(V));
  for (int64_t r = 0; r < R; ++r) {
    const float t = temperatures[size_t(r)];
    KCHECK_MSG(t > 0.0f, "sample_candidates: row ", r, " has temperature ", t, " (> 0 expected)");
    const float* l = x.f32() + r * V;
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < V; ++i) {
      s[size_t(i)] = sampling::scaled(l[i], t);
      mx = std::max(mx, s[size_t(i)]);
    }
    const float* key = s.data();
    mass.as<double>()[r] =
        sampling::lane_sum(size_t(V), [key, mx](size_t i) { return double(sampling::exp_nonpositive(key[i] - mx)); });
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + M, order.end(),
                      [key](int32_t a, int32_t b) { return key[a] != key[b] ? key[a] > key[b] : a < b; });
    for (int64_t j = 0; j < M; ++j) {
      ids.as<int32_t>()[r * M + j] = order[size_t(j)];
      scaled.f32()[r * M + j] = s[size_t(order[size_t(j)])];
    }
  }
}

}  // namespace kestrel::cpu
