#include "cli/backend_select.h"

#include "backend/cpu/cpu_ops.h"
#include "core/error.h"
#ifdef KESTREL_HAVE_CUDA
#include "backend/cuda/cuda_ops.h"
#endif

namespace kestrel::cli {

BackendOptions backend_options(const Args& args) {
  return {.device = args.get("device", "cpu"), .deterministic = args.flag("deterministic")};
}

std::unique_ptr<Ops> make_backend(const BackendOptions& options) {
  if (options.device == "cpu") return std::make_unique<CpuOps>();  // batch-invariant already
  if (options.device == "cuda") {
#ifdef KESTREL_HAVE_CUDA
    auto ops = std::make_unique<CudaOps>();  // refuses with "--device cuda: no CUDA device found"
    ops->set_deterministic(options.deterministic);
    return ops;
#else
    unsupported("--device cuda: this build has no CUDA backend (configure with -DKESTREL_CUDA=ON; use --device cpu)");
#endif
  }
  bad_input("--device must be cpu or cuda, got '", options.device, "'");
}

}  // namespace kestrel::cli
