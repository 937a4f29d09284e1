#include "cli/backend_select.h"

#include <algorithm>
#include <array>
#include <string_view>

#include "backend/cpu/cpu_ops.h"
#include "core/error.h"
#ifdef KESTREL_HAVE_CUDA
#include "backend/cuda/cuda_ops.h"
#endif

namespace kestrel::cli {
namespace {

// --matmul-precision's values: matmul_precision_name() of each MatmulPrecision, the default first.
constexpr std::array<std::string_view, 4> kMatmulPrecisions = {"bf16x3", "bf16x2", "bf16", "exact"};
constexpr const char* kMatmulPrecisionList = "bf16x3, bf16x2, bf16 or exact";

// A --matmul-precision value that is not one of them, and the combinations no backend honours:
// refused by name before anything is loaded (backend_options) and again for callers that fill
// BackendOptions themselves (make_backend).
void check_matmul_precision(const BackendOptions& o) {
  if (!o.matmul_precision) return;
  const std::string& p = *o.matmul_precision;
  if (std::find(kMatmulPrecisions.begin(), kMatmulPrecisions.end(), p) == kMatmulPrecisions.end())
    bad_input("--matmul-precision must be ", kMatmulPrecisionList, ", got '", p, "'");
  if (o.device == "cpu")
    bad_input("--matmul-precision ", p, " applies to --device cuda only: the CPU backend computes every matmul on ",
              o.activations == DType::kF64 ? "F64 activations (--precision f64)" : "F32 activations",
              ", accumulated in double; drop the flag or use --device cuda");
  if (o.deterministic && p != "bf16x3" && p != "exact")
    bad_input("--matmul-precision ", p, " does not apply with --deterministic: deterministic mode computes every ",
              "matmul on the F32 GEMV kernels (as --matmul-precision exact does) and keeps the F32 split-KV ",
              "attention; drop one of the two flags");
}

void check_kv_cache(const BackendOptions& o) {
  if (o.kv_cache) kv_cache_bf16(*o.kv_cache);
}

}  // namespace

bool kv_cache_bf16(const std::string& value) {
  if (value != "f32" && value != "bf16") bad_input("--kv-cache must be f32 or bf16, got '", value, "'");
  return value == "bf16";
}

BackendOptions backend_options(const Args& args) {
  BackendOptions o{.device = args.get("device", "cpu"), .deterministic = args.flag("deterministic")};
  const std::string precision = args.get("precision", "f32");
  if (precision == "f64") o.activations = DType::kF64;
  else if (precision != "f32") bad_input("--precision must be f32 or f64, got '", precision, "'");
  if (args.has("matmul-precision")) o.matmul_precision = args.get("matmul-precision");
  check_matmul_precision(o);
  if (args.has("kv-cache")) o.kv_cache = args.get("kv-cache");
  check_kv_cache(o);
  return o;
}

std::string matmul_precision_report(const BackendOptions& options) {
  if (options.device != "cuda") return "";
  if (options.deterministic) return "exact";
  return options.matmul_precision.value_or(std::string(kMatmulPrecisions[0]));
}

namespace {

std::unique_ptr<Ops> make_ops(const BackendOptions& options) {
  if (options.activations != DType::kF32 && options.device != "cpu")
    unsupported("--precision f64 runs on the CPU backend only (--device cpu), not --device ", options.device);
  if (options.device == "cpu") return std::make_unique<CpuOps>(options.activations);  // batch-invariant already
  if (options.device == "cuda") {
#ifdef KESTREL_HAVE_CUDA
    auto ops = std::make_unique<CudaOps>();  // refuses with "--device cuda: no CUDA device found"
    ops->set_deterministic(options.deterministic);
    if (options.matmul_precision) {  // a name check_matmul_precision accepted
      bool found = false;
      for (MatmulPrecision p : {MatmulPrecision::kBf16x3, MatmulPrecision::kBf16x2, MatmulPrecision::kBf16,
                                MatmulPrecision::kExact}) {
        if (*options.matmul_precision != matmul_precision_name(p)) continue;
        ops->set_matmul_precision(p);
        found = true;
      }
      KCHECK_MSG(found, "--matmul-precision ", *options.matmul_precision, " has no MatmulPrecision");
    }
    return ops;
#else
    unsupported("--device cuda: this build has no CUDA backend (configure with -DKESTREL_CUDA=ON; use --device cpu)");
#endif
  }
  bad_input("--device must be cpu or cuda, got '", options.device, "'");
}

}  // namespace

std::unique_ptr<Ops> make_backend(const BackendOptions& options) {
  check_matmul_precision(options);
  check_kv_cache(options);
  std::unique_ptr<Ops> ops = make_ops(options);
  ops->set_kv_cache_bf16(options.kv_bf16());
  return ops;
}

}  // namespace kestrel::cli
