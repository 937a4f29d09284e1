// gated_delta_rule, chunked (WY) form: the whole 64-token chunks of a prefill, on the absolute
// 64-grid, in F32 on CUDA cores (but see gdr_scan_mma_kernel). With gc_i the cumulative gate
// within the chunk (gc_i = g_0 + ... + g_i), q_i L2-normalized and scaled by 1/sqrt(dk), k_i
// L2-normalized, beta_i = sigmoid(b_i):
//
//   A[i][j] = -beta_i (k_i . k_j) exp(gc_i - gc_j)  (j < i),     T = (I - A)^-1 (unit lower)
//   W = T diag(beta exp(gc)) K,   U = T diag(beta) V             (the WY representation)
//   V' = U - W S,   o_i = exp(gc_i) q_i S + sum_{j<=i} (q_i . k_j) exp(gc_i - gc_j) V'_j
//   S <- exp(gc_63) S + sum_i exp(gc_63 - gc_i) k_i V'_i^T
//
// which is the recurrence S_t = exp(g_t) S_{t-1} + k_t (beta_t (v_t - S^T k_t))^T, o_t = S_t^T q_t
// over the chunk. Two kernels per group of chunks:
//   gdr_prep_kernel, a block per (chunk, value head), all chunks at once: the norms, gates and
//     betas, A and the decayed q.k^T (P), then W and U by forward substitution (a thread per
//     column of [K | V], the column's 64 values in registers), written to scratch with
//     Q' = exp(gc) q, K' = exp(gc_63 - gc) k and exp(gc_63).
//   gdr_scan_kernel, a block per (run of chunks of one sequence, value head, 32 value columns),
//     carrying S [dk, 32] in shared memory from chunk to chunk in order: V', the outputs, S, with
//     the next chunk's inputs copied in (cp.async) during the current one.
// At --matmul-precision bf16 their places are taken by gdr_prep_mma_kernel and gdr_scan_mma_kernel:
// the same algebra with its products on the tensor cores (BF16 operands, F32 accumulators and
// state; T on CUDA cores in F32), W, Q', K', P passed between them in BF16.
// Every sum runs in a fixed order that depends only on the chunk's own data and incoming state,
// so a chunk computes the same bits whatever else the step holds or how the prefill was split
// on the grid. The state stays F32 throughout (the recurrent kernel rounds it to F32 at every
// grid point too). Precision: docs/cuda.md, tests/gpu/deltanet_test.cc.
#include <cuda_pipeline.h>

#include <algorithm>
#include <cmath>

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/gated_delta_rule_chunked.h"
#include "backend/cuda/mma.cuh"

namespace kestrel::cuda {
namespace {

constexpr int kC = kGdrChunk;
constexpr int kThreads = 256;
constexpr int kMaxDk = 192;                        // the scan block's shared memory
constexpr int kBV = 32;                            // value columns per scan block
constexpr size_t kScratchCap = size_t(256) << 20;  // chunk scratch per group of chunks

// Per (chunk, head) scratch: W, Q', K' [64, dk] and P [64, 64] as E — F32, or BF16 at
// --matmul-precision bf16 (gdr_prep_mma_kernel rounds them for gdr_scan_mma_kernel's operands) —
// and U [64, dv] and exp(gc_63) in F32.
template <typename E>
struct ChunkScratchOf {
  E* w;       // [n_chunks, nv, 64, dk]  W; -W in BF16 (the scan's V' = U + (-W) S)
  float* u;   // [n_chunks, nv, 64, dv]
  E* q;       // [n_chunks, nv, 64, dk]  exp(gc_i) q_i
  E* k;       // [n_chunks, nv, 64, dk]  exp(gc_63 - gc_i) k_i
  E* p;       // [n_chunks, nv, 64, 64]  (q_i . k_j) exp(gc_i - gc_j), j <= i, else 0
  float* gl;  // [n_chunks, nv]          exp(gc_63)
};
using ChunkScratch = ChunkScratchOf<float>;
using ChunkScratchBf16 = ChunkScratchOf<__nv_bfloat16>;

// The arrays of n_heads (chunk, head) pairs laid end to end from bytes. Every array's size is a
// multiple of 16 bytes a pair (dk a multiple of 4 for F32, of 16 for BF16), so each starts 16-byte
// aligned (cp.async).
template <typename E>
ChunkScratchOf<E> carve_scratch(unsigned char* bytes, size_t n_heads, int dk, int dv) {
  auto carve = [&](size_t elems, size_t size) {
    unsigned char* p = bytes;
    bytes += n_heads * elems * size;
    return p;
  };
  ChunkScratchOf<E> sc;
  sc.w = reinterpret_cast<E*>(carve(size_t(kC) * dk, sizeof(E)));
  sc.q = reinterpret_cast<E*>(carve(size_t(kC) * dk, sizeof(E)));
  sc.k = reinterpret_cast<E*>(carve(size_t(kC) * dk, sizeof(E)));
  sc.p = reinterpret_cast<E*>(carve(size_t(kC) * kC, sizeof(E)));
  sc.u = reinterpret_cast<float*>(carve(size_t(kC) * dv, 4));
  sc.gl = reinterpret_cast<float*>(carve(1, 4));
  return sc;
}

struct RunDev {
  int32_t row_begin, n_chunks, state_slot, chunk0;  // chunk0: index of its first chunk in the group
};

// A's row stride in the prep kernel's shared memory.
constexpr int kLdA = kC + 1;

// Four floats from 16-byte-aligned shared memory in one load.
__device__ __forceinline__ float4 lds4(const float* p) {
  float4 v;
  asm("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
      : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
      : "r"(static_cast<uint32_t>(__cvta_generic_to_shared(p))));
  return v;
}

// X_i = rhs_i + sum_{m<i} A[i][m] X_m for one column (rhs_i = scale[i] * src[i * src_stride]),
// the column's 64 values in registers, the sum over m in four interleaved partial sums (m mod 4)
// added pairwise; writes X to dst[i * dst_stride]. (A's rows read as float4s would take a quarter
// of the shared loads, but the loads the compiler then hoists spill past the 128 registers that
// two blocks a multiprocessor allow: ptxas reported ~1 KB of spills; not kept.)
__device__ __forceinline__ void solve_column(const float* __restrict__ am, const float* __restrict__ scale,
                                             const float* src, int64_t src_stride, float* __restrict__ dst,
                                             int64_t dst_stride) {
  float x[kC];
#pragma unroll
  for (int i = 0; i < kC; ++i) {
    float part[4] = {scale[i] * src[i * src_stride], 0.0f, 0.0f, 0.0f};  // four chains: latency
#pragma unroll
    for (int m = 0; m < i; ++m) part[m & 3] = fmaf(am[i * kLdA + m], x[m], part[m & 3]);
    x[i] = (part[0] + part[1]) + (part[2] + part[3]);
  }
#pragma unroll
  for (int i = 0; i < kC; ++i) dst[i * dst_stride] = x[i];
}

// grid: (n_chunks, nv); block: 256. dynamic smem: q, k [64][dk + 4], A [64][kLdA], beta, beta*exp(gc)
// [64] floats; gc [64] doubles.
__global__ void __launch_bounds__(kThreads, 2) gdr_prep_kernel(ChunkScratch sc, const float* __restrict__ qkv,
                                                            const float* __restrict__ a, const float* __restrict__ b,
                                                            const float* __restrict__ a_neg,
                                                            const float* __restrict__ dt_bias,
                                                            const int32_t* __restrict__ chunk_rows, int nk, int nv,
                                                            int kdiv, int dk, int dv) {
  pdl_begin();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  double* gc = reinterpret_cast<double*>(smem_raw);  // [64]
  float* qs = reinterpret_cast<float*>(gc + kC);     // [64][dk + 4]: rows 16-byte aligned, and the
  const int ld = dk + 4;                             // float4 loads of 8 rows hit distinct banks
  float* ks = qs + kC * ld;                          // [64][dk + 4]
  float* am = ks + kC * ld;                          // [64][kLdA]
  float* beta = am + kC * kLdA;                      // [64]
  float* bk = beta + kC;                             // [64] beta_i exp(gc_i)
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int c = blockIdx.x, h = blockIdx.y, kh = (h / kdiv) % nk;  // DeltaNetConfig::key_head
  const int64_t r0 = chunk_rows[c];
  const int64_t cols = 2 * int64_t(nk) * dk + int64_t(nv) * dv;
  const double q_scale = 1.0 / sqrt(double(dk));
  const double an = a_neg[h], bias = dt_bias[h];
  // L2 norms (sums in double, as the recurrent kernel), beta and the gate per row
  for (int i = warp; i < kC; i += kThreads / 32) {
    const float* row = qkv + (r0 + i) * cols;
    double sq = 0, sk = 0;
    for (int d = lane; d < dk; d += 32) {
      const float qv = row[int64_t(kh) * dk + d], kv = row[int64_t(nk) * dk + int64_t(kh) * dk + d];
      sq += double(qv) * qv;
      sk += double(kv) * kv;
      qs[i * ld + d] = qv;
      ks[i * ld + d] = kv;
    }
    sq = warp_sum(sq);
    sk = warp_sum(sk);
    const double fq = 1.0 / sqrt(sq + 1e-6) * q_scale, fk = 1.0 / sqrt(sk + 1e-6);
    for (int d = lane; d < dk; d += 32) {
      qs[i * ld + d] = float(qs[i * ld + d] * fq);
      ks[i * ld + d] = float(ks[i * ld + d] * fk);
    }
    if (lane == 0) {
      beta[i] = float(1.0 / (1.0 + exp(-double(b[(r0 + i) * nv + h]))));
      const double x = double(a[(r0 + i) * nv + h]) + bias;
      gc[i] = an * (x > 20.0 ? x : log1p(exp(x)));
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int i = 1; i < kC; ++i) gc[i] += gc[i - 1];
  }
  __syncthreads();
  if (threadIdx.x < kC) bk[threadIdx.x] = float(double(beta[threadIdx.x]) * exp(gc[threadIdx.x]));
  // k.k^T and q.k^T, 4x4 entries per thread: rows ti + 16 x, columns tj + 16 y
  {
    const int ti = threadIdx.x / 16, tj = threadIdx.x % 16;
    float kk[4][4] = {}, qk[4][4] = {};
    for (int d = 0; d < dk; d += 4) {  // four d a load, summed in order d, d + 1, d + 2, d + 3
      float4 ki[4], qi[4], kj[4];
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        ki[x] = lds4(ks + (ti + 16 * x) * ld + d);
        qi[x] = lds4(qs + (ti + 16 * x) * ld + d);
        kj[x] = lds4(ks + (tj + 16 * x) * ld + d);
      }
#pragma unroll
      for (int x = 0; x < 4; ++x) {
#pragma unroll
        for (int y = 0; y <= x; ++y) {  // y > x: every j > i, entries that stay 0
          kk[x][y] = fmaf(ki[x].x, kj[y].x, kk[x][y]);
          kk[x][y] = fmaf(ki[x].y, kj[y].y, kk[x][y]);
          kk[x][y] = fmaf(ki[x].z, kj[y].z, kk[x][y]);
          kk[x][y] = fmaf(ki[x].w, kj[y].w, kk[x][y]);
          qk[x][y] = fmaf(qi[x].x, kj[y].x, qk[x][y]);
          qk[x][y] = fmaf(qi[x].y, kj[y].y, qk[x][y]);
          qk[x][y] = fmaf(qi[x].z, kj[y].z, qk[x][y]);
          qk[x][y] = fmaf(qi[x].w, kj[y].w, qk[x][y]);
        }
      }
    }
    float* p = sc.p + (int64_t(c) * nv + h) * kC * kC;
#pragma unroll
    for (int x = 0; x < 4; ++x) {
#pragma unroll
      for (int y = 0; y < 4; ++y) {
        const int i = ti + 16 * x, j = tj + 16 * y;
        const bool lower = y <= x && j <= i;  // y > x implies j > i
        const float decay = lower ? float(exp(gc[i] - gc[j])) : 0.0f;
        am[i * kLdA + j] = lower && j < i ? -(beta[i] * kk[x][y]) * decay : 0.0f;
        p[i * kC + j] = lower ? qk[x][y] * decay : 0.0f;
      }
    }
  }
  __syncthreads();  // am, bk complete
  // W = T diag(beta exp(gc)) K and U = T diag(beta) V, a column per thread
  const int64_t base = int64_t(c) * nv + h;
  for (int col = threadIdx.x; col < dk + dv; col += kThreads) {
    if (col < dk) {
      solve_column(am, bk, ks + col, ld, sc.w + base * kC * dk + col, dk);
    } else {
      const int e = col - dk;
      solve_column(am, beta, qkv + r0 * cols + 2 * int64_t(nk) * dk + int64_t(h) * dv + e, cols,
                   sc.u + base * kC * dv + e, dv);
    }
  }
  // Q' = exp(gc_i) q_i, K' = exp(gc_63 - gc_i) k_i, exp(gc_63)
  for (int i = warp; i < kC; i += kThreads / 32) {
    const float eq = float(exp(gc[i])), ek = float(exp(gc[kC - 1] - gc[i]));
    for (int d = lane; d < dk; d += 32) {
      sc.q[(base * kC + i) * dk + d] = qs[i * ld + d] * eq;
      sc.k[(base * kC + i) * dk + d] = ks[i * ld + d] * ek;
    }
  }
  if (threadIdx.x == 0) sc.gl[base] = float(exp(gc[kC - 1]));
}

// Starts copying n floats (a multiple of 4, 16-byte aligned) from global to shared memory
// (cp.async; the caller commits the group and waits for it).
__device__ __forceinline__ void stage_async(float* __restrict__ dst, const float* __restrict__ src, int n) {
  for (int i = threadIdx.x; i < n / 4; i += kThreads) __pipeline_memcpy_async(dst + 4 * i, src + 4 * i, 16);
}

// grid: (nv, n_runs, ceil(dv / 32)); block: 256 (8 warps; warp w owns chunk rows w + 8 r and the
// state's float4 row groups w + 8 m, lane = value column). dynamic smem: S [dk][32], W, Q', K'
// [64][dk], P [64][64], V' [64][32] floats. The next chunk's W, Q', P are copied in (cp.async)
// while the state update runs, and its K' while V' and the outputs are computed.
__global__ void __launch_bounds__(kThreads) gdr_scan_kernel(float* __restrict__ out, ChunkScratch sc,
                                                            float* __restrict__ ssm,
                                                            const RunDev* __restrict__ runs, int nv, int dk, int dv) {
  pdl_begin();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  float* S = reinterpret_cast<float*>(smem_raw);  // [dk][32]
  float* wb = S + dk * kBV;                       // [64][dk]
  float* qb = wb + kC * dk;                       // [64][dk]
  float* kb = qb + kC * dk;                       // [64][dk]
  float* P = kb + kC * dk;                        // [64][64]
  float* vn = P + kC * kC;                        // [64][32]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  constexpr int kWarps = kThreads / 32, kRows = kC / kWarps;
  const int h = blockIdx.x;
  const RunDev run = runs[blockIdx.y];
  const int e = int(blockIdx.z) * kBV + lane;
  const bool col = e < dv;
  float* state = ssm + int64_t(run.state_slot) * nv * dk * dv + int64_t(h) * dk * dv;
  const int n_groups = dk / 4;  // float4 row groups of S
  auto chunk = [&](int ch) { return int64_t(run.chunk0 + ch) * nv + h; };
  auto load_u = [&](int ch, float (&u)[kRows]) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) u[r] = col ? sc.u[(chunk(ch) * kC + warp + kWarps * r) * dv + e] : 0.0f;
  };
  // prologue: chunk 0's W, Q', P (group A), then its K' (group B)
  stage_async(wb, sc.w + chunk(0) * kC * dk, kC * dk);
  stage_async(qb, sc.q + chunk(0) * kC * dk, kC * dk);
  stage_async(P, sc.p + chunk(0) * kC * kC, kC * kC);
  __pipeline_commit();
  stage_async(kb, sc.k + chunk(0) * kC * dk, kC * dk);
  __pipeline_commit();
  float u[kRows];
  load_u(0, u);
  for (int d = warp; d < dk; d += kWarps) S[d * kBV + lane] = col ? state[int64_t(d) * dv + e] : 0.0f;
  for (int ch = 0; ch < run.n_chunks; ++ch) {
    const int64_t base = chunk(ch);
    __pipeline_wait_prior(1);  // this chunk's group A (its K' may still be in flight)
    __syncthreads();           // everyone's copies landed; S written
    // V' = U - W S
    float acc[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[r] = u[r];
    for (int d = 0; d < dk; d += 4) {
      const float s0 = S[d * kBV + lane], s1 = S[(d + 1) * kBV + lane], s2 = S[(d + 2) * kBV + lane],
                  s3 = S[(d + 3) * kBV + lane];
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const float4 w = *reinterpret_cast<const float4*>(wb + (warp + kWarps * r) * dk + d);
        acc[r] = fmaf(-w.x, s0, acc[r]);
        acc[r] = fmaf(-w.y, s1, acc[r]);
        acc[r] = fmaf(-w.z, s2, acc[r]);
        acc[r] = fmaf(-w.w, s3, acc[r]);
      }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) vn[(warp + kWarps * r) * kBV + lane] = acc[r];
    __syncthreads();  // vn complete
    // o_i = Q'_i S + sum_{j<=i} P[i][j] V'_j
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;
    for (int d = 0; d < dk; d += 4) {
      const float s0 = S[d * kBV + lane], s1 = S[(d + 1) * kBV + lane], s2 = S[(d + 2) * kBV + lane],
                  s3 = S[(d + 3) * kBV + lane];
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const float4 q = *reinterpret_cast<const float4*>(qb + (warp + kWarps * r) * dk + d);
        acc[r] = fmaf(q.x, s0, acc[r]);
        acc[r] = fmaf(q.y, s1, acc[r]);
        acc[r] = fmaf(q.z, s2, acc[r]);
        acc[r] = fmaf(q.w, s3, acc[r]);
      }
    }
    // P is zero above the diagonal, so a row runs over the columns up to its warp's last row (the
    // 4-column groups before kWarps (r + 1)): the rows' sums are independent chains the loop
    // interleaves, and the zeros a row adds (0 * V'_j) leave its sum's bits unchanged.
#pragma unroll
    for (int j = 0; j < kC; j += 4) {
      const float v0 = vn[j * kBV + lane], v1 = vn[(j + 1) * kBV + lane], v2 = vn[(j + 2) * kBV + lane],
                  v3 = vn[(j + 3) * kBV + lane];
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (j > kWarps * (r + 1) - 1) continue;  // row warp + kWarps r < kWarps (r + 1): P is 0 from j on
        const float4 pr = *reinterpret_cast<const float4*>(P + (warp + kWarps * r) * kC + j);
        acc[r] = fmaf(pr.x, v0, acc[r]);
        acc[r] = fmaf(pr.y, v1, acc[r]);
        acc[r] = fmaf(pr.z, v2, acc[r]);
        acc[r] = fmaf(pr.w, v3, acc[r]);
      }
    }
    if (col) {
#pragma unroll
      for (int r = 0; r < kRows; ++r)
        out[(int64_t(run.row_begin) + int64_t(ch) * kC + warp + kWarps * r) * nv * dv + int64_t(h) * dv + e] = acc[r];
    }
    __syncthreads();  // W, Q', P and the reads of S done
    const bool next = ch + 1 < run.n_chunks;
    if (next) {
      stage_async(wb, sc.w + chunk(ch + 1) * kC * dk, kC * dk);
      stage_async(qb, sc.q + chunk(ch + 1) * kC * dk, kC * dk);
      stage_async(P, sc.p + chunk(ch + 1) * kC * kC, kC * kC);
      __pipeline_commit();
      load_u(ch + 1, u);
      __pipeline_wait_prior(1);  // this chunk's K'
    } else {
      __pipeline_wait_prior(0);
    }
    __syncthreads();
    // S = exp(gc_63) S + sum_i K'_i V'_i^T, two float4 row groups at a time (8 chains)
    const float gl = sc.gl[base];
    for (int g = warp; g < n_groups; g += 2 * kWarps) {
      const int d = 4 * g, d2 = d + 4 * kWarps;
      const bool two = g + kWarps < n_groups;
      float s[8];
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        s[x] = gl * S[(d + x) * kBV + lane];
        s[4 + x] = two ? gl * S[(d2 + x) * kBV + lane] : 0.0f;
      }
#pragma unroll 4
      for (int i = 0; i < kC; ++i) {
        const float v = vn[i * kBV + lane];
        const float4 k = *reinterpret_cast<const float4*>(kb + i * dk + d);
        const float4 k2 = two ? *reinterpret_cast<const float4*>(kb + i * dk + d2) : make_float4(0, 0, 0, 0);
        s[0] = fmaf(k.x, v, s[0]);
        s[1] = fmaf(k.y, v, s[1]);
        s[2] = fmaf(k.z, v, s[2]);
        s[3] = fmaf(k.w, v, s[3]);
        s[4] = fmaf(k2.x, v, s[4]);
        s[5] = fmaf(k2.y, v, s[5]);
        s[6] = fmaf(k2.z, v, s[6]);
        s[7] = fmaf(k2.w, v, s[7]);
      }
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        S[(d + x) * kBV + lane] = s[x];
        if (two) S[(d2 + x) * kBV + lane] = s[4 + x];
      }
    }
    __syncthreads();  // K' free, S complete
    if (next) {
      stage_async(kb, sc.k + chunk(ch + 1) * kC * dk, kC * dk);
      __pipeline_commit();
    }
  }
  for (int d = warp; d < dk; d += kWarps)
    if (col) state[int64_t(d) * dv + e] = S[d * kBV + lane];
}

// ---- The prep and the scan on the tensor cores, at --matmul-precision bf16 ----
// The same chunk algebra with its products on mma.sync m16n8k16 (BF16 operands, F32
// accumulators), as the GEMMs and attention of that precision round. The prep forms k.k^T and
// q.k^T from BF16 copies of the normalized q and k, T = (I - A)^-1 in F32 on CUDA cores (blocked
// on 16 x 16 blocks: the diagonal blocks by substitution, then T_ij = T_ii sum_{j<=m<i} A_im T_mj
// a block diagonal at a time), and W = (T diag(beta exp(gc))) K, U = (T diag(beta)) V with the
// scaled T rounded to BF16; it writes W, Q', K', P in BF16 (the scan's operands) and U in F32.
// The scan: V' = U - W S, o = Q' S + P V', S <- gl S + K'^T V'; the state stays F32 in shared
// memory between chunks and is rounded to BF16 only as an operand; the next chunk's BF16 tiles
// are copied in (cp.async) into the other of two tile sets during the current chunk.
// Scan warps: phases 1 and 2 give warp w the rows 16 (w % 4) .. + 15 and value columns 16 (w / 4)
// .. + 15 (two n8 tiles); phase 3 gives it S's rows 16 w .. + 15 (and + 128 ...), all 32 columns.
constexpr int kMmaMaxDk = 128;
constexpr int kMmaMaxDv = 256;  // the prep's BF16 V tile
constexpr int kSp = kBV + 4;    // F32 state row stride: the B fragments' loads hit distinct banks
constexpr int kPLd = kC + 8;    // BF16 row stride of P, V'^T and T (144 bytes: ldmatrix rows on distinct banks)
constexpr int kTf = kC + 1;     // F32 row stride of A and T in the prep

// One set of a chunk's BF16 scan tiles: W, Q', K' [64][dk + 8], P [64][kPLd].
__host__ __device__ inline size_t scan_tile_set(int dk) { return 3 * size_t(kC) * (dk + 8) + size_t(kC) * kPLd; }

size_t scan_mma_smem(int dk) {
  return size_t(dk) * kSp * 4 + (2 * scan_tile_set(dk) + size_t(kBV) * kPLd) * 2;
}

int round16(int n) { return (n + 15) / 16 * 16; }

// gc, beta, beta exp(gc) [64], A and T [64][kTf], the off-diagonal blocks' partial products
// [3][16][16] floats; BF16 q, k [64][dk + 8], V [64][dvp + 8] (dvp = dv rounded up to 16,
// zero-padded) and T's two scaled copies [64][kPLd].
size_t prep_mma_smem(int dk, int dv) {
  return 3 * kC * 4 + 2 * size_t(kC) * kTf * 4 + 3 * 256 * 4 +
         (2 * size_t(kC) * (dk + 8) + size_t(kC) * (round16(dv) + 8) + 2 * size_t(kC) * kPLd) * 2;
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) { return bf16x2_bits(__floats2bfloat162_rn(lo, hi)); }

// The mma B fragment of the F32 state Sf ([dk][kSp]) for column n: rows k0, k0 + 1 (b0) and
// k0 + 8, k0 + 9 (b1), rounded to BF16.
__device__ __forceinline__ void state_frag(const float* __restrict__ Sf, int k0, int n, uint32_t& b0, uint32_t& b1) {
  b0 = pack_bf16(Sf[k0 * kSp + n], Sf[(k0 + 1) * kSp + n]);
  b1 = pack_bf16(Sf[(k0 + 8) * kSp + n], Sf[(k0 + 9) * kSp + n]);
}

// Starts copying a [64][cols] BF16 matrix (cols a multiple of 8, rows contiguous) into shared
// memory at row stride ld (cp.async, 16 bytes at a time; the caller commits and waits).
// The thread's first 16-byte piece is (row, piece) = divmod(threadIdx.x, cols / 8), and each step
// of kThreads pieces moves it by divmod(kThreads, cols / 8): no division in the loop.
__device__ __forceinline__ void stage_rows_async(__nv_bfloat16* __restrict__ dst, int ld,
                                                 const __nv_bfloat16* __restrict__ src, int cols) {
  const int per_row = cols / 8, step_rows = kThreads / per_row, step_pieces = kThreads % per_row;
  int row = threadIdx.x / per_row, piece = threadIdx.x % per_row;
  for (int i = threadIdx.x; i < kC * per_row; i += kThreads) {
    __pipeline_memcpy_async(dst + row * ld + 8 * piece, src + 8 * i, 16);
    row += step_rows;
    piece += step_pieces;
    if (piece >= per_row) {
      piece -= per_row;
      ++row;
    }
  }
}

// grid: (n_chunks, nv); block: 256; dk a multiple of 16, at most kMmaMaxDk; dv at most kMmaMaxDv.
// dynamic smem: prep_mma_smem(dk, dv). The gates and everything derived from them are F32 here
// (as are the norms, rsqrtf: 2 ulp): the BF16 rounding of every operand that follows is 2^15 times
// coarser, so the F32 prep's double arithmetic buys nothing at this precision.
__global__ void __launch_bounds__(kThreads, 2)
    gdr_prep_mma_kernel(ChunkScratchBf16 sc, const float* __restrict__ qkv, const float* __restrict__ a,
                        const float* __restrict__ b, const float* __restrict__ a_neg,
                        const float* __restrict__ dt_bias, const int32_t* __restrict__ chunk_rows, int nk, int nv,
                        int kdiv, int dk, int dv, float q_scale) {
  pdl_begin();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  float* gc = reinterpret_cast<float*>(smem_raw);  // [64]
  float* beta = gc + kC;                           // [64]
  float* bk = beta + kC;                           // [64] beta_i exp(gc_i)
  float* am = bk + kC;                             // [64][kTf]
  float* tf = am + kC * kTf;                       // [64][kTf]
  float* msh = tf + kC * kTf;                      // [3][256]
  const int ldb = dk + 8, dvp = (dv + 15) / 16 * 16, ldv = dvp + 8;
  __nv_bfloat16* Qb = reinterpret_cast<__nv_bfloat16*>(msh + 3 * 256);  // [64][ldb]
  __nv_bfloat16* Kb = Qb + kC * ldb;                                      // [64][ldb]
  __nv_bfloat16* Vb = Kb + kC * ldb;                                      // [64][ldv]
  __nv_bfloat16* Tk = Vb + kC * ldv;                                      // [64][kPLd] T diag(beta exp(gc))
  __nv_bfloat16* Tv = Tk + kC * kPLd;                                     // [64][kPLd] T diag(beta)
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c4 = lane & 3;
  const int c = blockIdx.x, h = blockIdx.y, kh = (h / kdiv) % nk;  // DeltaNetConfig::key_head
  const int64_t r0 = chunk_rows[c], base = int64_t(c) * nv + h;
  const int64_t cols = 2 * int64_t(nk) * dk + int64_t(nv) * dv;
  // Every warp: beta and the gate of rows lane and lane + 32, gc their running sum (a scan over
  // each half's lanes, then the first half's total into the second), the same bits in every warp,
  // so no warp waits for another; warp 0 leaves gc, beta and beta exp(gc) in shared memory.
  float gv[2], bv[2];
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int64_t i = r0 + lane + 32 * hh;
    bv[hh] = 1.0f / (1.0f + expf(-b[i * nv + h]));
    const float x = a[i * nv + h] + dt_bias[h];
    gv[hh] = a_neg[h] * (x > 20.0f ? x : log1pf(expf(x)));
  }
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const float y = __shfl_up_sync(0xffffffffu, gv[hh], o);
      if (lane >= o) gv[hh] += y;
    }
  }
  gv[1] += __shfl_sync(0xffffffffu, gv[0], 31);
  const float g_last = __shfl_sync(0xffffffffu, gv[1], 31);
  if (warp == 0) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      gc[lane + 32 * hh] = gv[hh];
      beta[lane + 32 * hh] = bv[hh];
      bk[lane + 32 * hh] = bv[hh] * expf(gv[hh]);
    }
  }
  // L2 norms, the BF16 tiles of q, k and V, and Q' = exp(gc) q, K' = exp(gc_63 - gc) k out: warp w
  // takes the rows w + 8 r, all eight at once so that their loads and sums overlap
  constexpr int kPer = kMmaMaxDk / 32, kVPer = kMmaMaxDv / 32, kRows = kC / 8;
  {
    float qv[kRows][kPer], kv[kRows][kPer], sq[kRows], sk[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float* row = qkv + (r0 + warp + 8 * r) * cols;
#pragma unroll
      for (int t = 0; t < kPer; ++t) {
        const int d = lane + 32 * t;
        qv[r][t] = d < dk ? row[int64_t(kh) * dk + d] : 0.0f;
        kv[r][t] = d < dk ? row[int64_t(nk) * dk + int64_t(kh) * dk + d] : 0.0f;
      }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      sq[r] = 0.0f;
      sk[r] = 0.0f;
#pragma unroll
      for (int t = 0; t < kPer; ++t) {
        sq[r] = fmaf(qv[r][t], qv[r][t], sq[r]);
        sk[r] = fmaf(kv[r][t], kv[r][t], sk[r]);
      }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      sq[r] = warp_sum(sq[r]);
      sk[r] = warp_sum(sk[r]);
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int i = warp + 8 * r;
      const float gi = __shfl_sync(0xffffffffu, i < 32 ? gv[0] : gv[1], i & 31);
      const float fq = rsqrtf(sq[r] + 1e-6f) * q_scale, fk = rsqrtf(sk[r] + 1e-6f);
      const float e_q = expf(gi), e_k = expf(g_last - gi);
      __nv_bfloat16* qo = sc.q + (base * kC + i) * dk;
      __nv_bfloat16* ko = sc.k + (base * kC + i) * dk;
#pragma unroll
      for (int t = 0; t < kPer; ++t) {
        const int d = lane + 32 * t;
        if (d >= dk) continue;
        const float qn = qv[r][t] * fq, kn = kv[r][t] * fk;
        Qb[i * ldb + d] = __float2bfloat16_rn(qn);
        Kb[i * ldb + d] = __float2bfloat16_rn(kn);
        qo[d] = __float2bfloat16_rn(qn * e_q);
        ko[d] = __float2bfloat16_rn(kn * e_k);
      }
    }
  }
  for (int pass = 0; pass < 2; ++pass) {  // V, zero-padded to dvp columns, four rows at a time
    float v[kRows / 2][kVPer];
#pragma unroll
    for (int r = 0; r < kRows / 2; ++r) {
      const float* vr = qkv + (r0 + warp + 8 * (kRows / 2 * pass + r)) * cols + 2 * int64_t(nk) * dk + int64_t(h) * dv;
#pragma unroll
      for (int t = 0; t < kVPer; ++t) v[r][t] = lane + 32 * t < dv ? vr[lane + 32 * t] : 0.0f;
    }
#pragma unroll
    for (int r = 0; r < kRows / 2; ++r) {
      const int i = warp + 8 * (kRows / 2 * pass + r);
#pragma unroll
      for (int t = 0; t < kVPer; ++t)
        if (lane + 32 * t < dvp) Vb[i * ldv + lane + 32 * t] = __float2bfloat16_rn(v[r][t]);
    }
  }
  __syncthreads();
  // k.k^T and q.k^T on the lower 16 x 16 blocks (bi, bj), bj <= bi: A = -beta_i (k_i.k_j) decay
  // below the diagonal, P = (q_i.k_j) decay on and below it, decay = exp(gc_i - gc_j). Forty
  // units, five a warp: (block, n8 half, k.k^T or q.k^T).
  for (int u = warp; u < 40; u += kThreads / 32) {
    const int job = u >> 2, t = (u >> 1) & 1;
    const bool is_q = u & 1;
    int bi = 0;
    while ((bi + 1) * (bi + 2) / 2 <= job) ++bi;
    const int bj = job - bi * (bi + 1) / 2;
    const __nv_bfloat16* lhs = is_q ? Qb : Kb;
    float acc[4] = {};
    for (int kt = 0; kt < dk / 16; ++kt) {
      uint32_t af[4], bb[4];
      ldsm_x4<false>(af, lhs + (16 * bi + (lane & 15)) * ldb + 16 * kt + (lane >> 4) * 8);
      ldsm_x4<false>(bb, Kb + (16 * bj + (lane >> 4) * 8 + (lane & 7)) * ldb + 16 * kt + ((lane >> 3) & 1) * 8);
      mma16816(acc, af, bb[2 * t], bb[2 * t + 1]);
    }
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int i = 16 * bi + g + 8 * hf, j = 16 * bj + 8 * t + 2 * c4;
      float pv[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const bool lower = j + e <= i;
        const float decay = lower ? expf(gc[i] - gc[j + e]) : 0.0f;
        if (is_q)
          pv[e] = lower ? acc[2 * hf + e] * decay : 0.0f;
        else
          am[i * kTf + j + e] = j + e < i ? -(beta[i] * acc[2 * hf + e]) * decay : 0.0f;
      }
      if (is_q) *reinterpret_cast<uint32_t*>(sc.p + (base * kC + i) * kC + j) = pack_bf16(pv[0], pv[1]);
    }
  }
  for (int i = tid; i < kC * kC / 2; i += kThreads) {  // P's blocks above the diagonal: 0
    const int row = i / (kC / 2), j = 2 * (i % (kC / 2));
    if (j / 16 > row / 16) *reinterpret_cast<uint32_t*>(sc.p + (base * kC + row) * kC + j) = 0u;
  }
  __syncthreads();  // A complete
  // T's diagonal blocks: column jj of block bd by substitution, t_i = sum_{m<i} A_im t_m (i > jj)
  if (tid < kC) {
    const int o = 16 * (tid >> 4), jj = tid & 15;
    float t[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // four chains; t_m = 0 for m < jj adds exact zeros
#pragma unroll
      for (int m = 0; m < i; ++m) part[m & 3] = fmaf(am[(o + i) * kTf + o + m], t[m], part[m & 3]);
      const float s = (part[0] + part[1]) + (part[2] + part[3]);
      t[i] = i < jj ? 0.0f : i == jj ? 1.0f : s;
    }
#pragma unroll
    for (int i = 0; i < 16; ++i) tf[(o + i) * kTf + o + jj] = t[i];
  }
  __syncthreads();
  // T's blocks below the diagonal, one block diagonal d at a time: M = sum_{j<=m<i} A_im T_mj,
  // then T_ij = T_ii M (i = j + d; T_ii is 0 above its diagonal, so the sum runs over all 16 m);
  // a thread per entry (r, cc) of each block, four chains a sum, the d's pairs interleaved
  {
    const int r = tid >> 4, cc = tid & 15;
#pragma unroll
    for (int d = 1; d < 4; ++d) {
      float part[3][4] = {};
#pragma unroll
      for (int m = 0; m < 16 * d; ++m) {
#pragma unroll
        for (int j = 0; j + d < 4; ++j)
          part[j][m & 3] = fmaf(am[(16 * (j + d) + r) * kTf + 16 * j + m], tf[(16 * j + m) * kTf + 16 * j + cc],
                                part[j][m & 3]);
      }
#pragma unroll
      for (int j = 0; j + d < 4; ++j) msh[j * 256 + tid] = (part[j][0] + part[j][1]) + (part[j][2] + part[j][3]);
      __syncthreads();
#pragma unroll
      for (int j = 0; j + d < 4; ++j) {
        part[j][0] = part[j][1] = part[j][2] = part[j][3] = 0.0f;
#pragma unroll
        for (int m = 0; m < 16; ++m)
          part[j][m & 3] = fmaf(tf[(16 * (j + d) + r) * kTf + 16 * (j + d) + m], msh[j * 256 + m * 16 + cc],
                                part[j][m & 3]);
      }
#pragma unroll
      for (int j = 0; j + d < 4; ++j)
        tf[(16 * (j + d) + r) * kTf + 16 * j + cc] = (part[j][0] + part[j][1]) + (part[j][2] + part[j][3]);
      __syncthreads();
    }
  }
  // T's columns scaled by beta exp(gc) and by beta, rounded to BF16 (0 above the diagonal blocks)
  for (int i = tid; i < kC * kC / 2; i += kThreads) {
    const int row = i / (kC / 2), m = 2 * (i % (kC / 2));
    const bool upper = m / 16 > row / 16;
    const float t0 = upper ? 0.0f : tf[row * kTf + m], t1 = upper ? 0.0f : tf[row * kTf + m + 1];
    *reinterpret_cast<uint32_t*>(Tk + row * kPLd + m) = pack_bf16(t0 * bk[m], t1 * bk[m + 1]);
    *reinterpret_cast<uint32_t*>(Tv + row * kPLd + m) = pack_bf16(t0 * beta[m], t1 * beta[m + 1]);
  }
  __syncthreads();
  // W = Tk K (written negated: the scan's V' = U + (-W) S then needs no negations) and U = Tv V:
  // warp w takes the rows 16 (w % 4) .. + 15 (T's blocks up to its diagonal) and every other
  // 16-column group from 16 (w / 4)
  const int mt = warp & 3, half = warp >> 2;
  auto product = [&](const __nv_bfloat16* tx, const __nv_bfloat16* x, int ldx, int n0, float (&acc)[2][4]) {
    for (int kt = 0; kt <= mt; ++kt) {
      uint32_t af[4], bb[4];
      ldsm_x4<false>(af, tx + (16 * mt + (lane & 15)) * kPLd + 16 * kt + (lane >> 4) * 8);
      ldsm_x4<true>(bb, x + (16 * kt + ((lane >> 3) & 1) * 8 + (lane & 7)) * ldx + n0 + (lane >> 4) * 8);
      mma16816(acc[0], af, bb[0], bb[1]);
      mma16816(acc[1], af, bb[2], bb[3]);
    }
  };
  const int i0 = 16 * mt + g, i1 = i0 + 8;
  for (int n0 = 16 * half; n0 < dk; n0 += 32) {
    float acc[2][4] = {};
    product(Tk, Kb, ldb, n0, acc);
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      const int col = n0 + 8 * t + 2 * c4;
      *reinterpret_cast<uint32_t*>(sc.w + (base * kC + i0) * dk + col) = pack_bf16(-acc[t][0], -acc[t][1]);
      *reinterpret_cast<uint32_t*>(sc.w + (base * kC + i1) * dk + col) = pack_bf16(-acc[t][2], -acc[t][3]);
    }
  }
  for (int n0 = 16 * half; n0 < dvp; n0 += 32) {
    float acc[2][4] = {};
    product(Tv, Vb, ldv, n0, acc);
#pragma unroll
    for (int t = 0; t < 2; ++t) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int col = n0 + 8 * t + 2 * c4 + e;
        if (col < dv) {
          sc.u[(base * kC + i0) * dv + col] = acc[t][e];
          sc.u[(base * kC + i1) * dv + col] = acc[t][2 + e];
        }
      }
    }
  }
  if (tid == 0) sc.gl[base] = expf(gc[kC - 1]);
}

// grid and block as gdr_scan_kernel; dk a multiple of 16, at most kMmaMaxDk. dynamic smem:
// scan_mma_smem(dk).
__global__ void __launch_bounds__(kThreads) gdr_scan_mma_kernel(float* __restrict__ out, ChunkScratchBf16 sc,
                                                                float* __restrict__ ssm,
                                                                const RunDev* __restrict__ runs, int nv, int dk,
                                                                int dv) {
  pdl_begin();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int ldb = dk + 8;
  float* Sf = reinterpret_cast<float*>(smem_raw);                       // [dk][kSp]
  __nv_bfloat16* tiles = reinterpret_cast<__nv_bfloat16*>(Sf + dk * kSp);  // two sets of W, Q', K', P
  const size_t set = scan_tile_set(dk);
  __nv_bfloat16* Vt = tiles + 2 * set;  // V'^T [32][kPLd]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
  const int h = blockIdx.x;
  const RunDev run = runs[blockIdx.y];
  const int e0 = int(blockIdx.z) * kBV;
  float* state = ssm + int64_t(run.state_slot) * nv * dk * dv + int64_t(h) * dk * dv;
  auto chunk = [&](int ch) { return int64_t(run.chunk0 + ch) * nv + h; };
  auto stage_chunk = [&](int ch, __nv_bfloat16* W) {
    __nv_bfloat16 *Q = W + kC * ldb, *K = Q + kC * ldb, *P = K + kC * ldb;
    stage_rows_async(W, ldb, sc.w + chunk(ch) * kC * dk, dk);
    stage_rows_async(Q, ldb, sc.q + chunk(ch) * kC * dk, dk);
    stage_rows_async(K, ldb, sc.k + chunk(ch) * kC * dk, dk);
    stage_rows_async(P, kPLd, sc.p + chunk(ch) * kC * kC, kC);
    __pipeline_commit();
  };
  stage_chunk(0, tiles);
  for (int i = threadIdx.x; i < dk * kBV; i += kThreads) {
    const int d = i / kBV, n = i % kBV;
    Sf[d * kSp + n] = e0 + n < dv ? state[int64_t(d) * dv + e0 + n] : 0.0f;
  }
  const int mt = warp & 3, nb = (warp >> 2) * 16;  // phases 1, 2
  const int r0 = 16 * mt + g, r1 = r0 + 8;
  const int ksteps = dk / 16;
  float u_next[2][4];  // the C fragments of U's rows r0, r1 at the warp's columns
  auto load_u = [&](int ch) {
    const float* u = sc.u + chunk(ch) * kC * dv;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int e = e0 + nb + 8 * j + 2 * c;
      u_next[j][0] = e < dv ? u[int64_t(r0) * dv + e] : 0.0f;
      u_next[j][1] = e + 1 < dv ? u[int64_t(r0) * dv + e + 1] : 0.0f;
      u_next[j][2] = e < dv ? u[int64_t(r1) * dv + e] : 0.0f;
      u_next[j][3] = e + 1 < dv ? u[int64_t(r1) * dv + e + 1] : 0.0f;
    }
  };
  load_u(0);
  float gl_next = sc.gl[chunk(0)];
  for (int ch = 0; ch < run.n_chunks; ++ch) {
    const float gl_now = gl_next;
    __nv_bfloat16* Wb = tiles + (ch & 1) * set;
    __nv_bfloat16 *Qb = Wb + kC * ldb, *Kb = Qb + kC * ldb, *Pb = Kb + kC * ldb;
    __pipeline_wait_prior(0);
    __syncthreads();  // this chunk's tiles landed; S complete; the other set's readers (the chunk before) done
    if (ch + 1 < run.n_chunks) stage_chunk(ch + 1, tiles + ((ch + 1) & 1) * set);
    // phase 1: V' = U - W S = U + (-W) S (U loaded a chunk ahead)
    float v[2][4];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
#pragma unroll
      for (int x = 0; x < 4; ++x) v[j][x] = u_next[j][x];
    }
    if (ch + 1 < run.n_chunks) {
      load_u(ch + 1);
      gl_next = sc.gl[chunk(ch + 1)];
    }
#pragma unroll 4
    for (int kt = 0; kt < ksteps; ++kt) {
      uint32_t a[4];
      ldsm_x4<false>(a, Wb + (16 * mt + (lane & 15)) * ldb + 16 * kt + (lane >> 4) * 8);
      const int k0 = 16 * kt + 2 * c;
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        uint32_t b0, b1;
        state_frag(Sf, k0, nb + 8 * j + g, b0, b1);
        mma16816(v[j], a, b0, b1);
      }
    }
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int n = nb + 8 * j + 2 * c;
      Vt[n * kPLd + r0] = __float2bfloat16_rn(v[j][0]);
      Vt[(n + 1) * kPLd + r0] = __float2bfloat16_rn(v[j][1]);
      Vt[n * kPLd + r1] = __float2bfloat16_rn(v[j][2]);
      Vt[(n + 1) * kPLd + r1] = __float2bfloat16_rn(v[j][3]);
    }
    __syncthreads();  // V'^T complete
    // phase 2: o = Q' S + P V' (P's 16-column blocks past the warp's rows are 0)
    float o[2][4] = {};
#pragma unroll 4
    for (int kt = 0; kt < ksteps; ++kt) {
      uint32_t a[4];
      ldsm_x4<false>(a, Qb + (16 * mt + (lane & 15)) * ldb + 16 * kt + (lane >> 4) * 8);
      const int k0 = 16 * kt + 2 * c;
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        uint32_t b0, b1;
        state_frag(Sf, k0, nb + 8 * j + g, b0, b1);
        mma16816(o[j], a, b0, b1);
      }
    }
    for (int kt = 0; kt <= mt; ++kt) {
      uint32_t a[4];
      ldsm_x4<false>(a, Pb + (16 * mt + (lane & 15)) * kPLd + 16 * kt + (lane >> 4) * 8);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const __nv_bfloat16* vt = Vt + (nb + 8 * j + g) * kPLd + 16 * kt + 2 * c;
        mma16816(o[j], a, *reinterpret_cast<const uint32_t*>(vt), *reinterpret_cast<const uint32_t*>(vt + 8));
      }
    }
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int e = e0 + nb + 8 * j + 2 * c;
      float* o0 = out + (int64_t(run.row_begin) + int64_t(ch) * kC + r0) * nv * dv + int64_t(h) * dv + e;
      float* o1 = o0 + int64_t(8) * nv * dv;
      if (e < dv) {
        o0[0] = o[j][0];
        o1[0] = o[j][2];
      }
      if (e + 1 < dv) {
        o0[1] = o[j][1];
        o1[1] = o[j][3];
      }
    }
    __syncthreads();  // the reads of S done
    // phase 3: S = gl S + K'^T V' (A = K'^T by transposing loads of K')
    const float gl = gl_now;
    for (int m3 = warp; m3 < ksteps; m3 += kThreads / 32) {
      const int d0 = 16 * m3 + g, d1 = d0 + 8;
      float st[4][4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int n = 8 * j + 2 * c;
        st[j][0] = gl * Sf[d0 * kSp + n];
        st[j][1] = gl * Sf[d0 * kSp + n + 1];
        st[j][2] = gl * Sf[d1 * kSp + n];
        st[j][3] = gl * Sf[d1 * kSp + n + 1];
      }
#pragma unroll
      for (int kt = 0; kt < kC / 16; ++kt) {
        uint32_t a[4];
        ldsm_x4<true>(a, Kb + (16 * kt + (lane & 7) + (lane >> 4) * 8) * ldb + 16 * m3 + ((lane >> 3) & 1) * 8);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const __nv_bfloat16* vt = Vt + (8 * j + g) * kPLd + 16 * kt + 2 * c;
          mma16816(st[j], a, *reinterpret_cast<const uint32_t*>(vt), *reinterpret_cast<const uint32_t*>(vt + 8));
        }
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int n = 8 * j + 2 * c;
        Sf[d0 * kSp + n] = st[j][0];
        Sf[d0 * kSp + n + 1] = st[j][1];
        Sf[d1 * kSp + n] = st[j][2];
        Sf[d1 * kSp + n + 1] = st[j][3];
      }
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < dk * kBV; i += kThreads) {
    const int d = i / kBV, n = i % kBV;
    if (e0 + n < dv) state[int64_t(d) * dv + e0 + n] = Sf[d * kSp + n];
  }
}

}  // namespace

bool gdr_chunked_supports(const DeltaNetConfig& cfg) {
  return cfg.k_head_dim % 4 == 0 && cfg.k_head_dim <= kMaxDk && cfg.v_head_dim > 0;
}

void gated_delta_rule_chunked(const Context& ctx, const Tensor& out, const Tensor& qkv, const Tensor& a,
                              const Tensor& b, const Tensor& a_neg, const Tensor& dt_bias, const Tensor& ssm,
                              const DeltaNetConfig& cfg, const std::vector<GdrChunkRun>& runs) {
  KCHECK_MSG(gdr_chunked_supports(cfg), "gated_delta_rule_chunked: key head size ", cfg.k_head_dim,
             " (want a multiple of 4, at most ", kMaxDk, ")");
  const int nk = cfg.n_k_heads, nv = cfg.n_v_heads, dk = cfg.k_head_dim, dv = cfg.v_head_dim;
  // At --matmul-precision bf16 the prep's and the scan's products go to the tensor cores (BF16
  // operands) and W, Q', K', P pass between them in BF16.
  const bool mma = ctx.matmul_precision == MatmulPrecision::kBf16 && dk % 16 == 0 && dk <= kMmaMaxDk &&
                   dv <= kMmaMaxDv;
  // Scratch bytes a chunk (ChunkScratchOf): W, Q', K' [64, dk] and P [64, 64] (F32, or BF16 for
  // the tensor cores), U [64, dv] and exp(gc_63) in F32, for each value head.
  const size_t el = mma ? 2 : 4;
  const size_t per_chunk = size_t(nv) * (el * (3 * size_t(kC) * dk + size_t(kC) * kC) + 4 * size_t(kC) * dv + 4);
  // Groups of chunks whose scratch fits kScratchCap; a run crossing a group's end continues in the
  // next group (its state goes through ssm in F32, which is what S holds anyway).
  const int64_t group_cap = std::max<int64_t>(1, int64_t(kScratchCap / per_chunk));
  std::vector<int32_t> meta;  // per group: chunk rows, then its RunDev entries
  struct Group {
    size_t rows_at, runs_at;
    int32_t n_chunks, n_runs;
  };
  std::vector<Group> groups;
  std::vector<int32_t> rows;
  std::vector<RunDev> gruns;
  auto flush = [&] {
    if (rows.empty()) return;
    Group g{meta.size(), 0, int32_t(rows.size()), int32_t(gruns.size())};
    meta.insert(meta.end(), rows.begin(), rows.end());
    while (meta.size() % 4) meta.push_back(0);
    g.runs_at = meta.size();
    for (const RunDev& r : gruns) meta.insert(meta.end(), {r.row_begin, r.n_chunks, r.state_slot, r.chunk0});
    groups.push_back(g);
    rows.clear();
    gruns.clear();
  };
  for (const GdrChunkRun& run : runs) {
    KCHECK(run.n_chunks > 0 && run.state_slot >= 0 && run.state_slot < ssm.rows);
    int32_t done = 0;
    while (done < run.n_chunks) {
      if (int64_t(rows.size()) == group_cap) flush();
      const int32_t n = int32_t(std::min<int64_t>(run.n_chunks - done, group_cap - int64_t(rows.size())));
      const int32_t row0 = run.row_begin + done * kC;
      gruns.push_back({row0, n, run.state_slot, int32_t(rows.size())});
      for (int32_t i = 0; i < n; ++i) rows.push_back(row0 + i * kC);
      done += n;
    }
  }
  flush();
  if (groups.empty()) return;
  const auto* meta_dev = static_cast<const int32_t*>(ctx.upload_scratch(kSlotGdrMeta, meta.data(), meta.size() * 4));
  int64_t max_chunks = 0;
  for (const Group& g : groups) max_chunks = std::max<int64_t>(max_chunks, g.n_chunks);
  auto* bytes = static_cast<unsigned char*>(ctx.scratch->get(kSlotGdrChunks, size_t(max_chunks) * per_chunk));
  const size_t n_heads = size_t(max_chunks) * nv;  // (chunk, head) pairs the scratch holds
  auto run_dev = [&](const Group& g) { return reinterpret_cast<const RunDev*>(meta_dev + g.runs_at); };
  if (mma) {
    const ChunkScratchBf16 sc = carve_scratch<__nv_bfloat16>(bytes, n_heads, dk, dv);
    const size_t prep_smem = prep_mma_smem(dk, dv), scan_smem = scan_mma_smem(dk);
    CUDA_CHECK(cudaFuncSetAttribute(gdr_prep_mma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(prep_smem)));
    CUDA_CHECK(cudaFuncSetAttribute(gdr_scan_mma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(scan_smem)));
    for (const Group& g : groups) {
      launch(gdr_prep_mma_kernel, dim3(unsigned(g.n_chunks), unsigned(nv)), kThreads, prep_smem, ctx.stream, sc,
             qkv.f32(), a.f32(), b.f32(), a_neg.f32(), dt_bias.f32(), meta_dev + g.rows_at, nk, nv,
             cfg.key_head_div(), dk, dv, float(1.0 / std::sqrt(double(dk))));
      CUDA_CHECK_LAUNCH();
      launch(gdr_scan_mma_kernel, dim3(unsigned(nv), unsigned(g.n_runs), unsigned(ceil_div(dv, kBV))), kThreads,
             scan_smem, ctx.stream, out.f32(), sc, ssm.f32(), run_dev(g), nv, dk, dv);
      CUDA_CHECK_LAUNCH();
    }
    return;
  }
  const ChunkScratch sc = carve_scratch<float>(bytes, n_heads, dk, dv);
  const size_t prep_smem = kC * sizeof(double) + (2 * size_t(kC) * (dk + 4) + size_t(kC) * kLdA + 2 * kC) * 4;
  const size_t scan_smem = (size_t(dk) * kBV + 3 * size_t(kC) * dk + size_t(kC) * kC + size_t(kC) * kBV) * 4;
  CUDA_CHECK(cudaFuncSetAttribute(gdr_prep_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(prep_smem)));
  CUDA_CHECK(cudaFuncSetAttribute(gdr_scan_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(scan_smem)));
  for (const Group& g : groups) {
    launch(gdr_prep_kernel, dim3(unsigned(g.n_chunks), unsigned(nv)), kThreads, prep_smem, ctx.stream, sc, qkv.f32(),
           a.f32(), b.f32(), a_neg.f32(), dt_bias.f32(), meta_dev + g.rows_at, nk, nv, cfg.key_head_div(), dk, dv);
    CUDA_CHECK_LAUNCH();
    launch(gdr_scan_kernel, dim3(unsigned(nv), unsigned(g.n_runs), unsigned(ceil_div(dv, kBV))), kThreads, scan_smem,
           ctx.stream, out.f32(), sc, ssm.f32(), run_dev(g), nv, dk, dv);
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace kestrel::cuda
