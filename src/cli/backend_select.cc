#include "cli/backend_select.h"

#include "backend/cpu/cpu_ops.h"
#include "core/error.h"
#ifdef KESTREL_HAVE_CUDA
#include "backend/cuda/cuda_ops.h"
#endif

namespace kestrel::cli {

std::unique_ptr<Ops> make_backend(const std::string& device) {
  if (device == "cpu") return std::make_unique<CpuOps>();
  if (device == "cuda") {
#ifdef KESTREL_HAVE_CUDA
    return std::make_unique<CudaOps>();  // refuses with "--device cuda: no CUDA device found"
#else
    unsupported("--device cuda: this build has no CUDA backend (configure with -DKESTREL_CUDA=ON; use --device cpu)");
#endif
  }
  bad_input("--device must be cpu or cuda, got '", device, "'");
}

DType parse_precision(const std::string& precision) {
  if (precision == "f32") return DType::kF32;
  if (precision == "f64") return DType::kF64;
  bad_input("--precision must be f32 or f64, got '", precision, "'");
}

std::unique_ptr<Ops> make_backend(const std::string& device, DType activations) {
  if (activations == DType::kF32) return make_backend(device);
  if (device != "cpu") unsupported("--precision f64 runs on the CPU backend only (--device cpu), not --device ", device);
  return std::make_unique<CpuOps>(activations);
}

}  // namespace kestrel::cli
