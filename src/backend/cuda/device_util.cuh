// Device helpers shared by the kernels: element loads for every weight dtype, warp and block
// reductions, activation functions. Included only by .cu files.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>
#include <utility>

#include "backend/cuda/context.h"

namespace kestrel::cuda {

constexpr unsigned kFullMask = 0xffffffffu;

// Programmatic dependent launch (Hopper; docs/cuda.md, "Launches"). Every kernel of the backend is
// launched through launch() below, which lets the next kernel in the stream (or the step graph)
// be scheduled before this one has finished, and every kernel's first statement is pdl_begin():
// it waits until the kernels before it in the stream have completed and their writes are
// visible (griddepcontrol.wait: a no-op for a kernel launched without the attribute), then lets
// the kernel after it be scheduled onto free multiprocessors, where it waits in turn. The wait
// comes before any load or store and before any early exit, in every block: a block that left
// without waiting could let the kernel complete, and release the one after it, while the kernel
// before it still runs. Work that reads nothing a previous kernel writes (an L2 prefetch of
// weights) may come before it: that is what the overlap buys.
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void pdl_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
__device__ __forceinline__ void pdl_begin() {
  pdl_wait();
  pdl_launch_dependents();
}

namespace launch_detail {
// cudaLaunchKernelEx with programmatic stream serialization when pdl_enabled(), and the blocks in
// clusters of *cluster when it is given.
template <typename... P, typename... A>
void launch_ex(void (*kernel)(P...), dim3 grid, dim3 block, const dim3* cluster, size_t smem, cudaStream_t stream,
               A&&... args) {
  cudaLaunchAttribute attr[2];
  unsigned n = 0;
  if (cluster) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = cluster->x;
    attr[n].val.clusterDim.y = cluster->y;
    attr[n].val.clusterDim.z = cluster->z;
    ++n;
  }
  if (pdl_enabled()) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = n;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...));
}
}  // namespace launch_detail

// Calls fn.template operator()<N>() with N = n for n of 1 .. 7 and N = 8 for any other n: one
// instantiation of a kernel for each small count it is compiled for (a GEMV pass's rows, the
// values a lane holds of a head).
template <typename Fn>
void with_1_to_8(int64_t n, Fn&& fn) {
  switch (n) {
    case 1: fn.template operator()<1>(); break;
    case 2: fn.template operator()<2>(); break;
    case 3: fn.template operator()<3>(); break;
    case 4: fn.template operator()<4>(); break;
    case 5: fn.template operator()<5>(); break;
    case 6: fn.template operator()<6>(); break;
    case 7: fn.template operator()<7>(); break;
    default: fn.template operator()<8>(); break;
  }
}

// kernel<<<grid, block, smem, stream>>>(args...), with programmatic stream serialization when
// pdl_enabled(). Launch-configuration errors throw here, naming the launch.
template <typename... P, typename... A>
void launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, A&&... args) {
  launch_detail::launch_ex(kernel, grid, block, nullptr, smem, stream, std::forward<A>(args)...);
}
// launch() for a kernel whose blocks form thread-block clusters of `cluster` (each grid dimension
// a multiple of the cluster's).
template <typename... P, typename... A>
void launch_cluster(void (*kernel)(P...), dim3 grid, dim3 block, dim3 cluster, size_t smem, cudaStream_t stream,
                    A&&... args) {
  launch_detail::launch_ex(kernel, grid, block, &cluster, smem, stream, std::forward<A>(args)...);
}

// 16 bytes global -> shared, asynchronously; `valid` false writes zeros and reads nothing.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

template <typename W>
__device__ __forceinline__ float to_f32(W v);
template <>
__device__ __forceinline__ float to_f32<float>(float v) { return v; }
template <>
__device__ __forceinline__ float to_f32<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <>
__device__ __forceinline__ float to_f32<__half>(__half v) { return __half2float(v); }

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

// Sum over the whole block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
template <typename T>
__device__ T block_sum(T v) {
  __shared__ T partial[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  __syncthreads();  // partial may still be read by a previous call
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  T total = T(0);
  for (int i = 0; i < n_warps; ++i) total += partial[i];  // fixed order: deterministic
  return total;
}

// An RMS norm's scale from the sum of squares ss of n values (in double, as the CPU oracle): every
// CUDA norm forms it this way, which is what lets a fused kernel give a norm kernel's bits.
__device__ __forceinline__ float rms_scale(double ss, int64_t n, float eps) {
  return float(1.0 / sqrt(ss / double(n) + double(eps)));
}
__device__ __forceinline__ float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float siluf(float x) { return x / (1.0f + expf(-x)); }
// gelu, tanh approximation, evaluated in double and rounded once (the CPU oracle's gelu_tanh).
__device__ __forceinline__ float gelu_tanhf(float x) {
  const double d = x;
  return float(0.5 * d * (1.0 + tanh(0.7978845608028654 * (d + 0.044715 * d * d * d))));
}
// act(x) for an Activation (silu, sigmoid or gelu-tanh), as the CPU oracle computes each.
__device__ __forceinline__ float activate(float x, Activation act) {
  switch (act) {
    case Activation::kSilu: return siluf(x);
    case Activation::kSigmoid: return sigmoidf(x);
    case Activation::kGeluTanh: return gelu_tanhf(x);
  }
  return x;
}

// The 8 BF16 or F16 weights of a 16-byte word as floats.
template <typename W>
__device__ __forceinline__ void floats8(const uint4& raw, float (&f)[8]) {
  static_assert(std::is_same_v<W, __nv_bfloat16> || std::is_same_v<W, __half>);
  using W2 = std::conditional_t<std::is_same_v<W, __half>, __half2, __nv_bfloat162>;
  const W2* h = reinterpret_cast<const W2*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float2 v;
    if constexpr (std::is_same_v<W, __half>) v = __half22float2(h[i]);
    else v = __bfloat1622float2(h[i]);
    f[2 * i] = v.x;
    f[2 * i + 1] = v.y;
  }
}
// load8 (below) in two steps: the raw words, then their floats, so that loads a kernel issues
// before its PDL wait (gemv.cuh's gemv1_sums, moe.cu's one-row down kernel) stay in flight across
// it and are converted where the sums use them.
template <typename W>
struct Raw8 {
  uint4 v;
  __device__ __forceinline__ static Raw8 load(const W* p) { return {*reinterpret_cast<const uint4*>(p)}; }
  __device__ __forceinline__ void floats(float (&f)[8]) const { floats8<W>(v, f); }
};
template <>
struct Raw8<float> {
  float4 a, b;
  __device__ __forceinline__ static Raw8 load(const float* p) {
    return {*reinterpret_cast<const float4*>(p), *reinterpret_cast<const float4*>(p + 4)};
  }
  __device__ __forceinline__ void floats(float (&f)[8]) const {
    f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
  }
};
// 8 consecutive weights as floats from a 16-byte aligned (BF16/F16) or 32-byte (F32) address.
__device__ __forceinline__ void load8(const __nv_bfloat16* p, float (&f)[8]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  floats8<__nv_bfloat16>(raw, f);
}
__device__ __forceinline__ void load8(const __half* p, float (&f)[8]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  floats8<__half>(raw, f);
}
__device__ __forceinline__ void load8(const float* p, float (&f)[8]) { Raw8<float>::load(p).floats(f); }

// x[0..8) . w[0..8) with x as two float4 (a = x[0..4), b = x[4..8)), summed left to right: the
// step of every vectorized dot product (GEMV, MoE experts, warp_dot). Kernels whose rows must
// agree bit for bit (a row alone or batched) accumulate `acc += dot8(...)` in the same k order.
__device__ __forceinline__ float dot8(const float4& a, const float4& b, const float (&w)[8]) {
  return a.x * w[0] + a.y * w[1] + a.z * w[2] + a.w * w[3] + b.x * w[4] + b.y * w[5] + b.z * w[6] + b.w * w[7];
}

// dot(x[0..K), w[0..K)) over one warp (every lane gets the sum); vec: K % 8 == 0 and both
// pointers 16-byte aligned.
template <typename W>
__device__ __forceinline__ float warp_dot(const float* __restrict__ x, const W* __restrict__ w, int64_t K, bool vec) {
  const int lane = threadIdx.x & 31;
  float acc = 0.0f;
  if (vec) {
#pragma unroll 4
    for (int64_t k = int64_t(lane) * 8; k < K; k += 256) {
      float wf[8];
      load8(w + k, wf);
      const float4 a = *reinterpret_cast<const float4*>(x + k);
      const float4 b = *reinterpret_cast<const float4*>(x + k + 4);
      acc += dot8(a, b, wf);
    }
  } else {
    for (int64_t k = lane; k < K; k += 32) acc += x[k] * to_f32(w[k]);
  }
  return warp_sum(acc);
}

// The first key position a query at `pos` attends (causal, with a sliding window of `window`
// positions when window > 0): it attends [first_key, pos].
__host__ __device__ __forceinline__ int64_t first_key(int64_t pos, int window) {
  return (window > 0 && pos - window + 1 > 0) ? pos - window + 1 : 0;
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// In int64, so a launch's bound check (blocks <= 65535, <= INT32_MAX) sees the true count.
inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Calls fn.template operator()<W>() with W the device type of a weight dtype.
template <typename Fn>
void dispatch_weight(DType dt, const char* what, Fn&& fn) {
  switch (dt) {
    case DType::kBF16: fn.template operator()<__nv_bfloat16>(); break;
    case DType::kF16: fn.template operator()<__half>(); break;
    case DType::kF32: fn.template operator()<float>(); break;
    default: unsupported(what, ": weight dtype ", dtype_name(dt), " is not supported on CUDA");
  }
}

// KV cache elements: F32, or BF16 (Ops::set_kv_cache_bf16; stored rounded to nearest even).
// as_cached(x): the value a cache of element C holds for x — what a step's own key or value is
// attended as, so a position's value does not depend on whether it comes from the step or the cache.
template <typename C>
__device__ __forceinline__ C to_cache(float x);
template <>
__device__ __forceinline__ float to_cache<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 to_cache<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <typename C>
__device__ __forceinline__ float as_cached(float x) { return to_f32(to_cache<C>(x)); }

// A KV cache's k and v: F32 or BF16 alike, on the device.
inline void check_kv_cache(const Tensor& k, const Tensor& v, const char* what) {
  KCHECK_MSG(k.dtype == v.dtype && (k.dtype == DType::kF32 || k.dtype == DType::kBF16), what,
             ": the KV cache must be F32 or BF16 (k and v alike), got ", dtype_name(k.dtype), " / ",
             dtype_name(v.dtype));
  KCHECK_MSG((k.device == Device::kCuda || k.numel() == 0) && (v.device == Device::kCuda || v.numel() == 0), what,
             ": the KV cache is not on the CUDA device");
}

// Calls fn.template operator()<C>() with C the device type of a KV cache (F32 or BF16, k and v alike).
template <typename Fn>
void dispatch_kv_cache(const Tensor& k, const Tensor& v, const char* what, Fn&& fn) {
  check_kv_cache(k, v, what);
  if (k.dtype == DType::kBF16) fn.template operator()<__nv_bfloat16>();
  else fn.template operator()<float>();
}

inline void check_f32(const Tensor& t, const char* what) {
  KCHECK_MSG(t.dtype == DType::kF32, what, " must be F32, got ", dtype_name(t.dtype));
  KCHECK_MSG(t.device == Device::kCuda || t.numel() == 0, what, " is not on the CUDA device");
}

}  // namespace kestrel::cuda
