// kestrel parity: compare a model against a reference file of logits computed by transformers.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/backend_select.h"
#include "cli/command.h"
#include "core/files.h"
#include "engine/parity.h"
#include "model/loader.h"

namespace kestrel::cli {
namespace {

int run_parity_cmd(const Args& args) {
  const std::string dir = args.require("model");
  const std::string ref = args.get("reference", path_join(dir, "reference.safetensors"));
  const BackendOptions bo = backend_options(args);
  auto ops = make_backend(bo);
  const std::string mp = matmul_precision_report(bo);  // empty on cpu
  ParityOptions opts;
  const bool cpu = ops->device() == Device::kCpu;
  opts.tolerance = args.get_double("tolerance", cpu ? 1e-4 : 2e-2, 0.0, 1e6);
  opts.hidden_tolerance = opts.tolerance;
  LoadedModel lm = load_model(dir, *ops);
  ParityReport r = run_parity(*lm.model, ref, opts);
  if (args.flag("json")) {
    nlohmann::json j;
    j["pass"] = r.pass;
    j["model"] = dir;
    j["device"] = ops->name();
    j["device_name"] = ops->device_name();
    j["precision"] = ops->activation_dtype() == DType::kF64 ? "f64" : "f32";
    j["deterministic"] = bo.deterministic;
    j["matmul_precision"] = mp.empty() ? nlohmann::json() : nlohmann::json(mp);
    j["kv_cache"] = std::string(dtype_name(ops->kv_cache_dtype()));
    j["tolerance"] = opts.tolerance;
    j["prompts"] = nlohmann::json::array();
    for (const auto& p : r.prompts) {
      nlohmann::json e = {{"len", p.len},           {"max_abs_err", p.max_abs_err}, {"rel_err", p.rel_err},
                          {"greedy_match", p.greedy_match}, {"step_rel_err", p.step_rel_err},
                          {"near_tie", p.near_tie}, {"pass", p.pass}};
      if (p.hidden_rel_err >= 0) e["hidden_rel_err"] = p.hidden_rel_err;
      if (p.first_divergence >= 0) {
        e["first_divergence"] = p.first_divergence;
        e["divergence_gap"] = p.divergence_gap;
      }
      j["prompts"].push_back(e);
    }
    std::printf("%s\n", j.dump(1).c_str());
  } else {
    std::printf("%-6s %12s %12s %12s %12s %s\n", "len", "max_abs_err", "rel_err", "step_rel", "hidden_rel", "greedy");
    for (const auto& p : r.prompts) {
      char hidden[32] = "-";
      if (p.hidden_rel_err >= 0) std::snprintf(hidden, sizeof hidden, "%.3e", p.hidden_rel_err);
      std::string greedy = p.greedy_match ? "match"
                           : p.near_tie   ? "near-tie flip at step " + std::to_string(p.first_divergence)
                                          : "MISMATCH at step " + std::to_string(p.first_divergence);
      std::printf("%-6d %12.3e %12.3e %12.3e %12s %s%s\n", p.len, p.max_abs_err, p.rel_err, p.step_rel_err, hidden,
                  greedy.c_str(), p.pass ? "" : "  FAIL");
    }
    std::printf("%s (tolerance %.1e of the logits' RMS, device %s, %s activations%s%s%s)\n", r.pass ? "PASS" : "FAIL",
                opts.tolerance, ops->name(), ops->activation_dtype() == DType::kF64 ? "f64" : "f32",
                mp.empty() ? "" : (", matmul precision " + mp).c_str(), bo.deterministic ? ", deterministic" : "",
                ops->kv_cache_dtype() == DType::kBF16 ? ", BF16 KV cache" : "");
  }
  return r.pass ? 0 : 1;
}

const Registrar kReg{{
    .name = "parity",
    .summary = "check a model's logits against a reference computed by transformers",
    .usage = "kestrel parity -m DIR|FILE.gguf [--reference FILE] [--json] [--device cpu|cuda] [--precision f32|f64] "
             "[--matmul-precision bf16x3|bf16x2|bf16|exact] [--kv-cache f32|bf16] [--deterministic]",
    .details = "Runs every prompt of the reference file (default DIR/reference.safetensors): full-prompt\n"
               "logits, the greedy continuation with its step logits, and hidden states where present.\n"
               "Exit status 0 only when every prompt is within tolerance.",
    .options = {{"model", "m", "DIR", "model directory (config.json + safetensors), or a .gguf file"},
                {"reference", "r", "FILE", "reference file", "DIR/reference.safetensors"},
                {"json", "", "",
                 "print one JSON object: {pass, device, precision, matmul_precision (cuda; else null), deterministic, "
                 "prompts: [{len, max_abs_err, rel_err, greedy_match}]}"},
                {"device", "", "cpu|cuda", "backend", "cpu"},
                {"precision", "", "f32|f64",
                 "activation precision; f64 is the CPU backend's float64 oracle mode (about 2x slower)", "f32"},
                {"kv-cache", "", "f32|bf16", kKvCacheHelp, kKvCacheDefault},
                {"matmul-precision", "", "bf16x3|bf16x2|bf16|exact", kMatmulPrecisionHelp, "bf16x3"},
                {"deterministic", "", "", kDeterministicHelp},
                {"tolerance", "", "X", "max error relative to the logits' RMS", "1e-4 on cpu, 2e-2 on cuda"}},
    .run = run_parity_cmd,
}};

}  // namespace
}  // namespace kestrel::cli
