#include "engine/parity.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "engine/runner.h"
#include "engine/sampler.h"
#include "io/safetensors.h"

namespace kestrel {
namespace {

const TensorInfo& need(const SafetensorsFile& ref, const std::string& name, DType dtype) {
  auto it = ref.tensors().find(name);
  if (it == ref.tensors().end()) bad_input(ref.path(), ": reference tensor '", name, "' is missing");
  if (it->second.dtype != dtype)
    bad_input(ref.path(), ": reference tensor '", name, "' has dtype ", dtype_name(it->second.dtype), ", expected ",
              dtype_name(dtype));
  return it->second;
}

double rms(const float* x, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; ++i) s += double(x[i]) * x[i];
  return std::sqrt(s / double(std::max<size_t>(n, 1)));
}

double max_abs_diff(const float* a, const float* b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; ++i) {
    double d = std::fabs(double(a[i]) - double(b[i]));
    if (std::isnan(d)) return INFINITY;
    m = std::max(m, d);
  }
  return m;
}

double top2_gap(const float* x, int64_t n) {
  float a = -INFINITY, b = -INFINITY;
  for (int64_t i = 0; i < n; ++i) {
    if (x[i] > a) {
      b = a;
      a = x[i];
    } else if (x[i] > b) {
      b = x[i];
    }
  }
  return double(a) - double(b);
}

}  // namespace

ParityReport run_parity(Model& model, const std::string& reference_path, const ParityOptions& opts) {
  SafetensorsFile ref = SafetensorsFile::open(reference_path);
  const int64_t V = model.config().vocab_size;
  ParityReport report;
  report.pass = true;
  int n_prompts = 0;
  while (ref.tensors().count("p" + std::to_string(n_prompts) + ".ids")) ++n_prompts;
  if (n_prompts == 0) bad_input(reference_path, ": no prompts (expected tensors p0.ids, p0.logits, ...)");
  if (opts.max_prompts >= 0) n_prompts = std::min(n_prompts, opts.max_prompts);

  for (int p = 0; p < n_prompts; ++p) {
    const std::string pre = "p" + std::to_string(p) + ".";
    const TensorInfo& ids_t = need(ref, pre + "ids", DType::kI32);
    const int64_t T = ids_t.numel();
    std::vector<int32_t> ids(static_cast<size_t>(T));
    std::memcpy(ids.data(), ids_t.data, size_t(T) * 4);
    for (int32_t id : ids) {
      if (id < 0 || id >= V) bad_input(reference_path, ": ", pre, "ids holds token ", id, " outside the vocabulary (", V, ")");
    }
    const TensorInfo& logits_t = need(ref, pre + "logits", DType::kF32);
    if (logits_t.numel() != T * V)
      bad_input(reference_path, ": ", pre, "logits has ", logits_t.numel(), " values, expected ", T, " x ", V);
    const float* ref_logits = reinterpret_cast<const float*>(logits_t.data);
    const TensorInfo& greedy_t = need(ref, pre + "greedy", DType::kI32);
    const int64_t N = greedy_t.numel();
    const int32_t* ref_greedy = reinterpret_cast<const int32_t*>(greedy_t.data);
    const TensorInfo& steps_t = need(ref, pre + "step_logits", DType::kF32);
    if (steps_t.numel() != N * V) bad_input(reference_path, ": ", pre, "step_logits has the wrong size");
    const float* ref_steps = reinterpret_cast<const float*>(steps_t.data);

    PromptParity pp;
    pp.len = int(T);
    Runner runner(model, cpu_cache_sizing(model.config(), 1, T + N + 1));
    SequenceState seq;
    runner.start(seq);
    HiddenCapture capture;
    const bool want_hidden = ref.tensors().count(pre + "hidden0") != 0;
    const auto& logits = runner.step({{.seq = &seq, .tokens = ids, .all_logits = true}}, want_hidden ? &capture : nullptr);
    pp.max_abs_err = max_abs_diff(logits.data(), ref_logits, size_t(T * V));
    pp.rel_err = pp.max_abs_err / std::max(rms(ref_logits, size_t(T * V)), 1e-30);

    if (want_hidden) {
      pp.hidden_rel_err = 0;
      for (size_t L = 0; L < capture.layers.size(); ++L) {
        auto it = ref.tensors().find(pre + "hidden" + std::to_string(L));
        if (it == ref.tensors().end()) continue;
        // Usually [T, H]; wider where the residual stream is (hyper-connection streams).
        const size_t n = capture.layers[L].size();
        if (size_t(it->second.numel()) != n)
          bad_input(reference_path, ": ", it->first, " has ", it->second.numel(), " values, the model's layer ", L,
                    " output has ", n);
        const float* rh = reinterpret_cast<const float*>(it->second.data);
        double err = max_abs_diff(capture.layers[L].data(), rh, n) / std::max(rms(rh, n), 1e-30);
        pp.hidden_rel_err = std::max(pp.hidden_rel_err, err);
      }
    }

    // Greedy continuation from the cached prompt, one token at a time.
    std::vector<float> last(logits.end() - V, logits.end());
    pp.greedy_match = true;
    double step_err = 0, step_scale = 0;
    for (int64_t i = 0; i < N; ++i) {
      const float* rs = ref_steps + i * V;
      step_err = std::max(step_err, max_abs_diff(last.data(), rs, size_t(V)));
      step_scale = std::max(step_scale, rms(rs, size_t(V)));
      int32_t tok = argmax(last.data(), V);
      if (tok != ref_greedy[i]) {
        pp.greedy_match = false;
        pp.first_divergence = int(i);
        pp.divergence_gap = top2_gap(rs, V);
        // A flip between two logits closer than our measured error is a near-tie, not a bug.
        pp.near_tie = pp.divergence_gap <= 2.0 * std::max(step_err, pp.max_abs_err);
        break;
      }
      if (i + 1 == N) break;
      int32_t t = tok;
      const auto& next = runner.step({{.seq = &seq, .tokens = std::span<const int32_t>(&t, 1)}});
      last.assign(next.begin(), next.end());
    }
    pp.step_rel_err = step_err / std::max(step_scale, 1e-30);
    runner.finish(seq);
    pp.pass = pp.rel_err <= opts.tolerance && pp.step_rel_err <= opts.tolerance &&
              (pp.greedy_match || pp.near_tie) &&
              (pp.hidden_rel_err < 0 || pp.hidden_rel_err <= opts.hidden_tolerance);
    report.pass = report.pass && pp.pass;
    report.prompts.push_back(pp);
  }
  return report;
}

}  // namespace kestrel
