// time_q4k_int_gemv / time_q4k_int_rows (q4k_int_bench.h): a Q4_K GEMV on integer dot products
// over a chunk-major tile layout, one row on dp4a and 2..8 rows on s8 mmas with the same bits,
// measured beside the shipped kernel.
#include "backend/cuda/q4k_int_bench.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/q4k_int_gemv.cuh"
#include "core/error.h"

namespace kestrel::cuda {
namespace {

using namespace q4k_int_detail;
using q4k_int::kSuperBytes;

// x's rows split into terms (x finite): term t of element k of the rows taken as one vector is
// byte k of the words from terms + t tstride; per 32 elements, unit = s / 16384 and sum = sum(x^)
// (both F32).
struct XTerms {
  uint32_t* terms;  // [3][rows K / 4] words of 4 int8
  float* unit;      // [rows K / 32]
  float* sum;       // [rows K / 32]
};

// The split as a kernel of its own over `elems` values (a multiple of 128; the term stride
// elems / 4 words): a warp per 128 values.
__global__ void split_kernel(XTerms xt, const float* __restrict__ x, int64_t elems) {
  pdl_begin();
  const int lane = int(threadIdx.x) & 31;
  const int64_t base = (int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32) * 128;
  if (base >= elems) return;
  const int64_t k = base + 4 * lane, w = k / 4;
  const float4 v = *reinterpret_cast<const float4*>(x + k);
  split_quad<3>(v, lane, xt.terms + w, xt.terms + elems / 4 + w, xt.terms + elems / 2 + w, xt.unit + k / 32,
                xt.sum + k / 32);
}

// A lane's super-block: its chunks kGroup apart in the tile layout (streamed past L1), or
// consecutive in the row-major one (through L1: a warp's load takes 16 of each 32-byte sector it
// touches, the next load the other 16).
template <bool kRowMajor>
__device__ __forceinline__ void load_tile(uint4 (&c)[kChunks], const uint4* __restrict__ p) {
#pragma unroll
  for (int j = 0; j < kChunks; ++j) c[j] = kRowMajor ? __ldg(p + j) : __ldcs(p + j * kGroup);
}

// Warp w's slice of a group's S super-blocks: [first(w), first(w + 1)), about S / P each.
__device__ __forceinline__ int slice_first(int S, int P, int w) { return S * w / P; }

// out [N] = w . x, a block per group of 32 columns, P warps each a contiguous slice of the
// group's super-blocks (their sums meet in shared memory, in warp order). kSplit: the warps split
// their slices of x into shared memory first; else xt holds the split.
template <int P, bool kSplit, bool kRowMajor = false>
__global__ void __launch_bounds__(32 * P, P < 16 ? 16 / P : 1)
    q4k_int_gemv_kernel(float* __restrict__ out, const float* __restrict__ x, XTerms xt, int64_t tstride,
                        const uint4* __restrict__ w, int64_t K) {
  extern __shared__ uint4 smem_raw[];
  __shared__ float partial[P][kGroup];
  const int S = int(K / kSuperElems), warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
  const int first = slice_first(S, P, warp), n = slice_first(S, P, warp + 1) - first;
  // w: the tile layout, or (kRowMajor) the row-major one; `step` apart are the super-blocks of a lane
  const uint4* tile = kRowMajor ? w + ((int64_t(blockIdx.x) * kGroup + lane) * S + first) * kChunks
                                : w + (int64_t(blockIdx.x) * S + first) * kChunks * kGroup + lane;
  constexpr int64_t step = kRowMajor ? kChunks : kChunks * kGroup;
  auto load = [&](uint4 (&c)[kChunks], int t) { load_tile<kRowMajor>(c, tile + int64_t(t) * step); };
  uint4 a[kChunks], b[kChunks];
  if (n > 0) load(a, 0);  // the weights do not depend on the kernel before
  pdl_begin();
  const int64_t k0 = int64_t(first) * kSuperElems;  // the slice's first element
  const uint32_t *t0, *t1, *t2;
  const float *unit, *sum;
  if constexpr (kSplit) {
    // per warp, for the longest slice's nmax super-blocks: 3 nmax 64 words of terms, then units and sums
    const int nmax = (S + P - 1) / P;
    uint32_t* m0 = reinterpret_cast<uint32_t*>(smem_raw) + warp * nmax * (3 * 64 + 16);
    uint32_t* m1 = m0 + n * 64;
    uint32_t* m2 = m1 + n * 64;
    float* mu = reinterpret_cast<float*>(m2 + n * 64);
    float* ms = mu + n * 8;
    split_slice<3>(x + k0, n, lane, m0, m1, m2, mu, ms);
    t0 = m0;
    t1 = m1;
    t2 = m2;
    unit = mu;
    sum = ms;
  } else {
    t0 = xt.terms + k0 / 4;
    t1 = xt.terms + tstride + k0 / 4;
    t2 = xt.terms + 2 * tstride + k0 / 4;
    unit = xt.unit + k0 / 32;
    sum = xt.sum + k0 / 32;
  }
  const float y = q4k_int::slice_dot(
      load,
      [&](const uint4(&c)[kChunks], int t, float acc) {
        return super_block<3>(c, t0 + 64 * t, t1 + 64 * t, t2 + 64 * t, unit + 8 * t, sum + 8 * t, acc);
      },
      a, b, n);
  partial[warp][lane] = y;
  __syncthreads();
  if (warp == 0) {
    float s = partial[0][lane];
#pragma unroll
    for (int p = 1; p < P; ++p) s = __fadd_rn(s, partial[p][lane]);
    out[int64_t(blockIdx.x) * kGroup + lane] = s;
  }
}

// out [R, N] = x . w^T for R of 2..8 rows on the tensor cores, every row's bits those of
// q4k_int_gemv_kernel<P> on that row alone: a sub-block's Q per (column, row) is the same exact
// integer (three s8 mmas, one a term, k in any order as long as A and B agree: lane c takes word c
// of the sub-block's two 16-byte chunks), and the F32 steps after it are the same, in the same
// order. A warp's 32 columns are two m-tiles of 16; B's column n is x row n (rows past R repeat
// the last, their outputs dropped). xt: the rows' split (term stride tstride words).
template <int P, int R, bool kSplit>
__global__ void __launch_bounds__(32 * P)
    q4k_int_rows_kernel(float* __restrict__ out, const float* __restrict__ x, XTerms xt, int64_t tstride,
                        const uint8_t* __restrict__ w, int64_t K, int64_t N) {
  __shared__ float partial[P][kGroup][R];
  const int S = int(K / kSuperElems), warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
  const int g = lane >> 2, c = lane & 3;
  const int first = slice_first(S, P, warp), n = slice_first(S, P, warp + 1) - first;
  const uint8_t* tile = w + (int64_t(blockIdx.x) * S + first) * kChunks * kGroup * 16;
  pdl_begin();
  const int64_t k0 = int64_t(first) * kSuperElems;
  // kSplit: B column g's values (x row g, rows past R the last), 8 a lane a sub-block
  const float* xg = x + int64_t(min(g, R - 1)) * K + k0 + 4 * c;
  const uint32_t* xb = xt.terms + (int64_t(min(g, R - 1)) * K + k0) / 4 + c;
  const int ra = min(2 * c, R - 1), rb = min(2 * c + 1, R - 1);
  const float *ua = xt.unit + (ra * K + k0) / 32, *ub = xt.unit + (rb * K + k0) / 32;
  const float *sa = xt.sum + (ra * K + k0) / 32, *sb = xt.sum + (rb * K + k0) / 32;
  float y[2][4] = {};
  for (int t = 0; t < n; ++t) {
    const uint8_t* tp = tile + int64_t(t) * kChunks * kGroup * 16;
    uint4 hdr[2][2];  // [m-tile][column g, g + 8]
    rows_headers(tp, g, kGroup, hdr);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      uint32_t wd[2][2][2];  // [m-tile][column g, g + 8][chunk 1 + 2q, 2 + 2q]: word c
      rows_words(tp, kGroup * 16, q, g, c, kGroup, wd);
#pragma unroll
      for (int hi = 0; hi < 2; ++hi) {
        const int b = 2 * q + hi, sg = 8 * t + b;
        uint32_t xw[3][2];  // [term][chunk]: B's words
        float u[2], sm[2];  // rows 2c, 2c + 1: unit and sum
        if constexpr (kSplit) {
          split_rows<3>(xg + t * kSuperElems + 64 * q + 32 * hi, ra, rb, xw, u, sm);
        } else {
#pragma unroll
          for (int tm = 0; tm < 3; ++tm)
#pragma unroll
            for (int h = 0; h < 2; ++h) xw[tm][h] = xb[tm * tstride + t * 64 + (64 * q + 32 * hi + 16 * h) / 4];
          u[0] = ua[sg];
          u[1] = ub[sg];
          sm[0] = sa[sg];
          sm[1] = sb[sg];
        }
        rows_sub_block<3>(wd, hdr, hi, b, xw, u, sm, y);
      }
    }
  }
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int col = 16 * mt + g + 8 * (j >> 1), row = 2 * c + (j & 1);
      if (row < R) partial[warp][col][row] = y[mt][j];
    }
  __syncthreads();
  for (int i = int(threadIdx.x); i < kGroup * R; i += 32 * P) {
    const int col = i / R, row = i % R;
    float s = partial[0][col][row];
#pragma unroll
    for (int p = 1; p < P; ++p) s = __fadd_rn(s, partial[p][col][row]);
    out[int64_t(row) * N + int64_t(blockIdx.x) * kGroup + col] = s;
  }
}

// The weights in the tile layout (and copies of them, >= 256 MB in all), x's rows, their split,
// a stream and a timer.
class Bench {
 public:
  Bench(const void* w, int64_t N, int64_t K, const float* x, int rows) : N_(N), K_(K), rows_(rows) {
    KCHECK_MSG(N > 0 && N % kGroup == 0 && K > 0 && K % kSuperElems == 0 && rows >= 1 && rows <= 8,
               "q4k_int_bench: N ", N, ", K ", K, ", rows ", rows);
    std::vector<uint8_t> tiled(size_t(N) * size_t(K / kSuperElems) * kSuperBytes);
    q4k_int::to_tile_layout(static_cast<const uint8_t*>(w), N, K / kSuperElems, tiled.data());
    bytes_ = tiled.size();
    do {
      uint4* d = nullptr;
      CUDA_CHECK(cudaMalloc(&d, bytes_));
      CUDA_CHECK(cudaMemcpy(d, tiled.data(), bytes_, cudaMemcpyHostToDevice));
      copies_.push_back(d);
    } while (double(copies_.size()) * double(bytes_) < 256e6);
    for (size_t i = 0; i < copies_.size(); ++i) {
      uint4* d = nullptr;
      CUDA_CHECK(cudaMalloc(&d, bytes_));
      CUDA_CHECK(cudaMemcpy(d, w, bytes_, cudaMemcpyHostToDevice));
      row_major_.push_back(d);
    }
    const size_t elems = size_t(rows) * size_t(K);
    CUDA_CHECK(cudaMalloc(&x_, elems * 4));
    CUDA_CHECK(cudaMalloc(&out_, size_t(rows) * size_t(N) * 4));
    CUDA_CHECK(cudaMalloc(&xt_.terms, elems * 3));
    CUDA_CHECK(cudaMalloc(&xt_.unit, elems / 32 * 4));
    CUDA_CHECK(cudaMalloc(&xt_.sum, elems / 32 * 4));
    CUDA_CHECK(cudaMemcpy(x_, x, elems * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreate(&e0_));
    CUDA_CHECK(cudaEventCreate(&e1_));
  }
  ~Bench() {
    for (uint4* d : copies_) cudaFree(d);
    for (uint4* d : row_major_) cudaFree(d);
    cudaFree(x_);
    cudaFree(out_);
    cudaFree(xt_.terms);
    cudaFree(xt_.unit);
    cudaFree(xt_.sum);
    cudaEventDestroy(e0_);
    cudaEventDestroy(e1_);
    cudaStreamDestroy(stream_);
  }
  Bench(const Bench&) = delete;
  Bench& operator=(const Bench&) = delete;

  // Device time a call of fn(i) (i counts the calls), over n calls after 3.
  template <typename Fn>
  double time_us(Fn&& fn, int n) {
    for (int i = 0; i < 3; ++i) fn(i);
    CUDA_CHECK(cudaEventRecord(e0_, stream_));
    for (int i = 0; i < n; ++i) fn(i);
    CUDA_CHECK(cudaEventRecord(e1_, stream_));
    CUDA_CHECK(cudaEventSynchronize(e1_));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, e0_, e1_));
    return double(ms) * 1000.0 / n;
  }
  // Every row of x split (one launch over rows x K elements: sub-blocks never cross rows).
  void split() {
    const int64_t elems = int64_t(rows_) * K_;
    launch(split_kernel, unsigned((elems / 128 + 7) / 8), 256, 0, stream_, xt_, static_cast<const float*>(x_), elems);
  }
  int64_t tstride() const { return int64_t(rows_) * K_ / 4; }  // words between the terms
  // Row r's split, for the one-row kernel.
  XTerms row_terms(int r) const {
    return {xt_.terms + int64_t(r) * K_ / 4, xt_.unit + int64_t(r) * K_ / 32, xt_.sum + int64_t(r) * K_ / 32};
  }
  std::vector<float> read_out(int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    CUDA_CHECK(cudaMemcpyAsync(v.data(), out_, size_t(n) * 4, cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    return v;
  }
  void poison_out() { CUDA_CHECK(cudaMemsetAsync(out_, 0xFF, size_t(rows_) * size_t(N_) * 4, stream_)); }

  int64_t N_, K_;
  int rows_;
  size_t bytes_ = 0;
  std::vector<uint4*> copies_, row_major_;  // the tile layout's copies, the row-major ones
  float *x_ = nullptr, *out_ = nullptr;
  XTerms xt_{};
  cudaStream_t stream_ = nullptr;
  cudaEvent_t e0_ = nullptr, e1_ = nullptr;
};

// The one-row kernel with P slices on row r of the bench's x (split inside the kernel or before).
template <int P, bool kSplit, bool kRowMajor = false>
void one_row(Bench& b, const uint4* w, int r) {
  const int64_t nmax = (b.K_ / kSuperElems + P - 1) / P;  // the longest slice
  const size_t smem = kSplit ? size_t(P * nmax) * (3 * 64 + 16) * 4 : 0;
  auto kernel = q4k_int_gemv_kernel<P, kSplit, kRowMajor>;
  if (smem > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  launch(kernel, unsigned(b.N_ / kGroup), unsigned(32 * P), smem, b.stream_, b.out_,
         static_cast<const float*>(b.x_ + int64_t(r) * b.K_), b.row_terms(r), b.tstride(), w, b.K_);
}

}  // namespace

std::vector<Q4kIntGemvRun> time_q4k_int_gemv(const void* w, int64_t N, int64_t K, const float* x, int reps,
                                            double* split_us) {
  Bench b(w, N, K, x, 1);
  if (split_us) *split_us = b.time_us([&](int) { b.split(); }, reps);
  b.split();
  const int64_t S = K / kSuperElems;
  std::vector<Q4kIntGemvRun> runs;
  auto variant = [&]<int P, bool kSplit, bool kRowMajor = false>() {
    if (P > S) return;
    Q4kIntGemvRun r;
    r.slices = P;
    r.converted = !kSplit;
    r.row_major = kRowMajor;
    const std::vector<uint4*>& ws = kRowMajor ? b.row_major_ : b.copies_;
    r.hot_us = b.time_us([&](int) { one_row<P, kSplit, kRowMajor>(b, ws[0], 0); }, reps);
    r.dram_us = b.time_us([&](int i) { one_row<P, kSplit, kRowMajor>(b, ws[size_t(i) % ws.size()], 0); },
                          reps * int(ws.size()));
    b.poison_out();
    one_row<P, kSplit, kRowMajor>(b, ws[0], 0);
    r.out = b.read_out(N);
    runs.push_back(std::move(r));
  };
  variant.operator()<4, true>();
  variant.operator()<8, true>();
  variant.operator()<16, true>();
  variant.operator()<4, false>();
  variant.operator()<8, false>();
  variant.operator()<16, false>();
  variant.operator()<8, true, true>();
  variant.operator()<16, true, true>();
  return runs;
}

std::vector<Q4kIntRowsRun> time_q4k_int_rows(const void* w, int64_t N, int64_t K, const float* x, int reps) {
  const int64_t S = K / kSuperElems;
  std::vector<Q4kIntRowsRun> runs;
  auto rows = [&]<int P, int R, bool kSplit>() {
    if (P > S) return;
    Bench b(w, N, K, x, R);
    b.split();
    // each row alone, through the one-row kernel (split before)
    std::vector<float> alone;
    for (int r = 0; r < R; ++r) {
      b.poison_out();
      one_row<P, false>(b, b.copies_[0], r);
      const std::vector<float> v = b.read_out(N);
      alone.insert(alone.end(), v.begin(), v.end());
    }
    auto go = [&](const uint4* wt) {
      launch(q4k_int_rows_kernel<P, R, kSplit>, unsigned(N / kGroup), unsigned(32 * P), 0, b.stream_, b.out_,
             static_cast<const float*>(b.x_), b.xt_, b.tstride(), reinterpret_cast<const uint8_t*>(wt), K, N);
    };
    Q4kIntRowsRun r;
    r.rows = R;
    r.slices = P;
    r.split_inside = kSplit;
    r.hot_us = b.time_us([&](int) { go(b.copies_[0]); }, reps);
    r.dram_us = b.time_us([&](int i) { go(b.copies_[size_t(i) % b.copies_.size()]); }, reps * int(b.copies_.size()));
    b.poison_out();
    go(b.copies_[0]);
    r.out = b.read_out(int64_t(R) * N);
    r.same_bits = std::memcmp(r.out.data(), alone.data(), alone.size() * 4) == 0;
    runs.push_back(std::move(r));
  };
  rows.operator()<8, 2, false>();
  rows.operator()<8, 4, false>();
  rows.operator()<8, 8, false>();
  rows.operator()<16, 8, false>();
  rows.operator()<8, 2, true>();
  rows.operator()<8, 8, true>();
  rows.operator()<16, 8, true>();
  return runs;
}

}  // namespace kestrel::cuda
