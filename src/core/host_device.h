// What code that compiles both for the host and for CUDA devices shares: KESTREL_HD marks a
// function for both, and the bit casts between an F32 and its 32-bit pattern take the device's
// intrinsics there and memcpy here (the same bits either way).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define KESTREL_HD __host__ __device__
#else
#define KESTREL_HD
#endif

namespace kestrel {

KESTREL_HD inline uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
#endif
}

KESTREL_HD inline float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, 4);
  return x;
#endif
}

}  // namespace kestrel
