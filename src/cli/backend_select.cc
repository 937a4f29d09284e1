#include "cli/backend_select.h"

#include "backend/cpu/cpu_ops.h"
#include "core/error.h"

namespace kestrel::cli {

std::unique_ptr<Ops> make_backend(const std::string& device) {
  if (device == "cpu") return std::make_unique<CpuOps>();
  if (device == "cuda")
    unsupported("--device cuda: the CUDA backend is not part of this build yet (use --device cpu)");
  bad_input("--device must be cpu or cuda, got '", device, "'");
}

}  // namespace kestrel::cli
