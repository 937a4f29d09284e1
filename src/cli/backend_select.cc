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

}  // namespace kestrel::cli
