// moe_route: softmax over the experts, top-k (ties to the lower index), optional renormalization.
// moe_experts: the routed SwiGLU experts as gathered GEMVs, one (token, rank) pair per block row:
//   h[p, F]   = silu(gate_e x_t) * up_e x_t          (moe_gate_up_kernel)
//   y[p, H]   = weight_p * down_e h[p]                (moe_down_kernel)
//   out[t, H] = sum_j y[t * k + j]  in rank order     (moe_sum_kernel)
// Each pair reads its expert's rows itself: right for decode, where few pairs share an expert;
// prefill wants the grouped GEMM (docs/cuda.md).
#include "backend/cuda/device_util.cuh"

namespace kestrel::cuda {
namespace {

constexpr int kMaxTopK = 64;

// grid: T blocks of 32 threads; dynamic smem: E doubles.
__global__ void moe_route_kernel(int32_t* __restrict__ ids,       // [T, k]
                                 float* __restrict__ weights,     // [T, k]
                                 const float* __restrict__ logits,  // [T, E]
                                 int E, int k, bool norm_topk) {
  extern __shared__ double prob[];  // [E]
  __shared__ double chosen[kMaxTopK];
  const int lane = threadIdx.x;
  const int64_t t = blockIdx.x;
  const float* l = logits + t * E;
  float mx = -INFINITY;
  for (int e = lane; e < E; e += 32) mx = fmaxf(mx, l[e]);
  mx = warp_max(mx);
  double sum = 0.0;
  for (int e = lane; e < E; e += 32) {
    prob[e] = exp(double(l[e]) - double(mx));
    sum += prob[e];
  }
  sum = warp_sum(sum);
  __syncwarp();
  for (int e = lane; e < E; e += 32) prob[e] /= sum;
  __syncwarp();
  double denom = 0.0;
  for (int j = 0; j < k; ++j) {
    double best = -1.0;
    int best_e = E;
    for (int e = lane; e < E; e += 32) {
      if (prob[e] > best) best = prob[e], best_e = e;  // strided ascending: ties keep the lower index
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const double ob = __shfl_xor_sync(kFullMask, best, o);
      const int oe = __shfl_xor_sync(kFullMask, best_e, o);
      if (ob > best || (ob == best && oe < best_e)) best = ob, best_e = oe;
    }
    if (lane == 0) {
      ids[t * k + j] = best_e;
      chosen[j] = best;
    }
    denom += best;
    __syncwarp();
    if (lane == (best_e & 31)) prob[best_e] = -2.0;  // taken
    __syncwarp();
  }
  if (lane == 0) {
    for (int j = 0; j < k; ++j) weights[t * k + j] = float(norm_topk ? chosen[j] / denom : chosen[j]);
  }
}

constexpr int kWarps = 8;

// grid: (ceil(F / kWarps), T * k); warp per hidden unit f of pair p.
template <typename W>
__global__ void moe_gate_up_kernel(float* __restrict__ hbuf,        // [T * k, F]
                                   const float* __restrict__ x,     // [T, H]
                                   const int32_t* __restrict__ ids, // [T * k]
                                   const void* const* __restrict__ gate,  // [E] -> [F, H]
                                   const void* const* __restrict__ up,    // [E] -> [F, H]
                                   int k, int64_t H, int64_t F, bool vec) {
  const int64_t f = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (f >= F) return;
  const int64_t p = blockIdx.y, t = p / k;
  const int e = ids[p];
  const float* xr = x + t * H;
  const float g = warp_dot(xr, static_cast<const W*>(gate[e]) + f * H, H, vec);
  const float u = warp_dot(xr, static_cast<const W*>(up[e]) + f * H, H, vec);
  if ((threadIdx.x & 31) == 0) hbuf[p * F + f] = siluf(g) * u;
}

// grid: (ceil(H / kWarps), T * k); warp per output c of pair p.
template <typename W>
__global__ void moe_down_kernel(float* __restrict__ ybuf,           // [T * k, H]
                                const float* __restrict__ hbuf,     // [T * k, F]
                                const int32_t* __restrict__ ids,    // [T * k]
                                const float* __restrict__ weights,  // [T * k]
                                const void* const* __restrict__ down,  // [E] -> [H, F]
                                int64_t H, int64_t F, bool vec) {
  const int64_t c = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (c >= H) return;
  const int64_t p = blockIdx.y;
  const float y = warp_dot(hbuf + p * F, static_cast<const W*>(down[ids[p]]) + c * F, F, vec);
  if ((threadIdx.x & 31) == 0) ybuf[p * H + c] = weights[p] * y;
}

// out[t, c] = sum over j in order of ybuf[t * k + j, c].
__global__ void moe_sum_kernel(float* __restrict__ out, const float* __restrict__ ybuf, int k, int64_t T, int64_t H) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < T * H; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / H, c = i % H;
    float s = 0.0f;
    for (int j = 0; j < k; ++j) s += ybuf[(t * k + j) * H + c];
    out[i] = s;
  }
}

}  // namespace

void moe_route(const Context& ctx, const Tensor& ids, const Tensor& weights, const Tensor& logits, int top_k,
               bool norm_topk) {
  check_f32(logits, "moe_route logits");
  check_f32(weights, "moe_route weights");
  const int64_t T = logits.rows, E = logits.cols;
  KCHECK_MSG(ids.dtype == DType::kI32 && ids.rows == T && ids.cols == top_k && weights.rows == T &&
                 weights.cols == top_k,
             "moe_route: ids [", ids.rows, ", ", ids.cols, "] weights [", weights.rows, ", ", weights.cols, "] for ", T,
             " rows, top ", top_k);
  KCHECK_MSG(top_k >= 1 && top_k <= E && top_k <= kMaxTopK && E <= 4096, "moe_route: top ", top_k, " of ", E, " experts");
  if (T == 0) return;
  moe_route_kernel<<<unsigned(T), 32, size_t(E) * sizeof(double), ctx.stream>>>(ids.as<int32_t>(), weights.f32(),
                                                                                 logits.f32(), int(E), top_k, norm_topk);
  CUDA_CHECK_LAUNCH();
}

void moe_experts(const Context& ctx, const Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                 const ExpertWeights& experts) {
  check_f32(out, "moe_experts out");
  check_f32(x, "moe_experts x");
  check_f32(weights, "moe_experts weights");
  const int64_t T = x.rows, H = x.cols;
  const int k = int(ids.cols);
  const size_t E = experts.gate.size();
  KCHECK_MSG(E > 0 && experts.up.size() == E && experts.down.size() == E, "moe_experts: ", E, " experts");
  KCHECK(out.rows == T && out.cols == H && ids.dtype == DType::kI32 && ids.rows == T && weights.rows == T &&
         weights.cols == k);
  const int64_t F = experts.gate[0].rows;
  const DType wt = experts.gate[0].dtype;
  std::vector<const void*> ptrs;
  ptrs.reserve(3 * E);
  bool vec_h = H % 8 == 0 && aligned16(x.data), vec_f = F % 8 == 0;
  for (const auto* list : {&experts.gate, &experts.up, &experts.down}) {
    for (const Tensor& w : *list) {
      KCHECK_MSG(w.dtype == wt && w.device == Device::kCuda, "moe_experts: experts must share one dtype, on the device");
      ptrs.push_back(w.data);
      vec_h = vec_h && aligned16(w.data);
      vec_f = vec_f && aligned16(w.data);
    }
  }
  for (size_t e = 0; e < E; ++e) {
    KCHECK(experts.gate[e].rows == F && experts.gate[e].cols == H && experts.up[e].rows == F &&
           experts.up[e].cols == H && experts.down[e].rows == H && experts.down[e].cols == F);
  }
  if (T == 0) return;
  const void* const* table = ctx.tables->get(ptrs, ctx.stream);  // [gate E | up E | down E]
  const int64_t P = T * k;
  KCHECK_MSG(P <= 65535, "moe_experts: ", P, " (token, expert) pairs in one step (the CUDA kernel takes 65535)");
  auto* hbuf = static_cast<float*>(ctx.scratch->get(kSlotMoeHidden, size_t(P * F) * 4));
  auto* ybuf = static_cast<float*>(ctx.scratch->get(kSlotMoePartial, size_t(P * H) * 4));
  vec_f = vec_f && aligned16(hbuf);
  dispatch_weight(wt, "moe_experts", [&]<typename W>() {
    moe_gate_up_kernel<W><<<dim3(unsigned(ceil_div(F, kWarps)), unsigned(P)), kWarps * 32, 0, ctx.stream>>>(
        hbuf, x.f32(), ids.as<const int32_t>(), table, table + E, k, H, F, vec_h);
    CUDA_CHECK_LAUNCH();
    moe_down_kernel<W><<<dim3(unsigned(ceil_div(H, kWarps)), unsigned(P)), kWarps * 32, 0, ctx.stream>>>(
        ybuf, hbuf, ids.as<const int32_t>(), weights.f32(), table + 2 * E, H, F, vec_f);
    CUDA_CHECK_LAUNCH();
  });
  moe_sum_kernel<<<unsigned(std::min<int64_t>(ceil_div(T * H, 256), 65535)), 256, 0, ctx.stream>>>(out.f32(), ybuf, k,
                                                                                                   T, H);
  CUDA_CHECK_LAUNCH();
}

}  // namespace kestrel::cuda
