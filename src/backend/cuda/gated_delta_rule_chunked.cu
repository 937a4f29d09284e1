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
// At --matmul-precision bf16 their places are taken by gdr_prep_mma_kernel and gdr_scan_mma_kernel
// (gated_delta_rule_chunked_mma.cu): the same algebra with its products on the tensor cores (BF16
// operands, F32 accumulators and state; T on CUDA cores in F32), W, Q', K', P passed between them
// in BF16.
// Every sum runs in a fixed order that depends only on the chunk's own data and incoming state,
// so a chunk computes the same bits whatever else the step holds or how the prefill was split
// on the grid. The state stays F32 throughout (the recurrent kernel rounds it to F32 at every
// grid point too). Precision: docs/cuda.md, tests/gpu/deltanet_test.cc.
#include <cuda_pipeline.h>

#include <algorithm>
#include <cmath>

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/gated_delta_rule_chunked.h"
#include "backend/cuda/gated_delta_rule_chunked_parts.cuh"

namespace kestrel::cuda {
namespace gdr_chunked {
namespace {

constexpr int kMaxDk = 192;                        // the scan block's shared memory
constexpr size_t kScratchCap = size_t(256) << 20;  // chunk scratch per group of chunks

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

}  // namespace
}  // namespace gdr_chunked

bool gdr_chunked_supports(const DeltaNetConfig& cfg) {
  return cfg.k_head_dim % 4 == 0 && cfg.k_head_dim <= gdr_chunked::kMaxDk && cfg.v_head_dim > 0;
}

void gated_delta_rule_chunked(const Context& ctx, const Tensor& out, const Tensor& qkv, const Tensor& a,
                              const Tensor& b, const Tensor& a_neg, const Tensor& dt_bias, const Tensor& ssm,
                              const DeltaNetConfig& cfg, const std::vector<GdrChunkRun>& runs) {
  using namespace gdr_chunked;
  KCHECK_MSG(gdr_chunked_supports(cfg), "gated_delta_rule_chunked: key head size ", cfg.k_head_dim,
             " (want a multiple of 4, at most ", kMaxDk, ")");
  const int nk = cfg.n_k_heads, nv = cfg.n_v_heads, dk = cfg.k_head_dim, dv = cfg.v_head_dim;
  // At --matmul-precision bf16 the prep's and the scan's products go to the tensor cores (BF16
  // operands) and W, Q', K', P pass between them in BF16.
  const bool mma = ctx.matmul_precision == MatmulPrecision::kBf16 && mma_takes(dk, dv);
  // Scratch bytes a chunk (ChunkScratchOf): W, Q', K' [64, dk] and P [64, 64] (F32, or BF16 for
  // the tensor cores), U [64, dv] and exp(gc_63) in F32, for each value head.
  const size_t el = mma ? 2 : 4;
  const size_t per_chunk = size_t(nv) * (el * (3 * size_t(kC) * dk + size_t(kC) * kC) + 4 * size_t(kC) * dv + 4);
  // Groups of chunks whose scratch fits kScratchCap; a run crossing a group's end continues in the
  // next group (its state goes through ssm in F32, which is what S holds anyway).
  const int64_t group_cap = std::max<int64_t>(1, int64_t(kScratchCap / per_chunk));
  std::vector<int32_t> meta;  // per group: chunk rows, then its RunDev entries
  struct Planned {
    size_t rows_at, runs_at;
    int32_t n_chunks, n_runs;
  };
  std::vector<Planned> planned;
  std::vector<int32_t> rows;
  std::vector<RunDev> gruns;
  auto flush = [&] {
    if (rows.empty()) return;
    Planned g{meta.size(), 0, int32_t(rows.size()), int32_t(gruns.size())};
    meta.insert(meta.end(), rows.begin(), rows.end());
    while (meta.size() % 4) meta.push_back(0);
    g.runs_at = meta.size();
    for (const RunDev& r : gruns) meta.insert(meta.end(), {r.row_begin, r.n_chunks, r.state_slot, r.chunk0});
    planned.push_back(g);
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
  if (planned.empty()) return;
  const auto* meta_dev = static_cast<const int32_t*>(ctx.upload_scratch(kSlotGdrMeta, meta.data(), meta.size() * 4));
  std::vector<Group> groups;
  int64_t max_chunks = 0;
  for (const Planned& g : planned) {
    groups.push_back({meta_dev + g.rows_at, reinterpret_cast<const RunDev*>(meta_dev + g.runs_at), g.n_chunks, g.n_runs});
    max_chunks = std::max<int64_t>(max_chunks, g.n_chunks);
  }
  auto* bytes = static_cast<unsigned char*>(ctx.scratch->get(kSlotGdrChunks, size_t(max_chunks) * per_chunk));
  const size_t n_heads = size_t(max_chunks) * nv;  // (chunk, head) pairs the scratch holds
  const Args args{.out = out.f32(),
                  .qkv = qkv.f32(),
                  .a = a.f32(),
                  .b = b.f32(),
                  .a_neg = a_neg.f32(),
                  .dt_bias = dt_bias.f32(),
                  .ssm = ssm.f32(),
                  .nk = nk,
                  .nv = nv,
                  .kdiv = cfg.key_head_div(),
                  .dk = dk,
                  .dv = dv};
  if (mma) {
    run_mma(ctx.stream, carve_scratch<__nv_bfloat16>(bytes, n_heads, dk, dv), args, groups);
    return;
  }
  const ChunkScratch sc = carve_scratch<float>(bytes, n_heads, dk, dv);
  const size_t prep_smem = kC * sizeof(double) + (2 * size_t(kC) * (dk + 4) + size_t(kC) * kLdA + 2 * kC) * 4;
  const size_t scan_smem = (size_t(dk) * kBV + 3 * size_t(kC) * dk + size_t(kC) * kC + size_t(kC) * kBV) * 4;
  CUDA_CHECK(cudaFuncSetAttribute(gdr_prep_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(prep_smem)));
  CUDA_CHECK(cudaFuncSetAttribute(gdr_scan_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(scan_smem)));
  for (const Group& g : groups) {
    launch(gdr_prep_kernel, dim3(unsigned(g.n_chunks), unsigned(nv)), kThreads, prep_smem, ctx.stream, sc, args.qkv,
           args.a, args.b, args.a_neg, args.dt_bias, g.rows, nk, nv, args.kdiv, dk, dv);
    CUDA_CHECK_LAUNCH();
    launch(gdr_scan_kernel, dim3(unsigned(nv), unsigned(g.n_runs), unsigned(ceil_div(dv, kBV))), kThreads, scan_smem,
           ctx.stream, args.out, sc, args.ssm, g.runs, nv, dk, dv);
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace kestrel::cuda
