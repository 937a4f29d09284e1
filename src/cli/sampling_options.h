// The sampling flags `run` and `chat` share: the same fields the server reads from a request body
// (docs/serving.md), with the command's own defaults.
#pragma once

#include <vector>

#include "cli/args.h"
#include "engine/sampler.h"

namespace kestrel::cli {

struct SamplingDefaults {
  double temperature = 0.0;  // 0: greedy
  double top_p = 1.0;
};

std::vector<OptionSpec> sampling_option_specs(const SamplingDefaults& d);
// `before`, the sampling flags, then `after`: a command's option list.
std::vector<OptionSpec> with_sampling_options(std::vector<OptionSpec> before, const SamplingDefaults& d,
                                              const std::vector<OptionSpec>& after);
SamplingParams sampling_params(const Args& args, const SamplingDefaults& d);

}  // namespace kestrel::cli
