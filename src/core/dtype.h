// Element types and the scalar conversions between them.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace kestrel {

enum class DType : uint8_t { kF32, kF16, kBF16, kI32, kI64, kU8, kBool, kF64, kI8, kI16 };

size_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);        // safetensors spelling: "F32", "BF16", ...
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
