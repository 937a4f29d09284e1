// --device for every command that runs a model: "cpu" always, "cuda" where built and present.
#pragma once

#include <memory>
#include <string>

#include "ops/ops.h"

namespace kestrel::cli {

// Error naming --device when the backend is unknown or not available in this build/machine.
std::unique_ptr<Ops> make_backend(const std::string& device);

}  // namespace kestrel::cli
