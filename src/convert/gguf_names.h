// The correspondence between a Hugging Face checkpoint and llama.cpp's GGUF layout for the
// families kestrel converts, shared by `kestrel convert` (HF -> GGUF) and the GGUF loader
// (GGUF -> the checkpoint names and layout the architectures ask for).
//
// A GGUF tensor is described by where its rows come from: runs of consecutive rows of
// checkpoint tensors (a plain weight is one run; stacked experts one run per expert; a split of
// a fused projection or a reordering of heads several runs), optionally a permutation of the
// columns and an element-wise transform. Every tensor is seen as rows of its innermost
// dimension (a conv1d weight [C, 1, K] is C rows of K; a 1-D tensor is one row). The loader
// inverts the runs and the permutation exactly; the transforms are not inverted (see
// GgufTransform).
//
// Families (llama.cpp architecture names): qwen3, qwen3moe, qwen3next, qwen35, qwen35moe,
// gemma4. What each does is documented in docs/gguf.md.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/config.h"

namespace kestrel {

enum class GgufTransform : uint8_t {
  kNone,
  // x + 1 (llama.cpp folds the (1 + w) of zero-centred RMSNorms into the stored weight). The
  // loader keeps the folded value and loads the config with zero_centered_norm = false.
  kAddOne,
  // -exp(x) (A_log -> ssm_a). The loader exposes the value under the checkpoint source's
  // `loaded_as` name, which the architecture reads as A itself.
  kNegExp,
};

struct GgufSource {
  std::string name;             // full checkpoint name, with the weight prefix
  std::vector<int64_t> shape;   // checkpoint shape
  std::string loaded_as;        // GGUF loading: the name to expose it under ("" = name)
  int64_t rows() const;         // numel / shape.back()
};

struct GgufRowRun {
  int src = 0;        // index into GgufLayout::sources
  int64_t first = 0;  // first source row
  int64_t count = 0;
};

struct GgufTensorPlan {
  std::string name;                 // "blk.3.attn_qkv.weight"
  std::vector<int64_t> shape;       // row-major, outermost first
  std::vector<GgufRowRun> rows;     // its rows in order (rows of shape.back() values)
  std::vector<int64_t> col_perm;    // empty, or: column j = source column col_perm[j]
  GgufTransform fn = GgufTransform::kNone;
  bool keep_f32 = false;            // stored F32 whatever the file type (as llama.cpp does)
  std::vector<float> generated;     // not from the checkpoint: these values (llama.cpp's rope_freqs)
  int64_t n_rows() const;           // numel / shape.back()
};

struct GgufLayout {
  std::string arch;                 // llama.cpp architecture
  std::vector<GgufSource> sources;
  std::vector<GgufTensorPlan> tensors;
};

// llama.cpp's architecture name for a config; refuses (unsupported) families and variants that
// have no llama.cpp equivalent, by name.
std::string gguf_arch_name(const ModelConfig& cfg);

// Refuses (unsupported), by name, configs whose GGUF llama.cpp could not describe or load: a
// layer pattern full_attention_interval cannot express, dense layers in qwen3next / qwen35moe,
// MoE without a shared expert there, different key and value head sizes in the DeltaNet, Gemma 4
// layers of one type with different head sizes or RoPE. The converter calls it; the loader reads
// whatever llama.cpp's metadata describes.
void check_gguf_convertible(const ModelConfig& cfg);

// Every tensor of the model (llama.cpp finds tensors by name; the order is kestrel's).
// `present(gguf_name, hf_name)` answers for the tensors a model may or may not have (Gemma 4's
// layer_scalar; Qwen3-Next's legacy fused ssm_in): the converter asks the checkpoint, the loader
// the GGUF file.
GgufLayout gguf_layout(const ModelConfig& cfg,
                       const std::function<bool(const std::string& gguf, const std::string& hf)>& present);

// Tensors llama.cpp stores in F32 whatever the file type: 1-D tensors, norms, biases and scales,
// the MoE routers and the conv1d kernels.
bool gguf_keeps_f32(const std::string& gguf_name, size_t n_dims);

// Rotary dimension -> a partial_rotary_factor the config parsers turn back into exactly `rot`
// (both for int(head_dim * p) and 2 * int(p * head_dim / 2)).
double partial_rotary_for(int rot, int head_dim);

}  // namespace kestrel
