// --device for every command that runs a model: "cpu" always, "cuda" where built and present.
#pragma once

#include <memory>
#include <string>

#include "ops/ops.h"

namespace kestrel::cli {

// Error naming --device when the backend is unknown or not available in this build/machine.
std::unique_ptr<Ops> make_backend(const std::string& device);

// --precision f32|f64: the activation dtype. f64 is the CPU backend's float64 oracle mode
// (activations, caches and recurrent state in double; weights as stored); --device cuda refuses it.
DType parse_precision(const std::string& precision);
std::unique_ptr<Ops> make_backend(const std::string& device, DType activations);

}  // namespace kestrel::cli
