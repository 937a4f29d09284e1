// gated_delta_rule, chunked: the prep and the scan on the tensor cores, at --matmul-precision
// bf16 (the algebra and the F32 pair: gated_delta_rule_chunked.cu).
#include <cuda_pipeline.h>

#include <cmath>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/gated_delta_rule_chunked_parts.cuh"
#include "backend/cuda/mma.cuh"

namespace kestrel::cuda::gdr_chunked {
namespace {

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

__host__ __device__ inline int round16(int n) { return (n + 15) / 16 * 16; }

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
  const int ldb = dk + 8, dvp = round16(dv), ldv = dvp + 8;
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
    const float gl = gl_next;  // this chunk's exp(gc_63), loaded a chunk ahead
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

bool mma_takes(int dk, int dv) { return dk % 16 == 0 && dk <= kMmaMaxDk && dv <= kMmaMaxDv; }

void run_mma(cudaStream_t stream, const ChunkScratchBf16& sc, const Args& x, const std::vector<Group>& groups) {
  const size_t prep_smem = prep_mma_smem(x.dk, x.dv), scan_smem = scan_mma_smem(x.dk);
  CUDA_CHECK(cudaFuncSetAttribute(gdr_prep_mma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(prep_smem)));
  CUDA_CHECK(cudaFuncSetAttribute(gdr_scan_mma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(scan_smem)));
  for (const Group& g : groups) {
    launch(gdr_prep_mma_kernel, dim3(unsigned(g.n_chunks), unsigned(x.nv)), kThreads, prep_smem, stream, sc, x.qkv,
           x.a, x.b, x.a_neg, x.dt_bias, g.rows, x.nk, x.nv, x.kdiv, x.dk, x.dv, float(1.0 / std::sqrt(double(x.dk))));
    CUDA_CHECK_LAUNCH();
    launch(gdr_scan_mma_kernel, dim3(unsigned(x.nv), unsigned(g.n_runs), unsigned(ceil_div(x.dv, kBV))), kThreads,
           scan_smem, stream, x.out, sc, x.ssm, g.runs, x.nv, x.dk, x.dv);
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace kestrel::cuda::gdr_chunked
