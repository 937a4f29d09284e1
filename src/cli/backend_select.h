// --device (and --deterministic) for every command that runs a model: "cpu" always, "cuda" where
// built and present.
#pragma once

#include <memory>
#include <string>

#include "cli/args.h"
#include "ops/ops.h"

namespace kestrel::cli {

struct BackendOptions {
  std::string device = "cpu";
  // A sequence's logits bit-identical whatever else shares its steps: the CUDA backend's
  // deterministic mode (CudaOps::set_deterministic). The CPU backend always is; nothing changes there.
  bool deterministic = false;
  // --precision f32|f64: the activation dtype. F64 is the CPU backend's float64 oracle mode
  // (activations, caches and recurrent state in double; weights as stored); cuda refuses it.
  DType activations = DType::kF32;
};

// The --deterministic option's help line (commands append what it does for them).
inline constexpr const char* kDeterministicHelp =
    "batch-invariant results: a sequence's logits are bit-identical whatever else is batched with it "
    "(cuda: every matmul on the F32 GEMV kernels and split-KV attention cut by each row's own context, which "
    "slows prefill and large batches; cpu: always so, no change)";

// --device (default cpu), --deterministic and, for commands that offer it, --precision.
BackendOptions backend_options(const Args& args);

// Error naming --device when the backend is unknown or not available in this build/machine.
std::unique_ptr<Ops> make_backend(const BackendOptions& options);

}  // namespace kestrel::cli
