// attention_prefill: the tiled (flash) attention kernel for steps with long prefill chunks, on
// the write-first paged path of attention.cu (the step's k/v already sit in the cache).
//
// A block owns a tile of kBr = 64 consecutive new rows of one sequence for one query head; its
// 4 warps own 16 rows each. The keys the tile's rows attend ([first_key(min pos), max pos]) are
// walked in key tiles of 64 positions (32 for split head_dim 256) aligned to absolute multiples
// of the tile, read through the block table. Q, K, V and the softmax weights P enter the tensor
// cores (wmma 16x16x16, BF16 in, F32 accumulate) for S = Q K^T and O += P V; the online softmax
// (running max m, sum l, rescale of O) runs in F32 per row, with O held in shared memory in F32.
// Masks per (row, key): causal (key <= the row's position) and the sliding window (key > pos -
// window).
//
// Precision, by the matmul precision (attention_prefill_applies): with kBf16 each operand is one
// BF16 term (unit roundoff 2^-9; BF16-level parity); with the multi-term precisions (kBf16x3,
// the default, and kBf16x2) each operand is split into hi = bf16(x) and lo = bf16(x - hi), and a
// product is a_lo b_hi + a_hi b_lo + a_hi b_hi: ~2^-16 relative per product, three times the
// tensor-core work. kExact keeps the F32 split-KV kernel of attention.cu.
//
// A key tile that masks all of a row's keys leaves that row's m, l and O bit-identical (p = 0,
// rescale factor exactly 1), and the rows of a tile never mix in the mma, so a row's result
// depends only on its position, its q and the cache, not on which rows share its tile or step:
// prefill split anywhere among steps that take this kernel gives bit-identical rows.
#include <mma.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/attention_prefill.h"
#include "backend/cuda/device_util.cuh"

namespace kestrel::cuda {
namespace {

using namespace nvcuda;
using bf16 = __nv_bfloat16;

constexpr int kBr = 64;       // new rows per block
constexpr int kWarps = 4;     // 16 rows each
constexpr int kMinRows = 64;  // a step takes this kernel when one of its sequences has this many new rows

constexpr size_t align128(size_t x) { return (x + 127) / 128 * 128; }

// Shared memory layout for head size HD, with each BF16 operand once (SPLIT false) or as a hi/lo
// pair (SPLIT true). Row strides are padded against bank conflicts; every wmma pointer stays
// 32-byte aligned. Keys per tile: 64, or 32 for split head_dim 256 (to fit the 227 KB an SM has).
template <int HD, bool SPLIT>
struct Layout {
  static constexpr int bc = (SPLIT && HD == 256) ? 32 : 64;  // keys per key tile
  static constexpr int terms = SPLIT ? 2 : 1;
  static constexpr int ldh = HD + 8;   // Q, K, V rows (bf16)
  static constexpr int lds = bc + 4;   // scores (f32)
  static constexpr int ldp = bc + 8;   // probabilities (bf16)
  static constexpr int ldo = HD + 4;   // output accumulator (f32)
  static constexpr size_t q_term = align128(size_t(kBr) * ldh * sizeof(bf16));
  static constexpr size_t kv_term = align128(size_t(bc) * ldh * sizeof(bf16));
  static constexpr size_t p_term = align128(size_t(kBr) * ldp * sizeof(bf16));
  static constexpr size_t q = 0;
  static constexpr size_t k = q + terms * q_term;
  static constexpr size_t v = k + terms * kv_term;
  static constexpr size_t s = v + terms * kv_term;
  static constexpr size_t p = s + align128(size_t(kBr) * lds * sizeof(float));
  static constexpr size_t o = p + terms * p_term;
  static constexpr size_t m = o + align128(size_t(kBr) * ldo * sizeof(float));
  static constexpr size_t l = m + kBr * sizeof(float);
  static constexpr size_t pos = l + kBr * sizeof(float);
  static constexpr size_t bytes = pos + kBr * sizeof(int);
};
static_assert(Layout<256, true>::bytes <= 227 * 1024, "split head_dim 256 must fit one SM's shared memory");
static_assert(Layout<256, false>::bytes <= 227 * 1024, "head_dim 256 must fit one SM's shared memory");

__device__ __forceinline__ int first_key_of(int pos, int window) {
  return (window > 0 && pos - window + 1 > 0) ? pos - window + 1 : 0;
}

// Stores 4 floats as BF16 at hi (8-byte aligned), and with SPLIT their remainders x - bf16(x),
// rounded to BF16, at lo: hi + lo carries ~16 significant bits of x.
template <bool SPLIT>
__device__ __forceinline__ void store_terms(bf16* hi, bf16* lo, float4 x) {
  const __nv_bfloat162 a = __floats2bfloat162_rn(x.x, x.y), b = __floats2bfloat162_rn(x.z, x.w);
  reinterpret_cast<__nv_bfloat162*>(hi)[0] = a;
  reinterpret_cast<__nv_bfloat162*>(hi)[1] = b;
  if constexpr (SPLIT) {
    const float2 fa = __bfloat1622float2(a), fb = __bfloat1622float2(b);
    reinterpret_cast<__nv_bfloat162*>(lo)[0] = __floats2bfloat162_rn(x.x - fa.x, x.y - fa.y);
    reinterpret_cast<__nv_bfloat162*>(lo)[1] = __floats2bfloat162_rn(x.z - fb.x, x.w - fb.y);
  }
}

// acc += A B on the tensor cores, A and B given as BF16 terms (SPLIT: hi/lo pairs, whose product
// is taken as a_lo b_hi + a_hi b_lo + a_hi b_hi, the small terms first; the missing a_lo b_lo and
// the split's remainders are ~2^-16 relative).
template <bool SPLIT, typename BLayout>
__device__ __forceinline__ void mma_terms(
    wmma::fragment<wmma::accumulator, 16, 16, 16, float>& acc,
    const wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>* a,
    const bf16* b_hi, const bf16* b_lo, int ldb) {
  wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, BLayout> bh;
  wmma::load_matrix_sync(bh, b_hi, ldb);
  if constexpr (SPLIT) {
    wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, BLayout> bl;
    wmma::load_matrix_sync(bl, b_lo, ldb);
    wmma::mma_sync(acc, a[1], bh, acc);
    wmma::mma_sync(acc, a[0], bl, acc);
  }
  wmma::mma_sync(acc, a[0], bh, acc);
}

// grid: (ceil(max new rows / kBr), n_seqs, n_heads); block: kWarps warps; dynamic smem:
// Layout<HD, SPLIT>::bytes. Tiles past a sequence's new rows exit.
template <int HD, bool SPLIT>
__global__ void __launch_bounds__(kWarps * 32)
    flash_prefill_kernel(float* __restrict__ out,                                        // [T, n_heads * HD]
                         const float* __restrict__ q,                                    // [T, n_heads * HD]
                         const float* __restrict__ kc, const float* __restrict__ vc,     // [cache rows, n_kv * HD]
                         const int32_t* __restrict__ positions,                          // [T]
                         const SeqStep* __restrict__ seqs, const int32_t* __restrict__ block_tables,
                         int block_size, int n_heads, int group, float scale, int window) {
  using L = Layout<HD, SPLIT>;
  constexpr int kBc = L::bc, kT = L::terms;
  constexpr int kKeysPerLane = kBc / 32;
  extern __shared__ __align__(128) unsigned char smem[];
  // term t of each operand at base + t * term bytes (t = 0: hi, 1: lo)
  auto qs = [&](int t) { return reinterpret_cast<bf16*>(smem + L::q + t * L::q_term); };
  auto ks = [&](int t) { return reinterpret_cast<bf16*>(smem + L::k + t * L::kv_term); };
  auto vs = [&](int t) { return reinterpret_cast<bf16*>(smem + L::v + t * L::kv_term); };
  auto ps = [&](int t) { return reinterpret_cast<bf16*>(smem + L::p + t * L::p_term); };
  float* ss = reinterpret_cast<float*>(smem + L::s);
  float* os = reinterpret_cast<float*>(smem + L::o);
  float* ms = reinterpret_cast<float*>(smem + L::m);
  float* ls = reinterpret_cast<float*>(smem + L::l);
  int* rpos = reinterpret_cast<int*>(smem + L::pos);  // row positions, -1 past the sequence's rows

  const SeqStep s = seqs[blockIdx.y];
  const int t0 = int(blockIdx.x) * kBr;
  if (t0 >= s.n_tokens) return;
  const int rows = min(kBr, s.n_tokens - t0);
  const int h = blockIdx.z, kvh = h / group;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t q_width = int64_t(n_heads) * HD, kv_width = int64_t(n_heads / group) * HD;
  const int64_t r0 = int64_t(s.row_begin) + t0;

  constexpr int kVec = HD / 4;  // float4s per row
  for (int i = tid; i < kBr * kVec; i += blockDim.x) {
    const int r = i / kVec, c = (i % kVec) * 4;
    float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
    if (r < rows) x = *reinterpret_cast<const float4*>(q + (r0 + r) * q_width + int64_t(h) * HD + c);
    store_terms<SPLIT>(qs(0) + r * L::ldh + c, qs(kT - 1) + r * L::ldh + c, x);
  }
  for (int i = tid; i < kBr * L::ldo; i += blockDim.x) os[i] = 0.0f;
  for (int r = tid; r < kBr; r += blockDim.x) {
    rpos[r] = r < rows ? positions[r0 + r] : -1;
    ms[r] = -INFINITY;
    ls[r] = 0.0f;
  }
  __syncthreads();
  // The tile's key range, and each warp's own (to skip key tiles that mask all of its rows).
  int lo = INT32_MAX, hi = -1, wlo = INT32_MAX, whi = -1;
  for (int r = 0; r < rows; ++r) {
    const int pos = rpos[r], f = first_key_of(pos, window);
    lo = min(lo, f);
    hi = max(hi, pos);
    if (r / 16 == warp) {
      wlo = min(wlo, f);
      whi = max(whi, pos);
    }
  }
  const int wrow = warp * 16;  // this warp's first row in the tile

  for (int jt = (lo / kBc) * kBc; jt <= hi; jt += kBc) {
    __syncthreads();  // every warp is done with the previous K, V tiles
    for (int i = tid; i < kBc * kVec; i += blockDim.x) {
      const int r = i / kVec, c = (i % kVec) * 4;
      const int j = jt + r;
      float4 kx = make_float4(0.f, 0.f, 0.f, 0.f), vx = kx;
      if (j >= lo && j <= hi) {  // outside: zeros (never read a position no row attends)
        const int64_t row = int64_t(block_tables[s.table_begin + j / block_size]) * block_size + j % block_size;
        const int64_t off = row * kv_width + int64_t(kvh) * HD + c;
        kx = *reinterpret_cast<const float4*>(kc + off);
        vx = *reinterpret_cast<const float4*>(vc + off);
      }
      store_terms<SPLIT>(ks(0) + r * L::ldh + c, ks(kT - 1) + r * L::ldh + c, kx);
      store_terms<SPLIT>(vs(0) + r * L::ldh + c, vs(kT - 1) + r * L::ldh + c, vx);
    }
    __syncthreads();
    if (whi < jt || wlo > jt + kBc - 1) continue;  // every row of this warp masks the whole tile

    // S = Q K^T for the warp's 16 rows x kBc keys
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> sf[kBc / 16];
#pragma unroll
    for (int n = 0; n < kBc / 16; ++n) wmma::fill_fragment(sf[n], 0.0f);
#pragma unroll 4
    for (int kk = 0; kk < HD / 16; ++kk) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> af[kT];
#pragma unroll
      for (int t = 0; t < kT; ++t) wmma::load_matrix_sync(af[t], qs(t) + wrow * L::ldh + kk * 16, L::ldh);
#pragma unroll
      for (int n = 0; n < kBc / 16; ++n)
        mma_terms<SPLIT, wmma::col_major>(sf[n], af, ks(0) + n * 16 * L::ldh + kk * 16,
                                          ks(kT - 1) + n * 16 * L::ldh + kk * 16, L::ldh);
    }
#pragma unroll
    for (int n = 0; n < kBc / 16; ++n)
      wmma::store_matrix_sync(ss + wrow * L::lds + n * 16, sf[n], L::lds, wmma::mem_row_major);
    __syncwarp();

    // Online softmax per row: lane owns keys jt + lane (+ 32).
    for (int rr = 0; rr < 16; ++rr) {
      const int row = wrow + rr, pos = rpos[row];
      const int f = pos >= 0 ? first_key_of(pos, window) : 0;
      float x[kKeysPerLane];
      bool ok[kKeysPerLane];
      float xmax = -INFINITY;
#pragma unroll
      for (int u = 0; u < kKeysPerLane; ++u) {
        const int j = jt + lane + 32 * u;
        ok[u] = pos >= 0 && j <= pos && j >= f;
        x[u] = ok[u] ? ss[row * L::lds + lane + 32 * u] * scale : -INFINITY;
        xmax = fmaxf(xmax, x[u]);
      }
      const float m_old = ms[row];
      const float m_new = fmaxf(m_old, warp_max(xmax));
      // corr is exactly 1 when nothing changes (a fully masked tile leaves the row bit-identical)
      const float corr = m_new == -INFINITY ? 1.0f : expf(m_old - m_new);
      float used = 0.0f;  // the weights P V uses (hi + lo), so the normalization matches them
#pragma unroll
      for (int u = 0; u < kKeysPerLane; ++u) {
        const float pw = ok[u] ? expf(x[u] - m_new) : 0.0f;
        const bf16 ph = __float2bfloat16_rn(pw);
        ps(0)[row * L::ldp + lane + 32 * u] = ph;
        float term = __bfloat162float(ph);
        if constexpr (SPLIT) {
          const bf16 pl = __float2bfloat16_rn(pw - term);
          ps(1)[row * L::ldp + lane + 32 * u] = pl;
          term += __bfloat162float(pl);
        }
        used += term;
      }
      const float sum = warp_sum(used);
      if (corr != 1.0f)
        for (int d = lane; d < HD; d += 32) os[row * L::ldo + d] *= corr;
      __syncwarp();  // every lane has read ms[row] before lane 0 replaces it (racecheck)
      if (lane == 0) {
        ms[row] = m_new;
        ls[row] = ls[row] * corr + sum;
      }
    }
    __syncwarp();

    // O += P V for the warp's 16 rows
    wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> pf[kBc / 16][kT];
#pragma unroll
    for (int kk = 0; kk < kBc / 16; ++kk)
#pragma unroll
      for (int t = 0; t < kT; ++t) wmma::load_matrix_sync(pf[kk][t], ps(t) + wrow * L::ldp + kk * 16, L::ldp);
#pragma unroll 2
    for (int n = 0; n < HD / 16; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> of;
      wmma::load_matrix_sync(of, os + wrow * L::ldo + n * 16, L::ldo, wmma::mem_row_major);
#pragma unroll
      for (int kk = 0; kk < kBc / 16; ++kk)
        mma_terms<SPLIT, wmma::row_major>(of, pf[kk], vs(0) + kk * 16 * L::ldh + n * 16,
                                          vs(kT - 1) + kk * 16 * L::ldh + n * 16, L::ldh);
      wmma::store_matrix_sync(os + wrow * L::ldo + n * 16, of, L::ldo, wmma::mem_row_major);
    }
    __syncwarp();
  }
  __syncwarp();
  for (int rr = 0; rr < 16; ++rr) {
    const int row = wrow + rr;
    if (rpos[row] < 0) continue;
    const float inv = 1.0f / ls[row];
    float* o = out + (r0 + row) * q_width + int64_t(h) * HD;
    for (int d = lane; d < HD; d += 32) o[d] = os[row * L::ldo + d] * inv;
  }
}

template <int HD, bool SPLIT>
void launch_flash_prefill(const Context& ctx, const Tensor& out, const Tensor& q, const KvLayerView& cache,
                          const AttentionParams& p, const StepPlan& plan, int32_t max_rows) {
  constexpr size_t smem = Layout<HD, SPLIT>::bytes;
  static const bool configured = [] {
    CUDA_CHECK(cudaFuncSetAttribute(flash_prefill_kernel<HD, SPLIT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(smem)));
    return true;
  }();
  (void)configured;
  dim3 grid(unsigned(ceil_div(max_rows, kBr)), unsigned(plan.seqs.size()), unsigned(p.n_heads));
  flash_prefill_kernel<HD, SPLIT><<<grid, kWarps * 32, smem, ctx.stream>>>(
      out.f32(), q.f32(), cache.k.f32(), cache.v.f32(), ctx.step.positions, ctx.step.seqs, ctx.step.block_tables,
      ctx.step.block_size, p.n_heads, p.n_heads / p.n_kv_heads, p.scale, p.window);
  CUDA_CHECK_LAUNCH();
}

template <bool SPLIT>
void launch_for_head_dim(const Context& ctx, const Tensor& out, const Tensor& q, const KvLayerView& cache,
                         const AttentionParams& p, const StepPlan& plan, int32_t max_rows) {
  switch (p.head_dim) {
    case 64: launch_flash_prefill<64, SPLIT>(ctx, out, q, cache, p, plan, max_rows); break;
    case 128: launch_flash_prefill<128, SPLIT>(ctx, out, q, cache, p, plan, max_rows); break;
    default: launch_flash_prefill<256, SPLIT>(ctx, out, q, cache, p, plan, max_rows); break;
  }
}

}  // namespace

namespace {

// -1: KESTREL_CUDA_TILED_ATTENTION unset, 0: off, 1: on.
int tiled_attention_env() {
  static const int forced = [] {
    const char* env = std::getenv("KESTREL_CUDA_TILED_ATTENTION");
    if (!env) return -1;
    KCHECK_MSG(std::strcmp(env, "0") == 0 || std::strcmp(env, "1") == 0,
               "KESTREL_CUDA_TILED_ATTENTION must be 0 or 1, not '", env, "'");
    return env[0] == '1' ? 1 : 0;
  }();
  return forced;
}

// The split (hi/lo) products go with the matmuls' multi-term precisions, single BF16 terms with
// kBf16; kExact keeps the F32 split-KV kernel, as it keeps the F32 GEMV for every matmul.
bool split_terms(const Context& ctx) { return ctx.matmul_precision != MatmulPrecision::kBf16; }

}  // namespace

bool attention_prefill_applies(const Context& ctx, const Tensor& q, const KvLayerView& cache,
                               const AttentionParams& p, const StepPlan& plan) {
  // Single BF16 products move the tiny fixtures' logits by ~3e-3 of their RMS and flipped a
  // near-tied MoE routing in qwen3_5_moe's 300-token prompt (kestrel parity: 0.68 > 2e-2), so at
  // the default (multi-term) precisions the products take hi/lo terms (~2^-16 relative).
  // KESTREL_CUDA_TILED_ATTENTION=0 turns the kernel off (the split-KV F32 kernel for every step).
  const int forced = tiled_attention_env();
  const bool enabled = forced >= 0 ? forced == 1 : ctx.matmul_precision != MatmulPrecision::kExact;
  if (!enabled || ctx.deterministic) return false;  // deterministic mode keeps the split-KV kernels
  if (p.head_dim != 64 && p.head_dim != 128 && p.head_dim != 256) return false;
  if (plan.seqs.size() > 65535 || p.n_heads > 65535) return false;
  if (!aligned16(q.data) || !aligned16(cache.k.data) || !aligned16(cache.v.data)) return false;
  int32_t max_rows = 0;
  for (const SeqStep& s : plan.seqs) max_rows = std::max(max_rows, s.n_tokens);
  return max_rows >= kMinRows;
}

void attention_prefill(const Context& ctx, const Tensor& out, const Tensor& q, const KvLayerView& cache,
                       const AttentionParams& p, const StepPlan& plan) {
  KCHECK_MSG(attention_prefill_applies(ctx, q, cache, p, plan),
             "attention_prefill: this step (head_dim ", p.head_dim, ") is not one the tiled kernel takes");
  int32_t max_rows = 0;
  for (const SeqStep& s : plan.seqs) max_rows = std::max(max_rows, s.n_tokens);
  if (split_terms(ctx))
    launch_for_head_dim<true>(ctx, out, q, cache, p, plan, max_rows);
  else
    launch_for_head_dim<false>(ctx, out, q, cache, p, plan, max_rows);
}

}  // namespace kestrel::cuda
