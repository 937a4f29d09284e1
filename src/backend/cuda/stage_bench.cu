// time_stage_chain (stage_bench.h): a chain of dependent stages as launches or as one persistent
// kernel with grid barriers.
#include "backend/cuda/stage_bench.h"

#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_util.cuh"

namespace kestrel::cuda {
namespace {

constexpr int kThreads = 256;
constexpr long long kMaxPolls = 1ll << 22;  // a barrier's wait gives up after this many polls (~seconds)

// One stage of block blockIdx.x: every thread starts from the stage's token and adds its share of
// the stage's words; the block's sum is added to the next stage's token. The unsigned sums wrap,
// so the chain's result does not depend on the order of the adds, only on every stage having
// read a complete token.
__device__ __forceinline__ void run_stage(unsigned* tokens, const uint4* src, size_t words, int s) {
  __shared__ unsigned warps[kThreads / 32];
  unsigned acc = __ldcg(tokens + s);
  const uint4* w = src + size_t(s) * words;
  for (size_t i = size_t(blockIdx.x) * kThreads + threadIdx.x; i < words; i += size_t(gridDim.x) * kThreads) {
    const uint4 v = __ldcs(w + i);
    acc += v.x ^ v.y ^ v.z ^ v.w;
  }
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(kFullMask, acc, o);
  if ((threadIdx.x & 31) == 0) warps[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned sum = 0;
    for (int i = 0; i < kThreads / 32; ++i) sum += warps[i];
    atomicAdd(tokens + s + 1, sum);
  }
}

// One stage a launch: the launch's wait orders it after the stage before.
__global__ void chain_stage_kernel(unsigned* tokens, const uint4* src, size_t words, int s) {
  pdl_begin();
  run_stage(tokens, src, words, s);
}

// Every stage in one launch: after a stage each block arrives on *arrive (release) and waits
// (acquire) until every block of the grid has, counting from `base` (the counter only grows).
__global__ void persistent_stages_kernel(unsigned* tokens, const uint4* src, size_t words, int stages,
                                         unsigned* arrive, unsigned base, int* gave_up) {
  __shared__ bool stop;
  for (int s = 0; s < stages; ++s) {
    run_stage(tokens, src, words, s);
    __syncthreads();
    if (threadIdx.x == 0) {
      const unsigned target = base + unsigned(s + 1) * gridDim.x;
      asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(arrive) : "memory");
      unsigned seen = 0;
      long long polls = 0;
      do {
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(arrive) : "memory");
      } while (int(seen - target) < 0 && ++polls < kMaxPolls);
      if (int(seen - target) < 0) atomicExch(gave_up, 1);
      stop = int(seen - target) < 0;
    }
    __syncthreads();
    if (stop) return;
  }
}

}  // namespace

StageChainTiming time_stage_chain(int stages, size_t bytes_per_stage, int reps) {
  KCHECK_MSG(stages > 0 && reps > 0, "time_stage_chain: ", stages, " stages, ", reps, " reps");
  StageChainTiming t;
  int per_sm = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, persistent_stages_kernel, kThreads, 0));
  KCHECK_MSG(per_sm >= 1, "time_stage_chain: the persistent kernel does not fit a multiprocessor");
  t.blocks = sm_count();
  const size_t words = (bytes_per_stage + sizeof(uint4) - 1) / sizeof(uint4);
  uint4* src = nullptr;
  unsigned *tokens = nullptr, *arrive = nullptr;
  int* gave_up = nullptr;
  const size_t src_bytes = std::max<size_t>(size_t(stages) * words * sizeof(uint4), sizeof(uint4));
  CUDA_CHECK(cudaMalloc(&src, src_bytes));
  CUDA_CHECK(cudaMalloc(&tokens, 2 * size_t(stages + 1) * sizeof(unsigned)));
  CUDA_CHECK(cudaMalloc(&arrive, sizeof(unsigned)));
  CUDA_CHECK(cudaMalloc(&gave_up, sizeof(int)));
  CUDA_CHECK(cudaMemset(src, 0x5b, src_bytes));
  CUDA_CHECK(cudaMemset(arrive, 0, sizeof(unsigned)));
  CUDA_CHECK(cudaMemset(gave_up, 0, sizeof(int)));
  unsigned* const tok_chain = tokens;
  unsigned* const tok_pers = tokens + stages + 1;
  const size_t tok_bytes = size_t(stages + 1) * sizeof(unsigned);
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  auto elapsed_us = [&] {
    float ms = 0;
    CUDA_CHECK(cudaEventSynchronize(e1));
    CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    return double(ms) * 1000.0;
  };
  const int warm = 3;

  // The launches, recorded as a graph (a decode step's form): the tokens reset, then a launch a stage.
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  CUDA_CHECK(cudaMemsetAsync(tok_chain, 0, tok_bytes, stream));
  for (int s = 0; s < stages; ++s)
    launch(chain_stage_kernel, unsigned(t.blocks), kThreads, 0, stream, tok_chain, src, words, s);
  CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < warm; ++i) CUDA_CHECK(cudaGraphLaunch(exec, stream));
  CUDA_CHECK(cudaEventRecord(e0, stream));
  for (int i = 0; i < reps; ++i) CUDA_CHECK(cudaGraphLaunch(exec, stream));
  CUDA_CHECK(cudaEventRecord(e1, stream));
  t.launches_us = elapsed_us() / reps / stages;

  // The persistent kernel: a cooperative launch, so its blocks are resident together.
  unsigned base = 0;
  auto persistent = [&] {
    CUDA_CHECK(cudaMemsetAsync(tok_pers, 0, tok_bytes, stream));
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeCooperative;
    attr.val.cooperative = 1;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(unsigned(t.blocks));
    cfg.blockDim = dim3(kThreads);
    cfg.stream = stream;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    CUDA_CHECK(cudaLaunchKernelEx(&cfg, persistent_stages_kernel, tok_pers, static_cast<const uint4*>(src), words,
                                  stages, arrive, base, gave_up));
    base += unsigned(stages) * unsigned(t.blocks);
  };
  for (int i = 0; i < warm; ++i) persistent();
  CUDA_CHECK(cudaEventRecord(e0, stream));
  for (int i = 0; i < reps; ++i) persistent();
  CUDA_CHECK(cudaEventRecord(e1, stream));
  t.barrier_us = elapsed_us() / reps / stages;

  unsigned last[2] = {0, 1};
  int failed = 0;
  CUDA_CHECK(cudaMemcpy(&last[0], tok_chain + stages, sizeof(unsigned), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(&last[1], tok_pers + stages, sizeof(unsigned), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(&failed, gave_up, sizeof(int), cudaMemcpyDeviceToHost));
  t.same_result = failed == 0 && last[0] == last[1];

  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  CUDA_CHECK(cudaEventDestroy(e0));
  CUDA_CHECK(cudaEventDestroy(e1));
  CUDA_CHECK(cudaStreamDestroy(stream));
  for (void* p : {static_cast<void*>(src), static_cast<void*>(tokens), static_cast<void*>(arrive),
                  static_cast<void*>(gave_up)})
    CUDA_CHECK(cudaFree(p));
  return t;
}

}  // namespace kestrel::cuda
