// token_windows and ngram_embed (ops.h): Qwen4-Exp's hashed n-gram embeddings computed from
// device state, so a decode step needs nothing from the host but its plan (ops/step_graphs.h).
// The window and hash arithmetic is ops/ngram.h's, the host reference's, so ids are the CPU's.
//  - token_windows_kernel: a block per sequence; the slot's context (or eos for a new sequence)
//    into shared memory, each thread a row's window, then the context moves on to the last
//    n - 1 tokens of context + step (read from the shared copy, so no thread reads what another
//    writes).
//  - ngram_embed_kernel: a warp per (row, head): every lane forms the head's row (the same
//    value), then the lanes copy it from its shard (a table of shard pointers; every shard but
//    the last the same rows), widened to F32 — ggml's dequantized values for a block format.
#include "backend/cuda/quant_blocks.cuh"
#include "ops/ngram.h"

namespace kestrel::cuda {
namespace {

constexpr int kWindowThreads = 128;
constexpr int kEmbedWarps = 8;

// grid: one block per sequence.
__global__ void token_windows_kernel(int32_t* __restrict__ windows,  // [T, n]
                                     int32_t* __restrict__ context,  // [slots, n - 1]
                                     const int32_t* __restrict__ tokens, const SeqStep* __restrict__ seqs, int n,
                                     int32_t eos) {
  pdl_begin();
  __shared__ int32_t before[ngram::kMaxN];
  const SeqStep s = seqs[blockIdx.x];
  const int ctx = n - 1;
  int32_t* c = context + int64_t(s.state_slot) * ctx;
  if (int(threadIdx.x) < ctx) before[threadIdx.x] = s.n_past > 0 ? c[threadIdx.x] : eos;
  __syncthreads();
  const int32_t* toks = tokens + s.row_begin;
  auto at = [&](int64_t j) { return j < ctx ? before[j] : toks[j - ctx]; };
  for (int t = threadIdx.x; t < s.n_tokens; t += blockDim.x) {
    int32_t w[ngram::kMaxN];
    ngram::token_window(at, ctx + t, n, eos, w);
    for (int k = 0; k < n; ++k) windows[int64_t(s.row_begin + t) * n + k] = w[k];
  }
  if (int(threadIdx.x) < ctx) c[threadIdx.x] = at(s.n_tokens + threadIdx.x);
}

// The warp's pair p = t * heads + h (false past the last) and its table row (-1 outside the table).
__device__ __forceinline__ bool warp_pair(const int32_t* __restrict__ windows, const int64_t* __restrict__ hash,
                                          int n, int heads, int64_t pairs, int64_t rows, int64_t& p, int64_t& row) {
  p = int64_t(blockIdx.x) * kEmbedWarps + (threadIdx.x >> 5);
  if (p >= pairs) return false;
  int32_t w[ngram::kMaxN];
  const int32_t* src = windows + (p / heads) * n;
  for (int k = 0; k < n; ++k) w[k] = src[k];
  row = ngram::head_row(w, ngram::PackedHash{hash, n, heads}, int(p % heads));
  if (row < 0 || row >= rows) row = -1;
  return true;
}

// grid: ceil(T * heads / kEmbedWarps) blocks of kEmbedWarps warps. W: a plain table dtype.
template <typename W>
__global__ void ngram_embed_kernel(float* __restrict__ out,  // [T * heads, D]
                                   const void* const* __restrict__ shards, int64_t shard_rows,
                                   const int32_t* __restrict__ windows, const int64_t* __restrict__ hash, int n,
                                   int heads, int64_t pairs, int64_t rows, int64_t D) {
  pdl_begin();
  int64_t p, row;
  if (!warp_pair(windows, hash, n, heads, pairs, rows, p, row)) return;
  const int lane = threadIdx.x & 31;
  float* o = out + p * D;
  if (row < 0) {  // the loader checked the hash's tables against the table; never read outside it
    for (int64_t c = lane; c < D; c += 32) o[c] = 0.0f;
    return;
  }
  const W* src = static_cast<const W*>(shards[row / shard_rows]) + (row % shard_rows) * D;
  for (int64_t c = lane; c < D; c += 32) o[c] = to_f32(src[c]);
}

// As ngram_embed_kernel for a block-format table: each lane 8 elements at a time (D whole blocks).
__global__ void ngram_embed_quant_kernel(float* __restrict__ out, const void* const* __restrict__ shards,
                                         int64_t shard_rows, DType dt, size_t row_bytes,
                                         const int32_t* __restrict__ windows, const int64_t* __restrict__ hash, int n,
                                         int heads, int64_t pairs, int64_t rows, int64_t D) {
  pdl_begin();
  int64_t p, row;
  if (!warp_pair(windows, hash, n, heads, pairs, rows, p, row)) return;
  const int lane = threadIdx.x & 31;
  float* o = out + p * D;
  const uint8_t* src =
      row < 0 ? nullptr : static_cast<const uint8_t*>(shards[row / shard_rows]) + size_t(row % shard_rows) * row_bytes;
  for (int64_t k = int64_t(lane) * 8; k < D; k += 256) {
    float f[8] = {};
    if (src) load8_block(dt, src, k, f);
#pragma unroll
    for (int i = 0; i < 8; ++i) o[k + i] = f[i];
  }
}

}  // namespace

void token_windows(const Context& ctx, const Tensor& windows, const Tensor& context, int32_t eos,
                   const StepPlan& plan) {
  check_step(ctx, plan);
  ngram::check_token_windows(windows, context, plan);
  KCHECK_MSG(windows.device == Device::kCuda && context.device == Device::kCuda,
             "token_windows: windows and context must be on the device");
  if (plan.seqs.empty()) return;
  launch(token_windows_kernel, unsigned(plan.seqs.size()), kWindowThreads, 0, ctx.stream, windows.as<int32_t>(),
         context.as<int32_t>(), ctx.step.tokens, ctx.step.seqs, int(windows.cols), eos);
  CUDA_CHECK_LAUNCH();
}

void ngram_embed(const Context& ctx, const Tensor& out, const std::vector<Tensor>& shards, const Tensor& windows,
                 const Tensor& hash) {
  check_f32(out, "ngram_embed out");
  const int64_t rows = ngram::check_ngram_embed(out, shards, windows, hash);
  KCHECK_MSG(windows.device == Device::kCuda && hash.device == Device::kCuda && shards[0].device == Device::kCuda,
             "ngram_embed: windows, hash and table must be on the device");
  const int n = int(windows.cols), heads = int((hash.cols - n) / 2);
  const int64_t pairs = out.rows, D = out.cols;
  if (pairs == 0) return;
  std::vector<const void*> ptrs;
  for (const Tensor& s : shards) ptrs.push_back(s.data);
  const void* const* table = ctx.tables->get(ptrs, ctx.stream);
  const unsigned grid = unsigned(ceil_div(pairs, kEmbedWarps));
  KCHECK_MSG(ceil_div(pairs, kEmbedWarps) <= 0x7fffffff, "ngram_embed: ", pairs, " rows is too many");
  const DType dt = shards[0].dtype;
  if (dtype_is_quantized(dt)) {
    KCHECK_MSG(D % 8 == 0, "ngram_embed: a ", dtype_name(dt), " table of ", D, " columns");
    launch(ngram_embed_quant_kernel, grid, kEmbedWarps * 32, 0, ctx.stream, out.f32(), table, shards[0].rows, dt,
           shards[0].row_bytes(), windows.as<const int32_t>(), hash.as<const int64_t>(), n, heads, pairs, rows, D);
    CUDA_CHECK_LAUNCH();
    return;
  }
  dispatch_weight(dt, "ngram_embed", [&]<typename W>() {
    launch(ngram_embed_kernel<W>, grid, kEmbedWarps * 32, 0, ctx.stream, out.f32(), table, shards[0].rows,
           windows.as<const int32_t>(), hash.as<const int64_t>(), n, heads, pairs, rows, D);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace kestrel::cuda
