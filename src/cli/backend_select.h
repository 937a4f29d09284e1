// --device (and --deterministic, --matmul-precision) for every command that runs a model: "cpu"
// always, "cuda" where built and present.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "cli/args.h"
#include "ops/ops.h"

namespace kestrel::cli {

struct BackendOptions {
  std::string device = "cpu";
  // A sequence's logits bit-identical whatever else shares its steps: the CUDA backend's
  // deterministic mode (CudaOps::set_deterministic). The CPU backend always is; nothing changes there.
  bool deterministic = false;
  // --precision f32|f64: the activation dtype. F64 is the CPU backend's float64 oracle mode
  // (activations, caches and recurrent state in double; weights as stored); cuda refuses it.
  DType activations = DType::kF32;
  // --matmul-precision bf16x3|bf16x2|bf16|exact: the CUDA backend's MatmulPrecision
  // (backend/cuda/cuda_ops.h, CudaOps::set_matmul_precision), kept by name so that builds without
  // CUDA parse and check it too. Absent: not given, the backend's default (bf16x3). Refused on cpu,
  // and bf16 / bf16x2 with --deterministic (its matmuls are the F32 GEMV kernels, exact's).
  std::optional<std::string> matmul_precision;
  // --kv-cache f32|bf16: the KV cache's dtype (Ops::set_kv_cache_bf16). Absent: f32 (the activation
  // dtype) — keys and values as computed. bf16 halves the bytes decode attention reads, as other
  // engines keep K/V at 16 bits, at a cost in accuracy (docs/cuda.md, "BF16 KV cache").
  std::optional<std::string> kv_cache;
  bool kv_bf16() const { return kv_cache && *kv_cache == "bf16"; }
};

// The --deterministic option's help line (commands append what it does for them).
inline constexpr const char* kDeterministicHelp =
    "batch-invariant results: a sequence's logits are bit-identical whatever else is batched with it "
    "(cuda: every matmul on the F32 GEMV kernels and split-KV attention cut by each row's own context, which "
    "slows prefill and large batches; cpu: always so, no change)";

// The --matmul-precision option's help line.
inline constexpr const char* kMatmulPrecisionHelp =
    "cuda: the precision of prefill matmuls (steps of more than 8 rows, BF16 MoE experts included) and prefill "
    "attention. bf16x3: the F32 activations split into three BF16 terms for the tensor cores (as exact as F32, "
    "~1e-5 relative); bf16x2: two (~1e-4); bf16: one (~1e-2; the prefill GEMMs ~2.9x faster than bf16x3; fails "
    "the tiny fixtures' 2e-2 parity); the tiled attention takes hi/lo BF16 products, single ones at bf16, and at "
    "bf16 the chunked DeltaNet (prep and scan) takes BF16 products too (~4e-3); exact: the F32 GEMV kernels for "
    "every matmul, the CUDA-core expert kernels and the F32 split-KV attention (slow; for diagnosis). Decode "
    "matmuls are F32 GEMV at any setting, save that a GGUF's Q4_K/Q6_K/Q8_0 integer-dot GEMVs split x into two s8 "
    "terms at bf16 instead of three (2^-13 of a block's largest value, not 2^-20). Refused with --device cpu (F32, "
    "or F64, throughout), and with "
    "--deterministic unless bf16x3 or exact (its matmuls are exact's)";

// The --kv-cache option's help line.
inline constexpr const char* kKvCacheHelp =
    "the KV cache's dtype. f32: keys and values as computed (F64 with --precision f64); bf16: stored (and "
    "attended, the step's own too) rounded to BF16 — half the memory and half the bytes a decode step's "
    "attention reads, at a cost in accuracy (the tiny test fixtures move by 1e-3 to 1 of their logits' RMS)";
// The --kv-cache option's default as help shows it.
inline constexpr const char* kKvCacheDefault = "f32";

// A --kv-cache value: true for bf16, false for f32; anything else is refused naming the flag.
bool kv_cache_bf16(const std::string& value);

// --device (default cpu), --deterministic and --matmul-precision and, for commands that offer it,
// --precision. Error naming the flag for a bad value or a combination the backend cannot honour.
BackendOptions backend_options(const Args& args);

// The matmul precision a run with `options` computes with, for reports (bench, parity,
// quant-quality): on cuda the --matmul-precision name (bf16x3 unless given), "exact" in
// deterministic mode (every matmul on the F32 GEMV kernels); empty on cpu, whose matmuls take F32
// activations (F64 with --precision f64).
std::string matmul_precision_report(const BackendOptions& options);

// Error naming --device when the backend is unknown or not available in this build/machine.
std::unique_ptr<Ops> make_backend(const BackendOptions& options);

}  // namespace kestrel::cli
