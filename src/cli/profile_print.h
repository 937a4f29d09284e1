// Printing a ProfilingOps profile (kestrel bench --profile, kestrel run --profile).
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "ops/profiling_ops.h"

namespace kestrel::cli {

// Prints to `out` the device (on the CPU, wall) time per step of the recorded steps by phase and
// by op, and the time between ops (host work the device waited for); returns the same as JSON.
nlohmann::json print_profile(FILE* out, const std::string& label, const OpProfile& p);

}  // namespace kestrel::cli
