#include "cli/profile_print.h"

#include <algorithm>
#include <vector>

namespace kestrel::cli {

nlohmann::json print_profile(FILE* out, const std::string& label, const OpProfile& p, double matmul_ceiling) {
  if (p.steps == 0 || p.span <= 0) {
    std::fprintf(out, "  profile of %s: no steps recorded\n", label.c_str());
    return {{"steps", 0}};
  }
  const double steps = double(p.steps);
  auto ms = [&](double s) { return 1e3 * s / steps; };
  std::fprintf(out, "  profile of %s: %ld steps, %.3f ms per step\n", label.c_str(), long(p.steps), ms(p.span));
  nlohmann::json phases = nlohmann::json::object(), ops = nlohmann::json::object();
  for (int i = 0; i < kNumPhases; ++i) {
    const auto& r = p.by_phase[i];
    if (r.calls == 0) continue;
    std::fprintf(out, "    %-12s %9.3f ms %6.1f%%  %7.1f ops/step\n", phase_name(Phase(i)), ms(r.seconds),
                100.0 * r.seconds / p.span, double(r.calls) / steps);
    phases[phase_name(Phase(i))] = {{"ms_per_step", ms(r.seconds)}, {"ops_per_step", double(r.calls) / steps}};
  }
  const double between = std::max(0.0, p.span - p.in_ops);
  std::fprintf(out, "    %-12s %9.3f ms %6.1f%%  (host work and launch gaps)\n", "between ops", ms(between),
              100.0 * between / p.span);
  std::vector<std::pair<std::string, OpProfile::Row>> by_op(p.by_op.begin(), p.by_op.end());
  std::sort(by_op.begin(), by_op.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  std::fprintf(out, "    ops:");
  for (size_t i = 0; i < by_op.size(); ++i) {
    const auto& [name, r] = by_op[i];
    ops[name] = {{"ms_per_step", ms(r.seconds)}, {"calls_per_step", double(r.calls) / steps}};
    if (i < 8) std::fprintf(out, " %s %.3f ms (%.0f%%)%s", name.c_str(), ms(r.seconds), 100.0 * r.seconds / p.span,
                           i + 1 < std::min<size_t>(8, by_op.size()) ? "," : "");
  }
  std::fprintf(out, "\n");
  nlohmann::json j = {{"steps", p.steps}, {"ms_per_step", ms(p.span)}, {"between_ops_ms_per_step", ms(between)},
                      {"phases", phases}, {"ops", ops}};
  // The matrix products' rate: their FLOPs over the time of the ops that compute them (every op
  // ProfilingOps counts FLOPs for; matmul_multi is timed under "matmul").
  double product_seconds = 0;
  // (matmul_gated_and_route's time includes its route, a few microseconds a call.)
  for (const char* name : {"matmul", "matmul_gated", "matmul_gated_and_route", "moe_experts", "moe_experts_shared"})
    if (auto it = p.by_op.find(name); it != p.by_op.end()) product_seconds += it->second.seconds;
  if (p.matmul_flops > 0 && product_seconds > 0) {
    const double rate = p.matmul_flops / product_seconds;
    std::fprintf(out, "    matrix products: %.4g GFLOP per step in %.3f ms: %.4g TFLOP/s", 1e-9 * p.matmul_flops / steps,
                 ms(product_seconds), 1e-12 * rate);
    j["matmul_gflop_per_step"] = 1e-9 * p.matmul_flops / steps;
    j["matmul_tflops"] = 1e-12 * rate;
    if (matmul_ceiling > 0) {
      std::fprintf(out, ", %.1f%% of the measured matmul ceiling", 100.0 * rate / matmul_ceiling);
      j["matmul_ceiling_fraction"] = rate / matmul_ceiling;
    }
    std::fprintf(out, "\n");
  }
  return j;
}

}  // namespace kestrel::cli
