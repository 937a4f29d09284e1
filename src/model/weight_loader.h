// WeightLoader: fetches a checkpoint's tensors by name for an architecture's build step,
// checks each one's presence, dtype and shape, and normalizes it into the engine's layout on
// the model's backend. On the CPU backend BF16/F16/F32 matrices are used in place from the
// memory map; other backends get uploaded copies.
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

  // A matrix [rows, cols] in its stored float dtype. `raw` = name without the prefix.
  Tensor matrix(const std::string& name, int64_t rows, int64_t cols, bool raw = false);
  // A one-element float tensor's value, on the host (a per-layer scalar such as Gemma's layer_scalar).
  float scalar(const std::string& name);
  // An I64 tensor of n elements, on the host (buffers a checkpoint stores, to check against config).
  std::vector<int64_t> i64(const std::string& name, int64_t n);
  // A stack of n matrices stored as one [n, rows, cols] tensor (fused experts), seen as
  // [n * rows, cols]: matrix i is rows [i * rows, (i + 1) * rows).
  Tensor stacked(const std::string& name, int64_t n, int64_t rows, int64_t cols);
  // Any float tensor with exactly `shape`, converted to F32 on the host, passed through `fn`
  // (element-wise transform, may be empty), uploaded as [1, numel] (or [shape[0], rest]).
  Tensor f32(const std::string& name, const std::vector<int64_t>& shape,
             const std::function<float(float)>& fn = {}, bool as_matrix = false);
  // Rows of a stored matrix gathered into a new matrix of the same dtype: out row i = src row rows[i].
  Tensor gather_rows(const std::string& name, int64_t src_rows, int64_t cols, const std::vector<int64_t>& rows);

  // Keeps a buffer alive for the model's lifetime and returns its view.
  Tensor keep(Buffer buffer);
  std::vector<Buffer> take_buffers() { return std::move(owned_); }
  uint64_t loaded_params() const { return n_params_; }
  uint64_t loaded_bytes() const { return n_bytes_; }

 private:
  const TensorInfo& lookup(const std::string& full, const std::vector<int64_t>& shape);
  Tensor host_view(const TensorInfo& info, int64_t rows, int64_t cols);

  const Checkpoint& ckpt_;
  Ops& ops_;
  std::string prefix_;
  std::vector<Buffer> owned_;
  std::set<std::string> used_;
  uint64_t n_params_ = 0, n_bytes_ = 0;
};

}  // namespace kestrel
