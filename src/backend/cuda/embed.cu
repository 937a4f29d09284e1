// embed: out[T, H] = table[tokens[t], :] * scale (table BF16/F16/F32 or a block format [V, H]:
// the gathered rows dequantized to ggml's values).
// embed_rows: out[N, D] = rows ids[i] of a table split row-wise into shards (host-computed ids:
// the host resolves each id to its shard row, the device copies).
#include "backend/cuda/quant_blocks.cuh"

namespace kestrel::cuda {
namespace {

// grid: T blocks; each block copies one row.
template <typename W>
__global__ void embed_kernel(float* __restrict__ out,      // [T, H]
                             const W* __restrict__ table,  // [V, H]
                             const int32_t* __restrict__ tokens, int64_t H, int64_t V, float scale) {
  pdl_begin();
  const int64_t r = blockIdx.x;
  const int32_t id = tokens[r];
  float* o = out + r * H;
  if (id < 0 || id >= V) {  // the entry point checked the ids; never read out of bounds regardless
    for (int64_t i = threadIdx.x; i < H; i += blockDim.x) o[i] = 0.0f;
    return;
  }
  const W* src = table + int64_t(id) * H;
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x) {
    const float v = to_f32(src[i]);
    o[i] = scale != 1.0f ? v * scale : v;
  }
}

// As embed_kernel for a block-format table: each thread 8 elements (H is whole blocks).
__global__ void embed_quant_kernel(float* __restrict__ out,          // [T, H]
                                   const uint8_t* __restrict__ table,  // [V, row_bytes]
                                   DType dt, size_t row_bytes, const int32_t* __restrict__ tokens, int64_t H,
                                   int64_t V, float scale) {
  pdl_begin();
  const int64_t r = blockIdx.x;
  const int32_t id = tokens[r];
  float* o = out + r * H;
  for (int64_t k = threadIdx.x * 8; k < H; k += blockDim.x * 8) {
    float f[8] = {};
    if (id >= 0 && id < V) load8_block(dt, table + size_t(id) * row_bytes, k, f);
#pragma unroll
    for (int i = 0; i < 8; ++i) o[k + i] = scale != 1.0f ? f[i] * scale : f[i];
  }
}

// Where output row i of embed_rows comes from: a row of some shard, in that shard's dtype.
struct RowSource {
  const void* src;  // the shard row's first element
  int32_t dtype;    // 0 F32, 1 BF16, 2 F16, 3 a block format
  DType block;      // the block format (dtype 3)
};

// grid-stride over N * D elements.
__global__ void embed_rows_kernel(float* __restrict__ out,               // [N, D]
                                  const RowSource* __restrict__ rows,    // [N]
                                  int64_t N, int64_t D) {
  pdl_begin();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < N * D; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / D, c = i - r * D;
    const RowSource s = rows[r];
    float v;
    if (s.dtype == 3) {
      float f[8];
      load8_block(s.block, static_cast<const uint8_t*>(s.src), c & ~int64_t(7), f);
      v = f[c & 7];
    } else if (s.dtype == 1) v = __bfloat162float(static_cast<const __nv_bfloat16*>(s.src)[c]);
    else if (s.dtype == 2) v = __half2float(static_cast<const __half*>(s.src)[c]);
    else v = static_cast<const float*>(s.src)[c];
    out[i] = v;
  }
}

}  // namespace

void embed_rows(const Context& ctx, const Tensor& out, const std::vector<Tensor>& shards,
                const std::vector<int32_t>& ids) {
  check_f32(out, "embed_rows out");
  KCHECK_MSG(out.rows == int64_t(ids.size()) && !shards.empty(), "embed_rows: out has ", out.rows, " rows for ",
             ids.size(), " ids over ", shards.size(), " shards");
  std::vector<RowSource> src(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    int64_t row = ids[i];
    size_t s = 0;
    while (s < shards.size() && row >= shards[s].rows) row -= shards[s++].rows;
    KCHECK_MSG(s < shards.size() && row >= 0, "embedding row ", ids[i], " outside the table");
    const Tensor& t = shards[s];
    KCHECK_MSG(t.cols == out.cols && t.device == Device::kCuda, "embed_rows: shard ", s, " is [", t.rows, ", ",
               t.cols, "] (need ", out.cols, " columns, on the device)");
    int32_t code = 0;
    switch (t.dtype) {
      case DType::kF32: code = 0; break;
      case DType::kBF16: code = 1; break;
      case DType::kF16: code = 2; break;
      case DType::kQ8_0: case DType::kQ5_0: case DType::kQ5_1: case DType::kQ4_K: case DType::kQ5_K:
      case DType::kQ6_K: case DType::kMXFP4: code = 3; break;
      default: unsupported("embed_rows: table dtype ", dtype_name(t.dtype), " is not supported on CUDA");
    }
    src[i] = {static_cast<const uint8_t*>(t.data) + size_t(row) * t.row_bytes(), code, t.dtype};
  }
  if (out.numel() == 0) return;
  const auto* d_src =
      static_cast<const RowSource*>(ctx.upload_scratch(kSlotEmbedRows, src.data(), src.size() * sizeof(RowSource)));
  const int64_t n = out.numel();
  launch(embed_rows_kernel, unsigned(std::min<int64_t>(ceil_div(n, 256), 65535)), 256, 0, ctx.stream, out.f32(), d_src,
         out.rows, out.cols);
  CUDA_CHECK_LAUNCH();
}

void embed(const Context& ctx, const Tensor& out, const Tensor& table, const StepPlan& plan, float scale) {
  check_f32(out, "embed out");
  check_step(ctx, plan);
  KCHECK_MSG(out.rows == plan.n_rows() && out.cols == table.cols, "embed: out [", out.rows, ", ", out.cols,
             "] for ", plan.n_rows(), " tokens of a [", table.rows, ", ", table.cols, "] table");
  if (out.rows == 0) return;
  // Token ids were validated on the host already (the plan is host data): check here too.
  for (int32_t id : plan.tokens) KCHECK_MSG(id >= 0 && id < table.rows, "token id ", id, " outside the vocabulary");
  if (dtype_is_t32_layout(table.dtype))
    unsupported("embed: a ", dtype_name(table.dtype),
                " table (Ops::upload_matrix's layout, for matmul only) cannot be gathered by rows");
  if (dtype_is_quantized(table.dtype)) {
    launch(embed_quant_kernel, unsigned(out.rows), 128, 0, ctx.stream, out.f32(),
           static_cast<const uint8_t*>(table.data), table.dtype, table.row_bytes(), ctx.step.tokens, out.cols,
           table.rows, scale);
    CUDA_CHECK_LAUNCH();
    return;
  }
  dispatch_weight(table.dtype, "embed", [&]<typename W>() {
    launch(embed_kernel<W>, unsigned(out.rows), 256, 0, ctx.stream, out.f32(), table.as<const W>(), ctx.step.tokens,
           out.cols, table.rows, scale);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace kestrel::cuda
