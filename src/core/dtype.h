// Element types and the scalar conversions between them.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace kestrel {

// The block formats (kQ8_0 ...) are ggml's quantized layouts (quant/blocks.h): a row of `cols`
// elements is cols / dtype_block_elems blocks of dtype_block_bytes bytes. They are weight dtypes
// only (matrices [out, in] whose rows are whole blocks); activations are never quantized.
// kQ4_K_T32, kQ8_0_T32 and kQ6_K_T32 are device layouts, never a file's: Q4_K's / Q8_0's / Q6_K's
// bytes permuted within groups of 32 rows (backend/cuda/block_gemv_geometry.h, q4k_int), the same
// bytes in all, which the CUDA backend's upload_matrix makes of a matrix only its matmuls read.
enum class DType : uint8_t {
  kF32, kF16, kBF16, kI32, kI64, kU8, kBool, kF64, kI8, kI16,
  kQ8_0, kQ5_0, kQ5_1, kQ4_K, kQ5_K, kQ6_K, kMXFP4, kQ4_K_T32, kQ8_0_T32, kQ6_K_T32,
};

// kQ4_K_T32, kQ8_0_T32 or kQ6_K_T32: rows in groups of 32 whose bytes are permuted within the group.
inline bool dtype_is_t32_layout(DType dtype) {
  return dtype == DType::kQ4_K_T32 || dtype == DType::kQ8_0_T32 || dtype == DType::kQ6_K_T32;
}

// Bytes of one element of a plain dtype; 0 for a block format (use dtype_row_bytes).
size_t dtype_size(DType dtype);
bool dtype_is_quantized(DType dtype);
int64_t dtype_block_elems(DType dtype);  // elements per block: 1 for plain dtypes
size_t dtype_block_bytes(DType dtype);   // bytes per block: dtype_size for plain dtypes
// Bytes of one row of `cols` elements; KCHECKs cols is a whole number of blocks.
size_t dtype_row_bytes(DType dtype, int64_t cols);
std::string_view dtype_name(DType dtype);        // safetensors spelling: "F32", "BF16", ...; ggml's "Q4_K", ...
// Plain dtypes only (the safetensors spellings): block formats never come from a safetensors header.
bool dtype_from_name(std::string_view name, DType* out);

inline float bf16_to_f32(uint16_t v) {
  uint32_t bits = uint32_t(v) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even, as torch does; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40);
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t((bits + rounding) >> 16);
}

float f16_to_f32(uint16_t v);
uint16_t f32_to_f16(float f);

}  // namespace kestrel
