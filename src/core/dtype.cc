#include "core/dtype.h"

#include <cmath>

#include "core/error.h"

namespace kestrel {
namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  size_t size;          // bytes per block
  int64_t block = 1;    // elements per block
};

// Block sizes are ggml's (quant/blocks.h static_asserts the same numbers).
constexpr DTypeInfo kInfos[] = {
    {DType::kF32, "F32", 4},  {DType::kF16, "F16", 2}, {DType::kBF16, "BF16", 2},
    {DType::kI32, "I32", 4},  {DType::kI64, "I64", 8}, {DType::kU8, "U8", 1},
    {DType::kBool, "BOOL", 1}, {DType::kF64, "F64", 8}, {DType::kI8, "I8", 1},
    {DType::kI16, "I16", 2},
    {DType::kQ8_0, "Q8_0", 34, 32},   {DType::kQ5_0, "Q5_0", 22, 32},   {DType::kQ5_1, "Q5_1", 24, 32},
    {DType::kQ4_K, "Q4_K", 144, 256}, {DType::kQ5_K, "Q5_K", 176, 256}, {DType::kQ6_K, "Q6_K", 210, 256},
    {DType::kMXFP4, "MXFP4", 17, 32}, {DType::kQ4_K_T32, "Q4_K_T32", 144, 256},
    {DType::kQ8_0_T32, "Q8_0_T32", 34, 32}, {DType::kQ6_K_T32, "Q6_K_T32", 210, 256},
};

const DTypeInfo* find(DType dtype) {
  for (const auto& info : kInfos) {
    if (info.dtype == dtype) return &info;
  }
  return nullptr;
}

}  // namespace

size_t dtype_size(DType dtype) {
  const DTypeInfo* info = find(dtype);
  return info && info->block == 1 ? info->size : 0;
}

bool dtype_is_quantized(DType dtype) {
  const DTypeInfo* info = find(dtype);
  return info && info->block > 1;
}

int64_t dtype_block_elems(DType dtype) {
  const DTypeInfo* info = find(dtype);
  KCHECK(info);
  return info->block;
}

size_t dtype_block_bytes(DType dtype) {
  const DTypeInfo* info = find(dtype);
  KCHECK(info);
  return info->size;
}

size_t dtype_row_bytes(DType dtype, int64_t cols) {
  const DTypeInfo* info = find(dtype);
  KCHECK(info && cols >= 0 && cols % info->block == 0);
  return size_t(cols / info->block) * info->size;
}

std::string_view dtype_name(DType dtype) {
  for (const auto& info : kInfos) {
    if (info.dtype == dtype) return info.name;
  }
  return "?";
}

bool dtype_from_name(std::string_view name, DType* out) {
  for (const auto& info : kInfos) {
    if (info.block == 1 && info.name == name) {
      *out = info.dtype;
      return true;
    }
  }
  return false;
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {  // subnormal: renormalize
      int shift = 0;
      while ((mantissa & 0x400u) == 0) {
        mantissa <<= 1;
        ++shift;
      }
      mantissa &= 0x3ffu;
      bits = sign | uint32_t(127 - 15 - shift + 1) << 23 | mantissa << 13;
    }
  } else if (exponent == 31) {
    bits = sign | 0x7f800000u | mantissa << 13;
  } else {
    bits = sign | (exponent + 127 - 15) << 23 | mantissa << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  uint16_t sign = uint16_t((bits >> 16) & 0x8000u);
  uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;         // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;        // overflow to inf (>= 65520)
  if (abs < 0x38800000u) {                              // subnormal or zero in f16
    if (abs < 0x33000000u) return sign;                 // < 2^-25 rounds to zero
    uint32_t exponent = abs >> 23;
    uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - exponent;                    // 14 + (113 - exponent) - 1
    uint32_t half = mantissa >> shift;
    uint32_t rest = mantissa & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1u))) ++half;
    return sign | uint16_t(half);
  }
  uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
  return sign | uint16_t((rounded - 0x38000000u) >> 13);
}

}  // namespace kestrel
