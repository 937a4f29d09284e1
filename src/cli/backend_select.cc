#include "cli/backend_select.h"

#include "backend/cpu/cpu_ops.h"
#include "core/error.h"
#ifdef KESTREL_HAVE_CUDA
#include "backend/cuda/cuda_ops.h"
#endif

namespace kestrel::cli {

BackendOptions backend_options(const Args& args) {
  BackendOptions o{.device = args.get("device", "cpu"), .deterministic = args.flag("deterministic")};
  const std::string precision = args.get("precision", "f32");
  if (precision == "f64") o.activations = DType::kF64;
  else if (precision != "f32") bad_input("--precision must be f32 or f64, got '", precision, "'");
  return o;
}

std::unique_ptr<Ops> make_backend(const BackendOptions& options) {
  if (options.activations != DType::kF32 && options.device != "cpu")
    unsupported("--precision f64 runs on the CPU backend only (--device cpu), not --device ", options.device);
  if (options.device == "cpu") return std::make_unique<CpuOps>(options.activations);  // batch-invariant already
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
