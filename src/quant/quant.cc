// Dispatch by ggml type, and the F32/F16/BF16 pass-through "formats".
#include "quant/quant.h"

#include <cstring>

#include "core/dtype.h"
#include "core/error.h"

namespace kestrel::quant {

bool has_kernels(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBF16:
    case GgmlType::kQ8_0:
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K:
    case GgmlType::kMXFP4: return true;
    default: return false;
  }
}

void quantize_row(GgmlType type, const float* x, int64_t n, void* out) {
  switch (type) {
    case GgmlType::kF32: std::memcpy(out, x, size_t(n) * 4); return;
    case GgmlType::kF16:
      for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(out)[i] = f32_to_f16(x[i]);
      return;
    case GgmlType::kBF16:
      for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(out)[i] = f32_to_bf16(x[i]);
      return;
    case GgmlType::kQ8_0: return quantize_row_q8_0(x, n, out);
    case GgmlType::kQ5_0: return quantize_row_q5_0(x, n, out);
    case GgmlType::kQ5_1: return quantize_row_q5_1(x, n, out);
    case GgmlType::kQ4_K: return quantize_row_q4_k(x, n, out);
    case GgmlType::kQ5_K: return quantize_row_q5_k(x, n, out);
    case GgmlType::kQ6_K: return quantize_row_q6_k(x, n, out);
    case GgmlType::kMXFP4: return quantize_row_mxfp4(x, n, out);
    default: KCHECK_MSG(false, "quantize_row: no kernels for ", ggml_type_name(type));
  }
}

void dequantize_row(GgmlType type, const void* in, int64_t n, float* y) {
  switch (type) {
    case GgmlType::kF32: std::memcpy(y, in, size_t(n) * 4); return;
    case GgmlType::kF16:
      for (int64_t i = 0; i < n; ++i) y[i] = f16_to_f32(static_cast<const uint16_t*>(in)[i]);
      return;
    case GgmlType::kBF16:
      for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_f32(static_cast<const uint16_t*>(in)[i]);
      return;
    case GgmlType::kQ8_0: return dequantize_row_q8_0(in, n, y);
    case GgmlType::kQ5_0: return dequantize_row_q5_0(in, n, y);
    case GgmlType::kQ5_1: return dequantize_row_q5_1(in, n, y);
    case GgmlType::kQ4_K: return dequantize_row_q4_k(in, n, y);
    case GgmlType::kQ5_K: return dequantize_row_q5_k(in, n, y);
    case GgmlType::kQ6_K: return dequantize_row_q6_k(in, n, y);
    case GgmlType::kMXFP4: return dequantize_row_mxfp4(in, n, y);
    default: KCHECK_MSG(false, "dequantize_row: no kernels for ", ggml_type_name(type));
  }
}

namespace {

template <typename Load>
float dot_plain(const float* x, int64_t n, Load load) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += double(load(i)) * double(x[i]);
  return float(s);
}

}  // namespace

float dot_row(GgmlType type, const void* w, const float* x, int64_t n) {
  switch (type) {
    case GgmlType::kF32: {
      const auto* p = static_cast<const float*>(w);
      return dot_plain(x, n, [p](int64_t i) { return p[i]; });
    }
    case GgmlType::kF16: {
      const auto* p = static_cast<const uint16_t*>(w);
      return dot_plain(x, n, [p](int64_t i) { return f16_to_f32(p[i]); });
    }
    case GgmlType::kBF16: {
      const auto* p = static_cast<const uint16_t*>(w);
      return dot_plain(x, n, [p](int64_t i) { return bf16_to_f32(p[i]); });
    }
    case GgmlType::kQ8_0: return dot_row_q8_0(w, x, n);
    case GgmlType::kQ5_0: return dot_row_q5_0(w, x, n);
    case GgmlType::kQ5_1: return dot_row_q5_1(w, x, n);
    case GgmlType::kQ4_K: return dot_row_q4_k(w, x, n);
    case GgmlType::kQ5_K: return dot_row_q5_k(w, x, n);
    case GgmlType::kQ6_K: return dot_row_q6_k(w, x, n);
    case GgmlType::kMXFP4: return dot_row_mxfp4(w, x, n);
    default: KCHECK_MSG(false, "dot_row: no kernels for ", ggml_type_name(type));
  }
  return 0;
}

}  // namespace kestrel::quant
