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
#include <type_traits>

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

// grid: ceil(T * heads / kEmbedWarps) blocks of kEmbedWarps warps, warp p taking pair p = t * heads
// + h. W: the table's plain dtype, or void for a block format (dt, row_bytes; each lane 8
// elements at a time, D whole blocks).
template <typename W>
__global__ void ngram_embed_kernel(float* __restrict__ out,  // [T * heads, D]
                                   const void* const* __restrict__ shards, int64_t shard_rows, DType dt,
                                   size_t row_bytes, const int32_t* __restrict__ windows,
                                   const int64_t* __restrict__ hash, int n, int heads, int64_t pairs, int64_t rows,
                                   int64_t D) {
  pdl_begin();
  const int64_t p = int64_t(blockIdx.x) * kEmbedWarps + (threadIdx.x >> 5);
  if (p >= pairs) return;
  const int lane = threadIdx.x & 31;
  int32_t w[ngram::kMaxN];
  for (int k = 0; k < n; ++k) w[k] = windows[(p / heads) * n + k];
  const int64_t row = ngram::head_row(w, ngram::PackedHash{hash, n, heads}, int(p % heads));
  // the loader checked the hash's tables against the table; never read outside it regardless
  const bool inside = row >= 0 && row < rows;
  const uint8_t* src =
      inside ? static_cast<const uint8_t*>(shards[row / shard_rows]) + size_t(row % shard_rows) * row_bytes : nullptr;
  float* o = out + p * D;
  if constexpr (std::is_void_v<W>) {
    for (int64_t k = int64_t(lane) * 8; k < D; k += 256) {
      float f[8] = {};
      if (src) load8_block(dt, src, k, f);
#pragma unroll
      for (int i = 0; i < 8; ++i) o[k + i] = f[i];
    }
  } else {
    for (int64_t c = lane; c < D; c += 32) o[c] = src ? to_f32(reinterpret_cast<const W*>(src)[c]) : 0.0f;
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
  const int64_t blocks = ceil_div(pairs, kEmbedWarps);
  KCHECK_MSG(blocks <= 0x7fffffff, "ngram_embed: ", pairs, " rows is too many");
  const unsigned grid = unsigned(blocks);
  const DType dt = shards[0].dtype;
  auto run = [&]<typename W>() {
    launch(ngram_embed_kernel<W>, grid, kEmbedWarps * 32, 0, ctx.stream, out.f32(), table, shards[0].rows, dt,
           shards[0].row_bytes(), windows.as<const int32_t>(), hash.as<const int64_t>(), n, heads, pairs, rows, D);
    CUDA_CHECK_LAUNCH();
  };
  if (dtype_is_quantized(dt)) {
    KCHECK_MSG(D % 8 == 0, "ngram_embed: a ", dtype_name(dt), " table of ", D, " columns");
    run.template operator()<void>();
  } else {
    dispatch_weight(dt, "ngram_embed", run);
  }
}

}  // namespace kestrel::cuda
