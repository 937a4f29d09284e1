// WeightLoader: fetches a checkpoint's tensors by name for an architecture's build step,
// checks each one's presence, dtype and shape, and normalizes it into the engine's layout on
// the model's backend. On the CPU backend matrices are used in place from the memory map;
// other backends get uploaded copies.
//
// Two kinds of reads, said at every call site:
//   op_weight / op_weight_stack / op_weight_rows: matrices handed only to the ops that take
//     weights (matmul, matmul_multi, moe_experts, embed, embed_rows). They keep their stored
//     dtype — a block format (GGUF Q8_0, Q4_K, ...) stays quantized — where the backend's
//     Ops::supports_weight_dtype() admits it; otherwise a block format is widened to F32 at load
//     (ggml's dequantize_row, so the values are the same either way).
//   matmul_weight / matmul_weight_rows: the same, for matrices only matmul and matmul_multi read
//     (projections, never embeddings or experts): handed to Ops::upload_matrix, which may keep
//     them in a layout of the backend's own.
//   f32 / scalar: tensors read element by element (norms, conv kernels, scales): always F32 (or
//     a float) whatever they are stored as.
#pragma once

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "ops/ops.h"

namespace kestrel {

class WeightLoader {
 public:
  // `prefix` is prepended to every name ("model.language_model.").
  WeightLoader(const Checkpoint& ckpt, Ops& ops, std::string prefix);

  const std::string& prefix() const { return prefix_; }
  Ops& ops() const { return ops_; }
  bool has(const std::string& name) const;             // with the prefix
  bool has_raw(const std::string& full_name) const;   // without

  // A weight matrix [rows, cols] for the weight-taking ops: its stored dtype, or F32 where the
  // backend cannot take that block format. `raw` = name without the prefix.
  Tensor op_weight(const std::string& name, int64_t rows, int64_t cols, bool raw = false);
  // A one-element float tensor's value, on the host (a per-layer scalar such as Gemma's layer_scalar).
  float scalar(const std::string& name);
  // An I64 tensor of n elements, on the host (buffers a checkpoint stores, to check against config).
  std::vector<int64_t> i64(const std::string& name, int64_t n);
  // A stack of n weight matrices stored as one [n, rows, cols] tensor (fused experts), seen as
  // [n * rows, cols]: matrix i is rows [i * rows, (i + 1) * rows). Dtype as op_weight.
  Tensor op_weight_stack(const std::string& name, int64_t n, int64_t rows, int64_t cols);
  // Any float tensor with exactly `shape`, converted to F32 on the host, passed through `fn`
  // (element-wise transform, may be empty), uploaded as [1, numel] (or [shape[0], rest]).
  Tensor f32(const std::string& name, const std::vector<int64_t>& shape,
             const std::function<float(float)>& fn = {}, bool as_matrix = false);
  // Rows of a stored weight matrix gathered into a new one (split fused projections): out row
  // i = src row rows[i]. Dtype as op_weight (whole rows of blocks are copied as they are).
  Tensor op_weight_rows(const std::string& name, int64_t src_rows, int64_t cols, const std::vector<int64_t>& rows);
  // op_weight and op_weight_rows for a matrix only matmul and matmul_multi will read.
  Tensor matmul_weight(const std::string& name, int64_t rows, int64_t cols, bool raw = false);
  Tensor matmul_weight_rows(const std::string& name, int64_t src_rows, int64_t cols, const std::vector<int64_t>& rows);
  // An output head of its own (not the tied embedding), `raw`: a matmul_weight, since only matmul
  // reads it (on the CUDA backend a Q4_K / Q8_0 / Q6_K head takes the integer-dot GEMV's layout:
  // on an H100 the 9B Q4_K_M's Q6_K head gave batch 1 / 8 / 64 354.13 / 1327.39 / 2726.76 t/s
  // against 348.83 / 1180.81 / 2683.21 row-major, the Q8_0 GGUF's batch 1 263.81 against 242.03,
  // bench/results/head-and-rows-gemv-ab-h100-2026-12-07.txt), or with KESTREL_HEAD_MATMUL_LAYOUT=0
  // an op_weight in the stored layout, to compare in one build.
  Tensor head_weight(const std::string& name, int64_t rows, int64_t cols);

  // Keeps a buffer alive for the model's lifetime and returns its view.
  Tensor keep(Buffer buffer);
  std::vector<Buffer> take_buffers() { return std::move(owned_); }
  uint64_t loaded_params() const { return n_params_; }
  // Bytes of the weights as loaded: a matrix kept in a block format counts its quantized size,
  // one widened for the backend its F32 size; f32()/scalar() tensors count their stored size.
  uint64_t loaded_bytes() const { return n_bytes_; }

 private:
  // Checks presence, dtype (a float or a block format kestrel can dequantize) and shape; counts
  // the tensor's parameters and bytes once (see loaded_bytes).
  const TensorInfo& lookup(const std::string& full, const std::vector<int64_t>& shape, bool op_weight);
  // The dtype an op weight of this stored dtype is loaded in.
  DType op_weight_dtype(DType stored) const;
  // A host view and, where the view is not the mapping itself, the buffer holding it.
  struct HostTensor {
    Tensor view;
    Buffer owned;
  };
  // The tensor as a host view [rows, cols] the kernels may read (a copy where the mapping is
  // misaligned), or widened to F32 when `widen`.
  HostTensor host_view(const TensorInfo& info, int64_t rows, int64_t cols, bool widen);
  // A host matrix on the model's backend: the view itself on the CPU (its buffer kept), else an
  // uploaded copy (matmul_only: Ops::upload_matrix's). Never a block format the backend cannot take.
  Tensor on_backend(HostTensor host, bool matmul_only = false);
  Tensor weight(const std::string& name, int64_t rows, int64_t cols, bool raw, bool matmul_only);
  Tensor gathered_rows(const std::string& name, int64_t src_rows, int64_t cols, const std::vector<int64_t>& rows,
                       bool matmul_only);

  const Checkpoint& ckpt_;
  Ops& ops_;
  std::string prefix_;
  std::vector<Buffer> owned_;
  std::set<std::string> used_;
  uint64_t n_params_ = 0, n_bytes_ = 0;
};

}  // namespace kestrel
