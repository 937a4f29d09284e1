#include "cli/sampling_options.h"

#include <cstdint>
#include <string>

namespace kestrel::cli {

namespace {
std::string number(double v) {
  std::string s = std::to_string(v);
  s.erase(s.find_last_not_of('0') + 1);
  if (s.back() == '.') s.pop_back();
  return s;
}
}  // namespace

std::vector<OptionSpec> sampling_option_specs(const SamplingDefaults& d) {
  return {
      {"temperature", "", "T", "sampling temperature (0 = greedy)", number(d.temperature)},
      {"top-k", "", "K", "sample among the K most likely tokens (0 = all)", "0"},
      {"top-p", "", "P", "nucleus: the most likely tokens holding P of the probability", number(d.top_p)},
      {"min-p", "", "P", "drop tokens less likely than P x the most likely one (0 = off)", "0"},
      {"repetition-penalty", "", "R",
       "divide (positive) or multiply (negative) the logits of tokens already in the prompt or output by R "
       "(Hugging Face's; 1 = off)",
       "1"},
      {"presence-penalty", "", "X", "subtract X from the logits of tokens already generated (OpenAI's)", "0"},
      {"frequency-penalty", "", "X", "subtract X times its count from each generated token's logit (OpenAI's)", "0"},
      {"seed", "", "S", "random seed for sampling", "0"},
  };
}

std::vector<OptionSpec> with_sampling_options(std::vector<OptionSpec> before, const SamplingDefaults& d,
                                              const std::vector<OptionSpec>& after) {
  for (auto& o : sampling_option_specs(d)) before.push_back(std::move(o));
  before.insert(before.end(), after.begin(), after.end());
  return before;
}

SamplingParams sampling_params(const Args& args, const SamplingDefaults& d) {
  SamplingParams p;
  p.temperature = float(args.get_double("temperature", d.temperature, 0.0, 100.0));
  p.top_k = int(args.get_int("top-k", 0, 0, 1 << 24));
  p.top_p = float(args.get_double("top-p", d.top_p, 1e-6, 1.0));
  p.min_p = float(args.get_double("min-p", 0.0, 0.0, 1.0));
  p.repetition_penalty = float(args.get_double("repetition-penalty", 1.0, 1e-3, 10.0));
  p.presence_penalty = float(args.get_double("presence-penalty", 0.0, -2.0, 2.0));
  p.frequency_penalty = float(args.get_double("frequency-penalty", 0.0, -2.0, 2.0));
  p.seed = uint64_t(args.get_int("seed", 0, 0, INT64_MAX));
  return p;
}

}  // namespace kestrel::cli
