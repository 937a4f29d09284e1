// CUDA_CHECK / CUBLAS_CHECK: every CUDA runtime and cuBLAS call goes through one of these.
// A failure throws Error(kInternal) naming the call, the file:line and the CUDA error string.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "core/error.h"

namespace kestrel::cuda {

[[noreturn]] void cuda_failed(cudaError_t err, const char* expr, const char* file, int line);
[[noreturn]] void cublas_failed(cublasStatus_t st, const char* expr, const char* file, int line);

}  // namespace kestrel::cuda

#define CUDA_CHECK(expr)                                                                  \
  do {                                                                                    \
    cudaError_t kestrel_err_ = (expr);                                                    \
    if (kestrel_err_ != cudaSuccess) ::kestrel::cuda::cuda_failed(kestrel_err_, #expr, __FILE__, __LINE__); \
  } while (0)

#define CUBLAS_CHECK(expr)                                                                \
  do {                                                                                    \
    cublasStatus_t kestrel_st_ = (expr);                                                  \
    if (kestrel_st_ != CUBLAS_STATUS_SUCCESS)                                             \
      ::kestrel::cuda::cublas_failed(kestrel_st_, #expr, __FILE__, __LINE__);             \
  } while (0)

// After a kernel launch: launch-configuration errors surface here, at the launcher.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
