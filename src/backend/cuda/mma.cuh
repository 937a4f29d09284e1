// The tensor-core building blocks the attention kernels share: ldmatrix from shared memory and
// the m16n8k16 BF16 mma with F32 accumulation (PTX ISA, "Matrix fragments for mma.m16n8k16").
// Fragments, for lane l, g = l / 4 and c = l % 4: A (16x16, row-major) a0 = A[g][2c, 2c+1],
// a1 = A[g+8][2c, 2c+1], a2 = A[g][2c+8, 2c+9], a3 = A[g+8][2c+8, 2c+9]; B (16x8, column-major)
// b0 = B[2c, 2c+1][g], b1 = B[2c+8, 2c+9][g]; C (16x8) c0, c1 = C[g][2c, 2c+1], c2, c3 =
// C[g+8][2c, 2c+1]. A pair packs its lower-indexed element in the low 16 bits.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace kestrel::cuda {

// Four 8x8 BF16 matrices from shared memory (lane l gives the address of row l % 8 of matrix
// l / 8); TRANS delivers each transposed.
template <bool TRANS>
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const __nv_bfloat16* p) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  if constexpr (TRANS)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}

// d += a b for a 16x16 (row-major) and b 16x8 (column-major) BF16 fragment, F32 accumulate.
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t bf16x2_bits(__nv_bfloat162 v) { return *reinterpret_cast<const uint32_t*>(&v); }

}  // namespace kestrel::cuda
