// Printing a ProfilingOps profile (kestrel bench --profile, kestrel run --profile).
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "ops/profiling_ops.h"

namespace kestrel::cli {

// Prints to `out` the device (on the CPU, wall) time per step of the recorded steps by phase and
// by op, the time between ops (host work the device waited for) and the matrix products'
// floating-point rate over their own time, as a fraction of `matmul_ceiling` FLOP/s when that is
// given (kestrel bench measures it); returns the same as JSON.
nlohmann::json print_profile(FILE* out, const std::string& label, const OpProfile& p, double matmul_ceiling = 0);

}  // namespace kestrel::cli
