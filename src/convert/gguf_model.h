// Loading a GGUF file written by `kestrel convert` (or llama.cpp's converter, for the same
// families) as a model: the architecture metadata becomes the ModelConfig the Qwen parser
// validates, and the llama.cpp tensor names map back to the checkpoint names the architecture
// asks for. Tensors are used in place from the mapping in their stored dtype — BF16/F16/F32 or
// a block format (Q8_0, Q4_K, ...), which WeightLoader keeps quantized for backends with kernels
// for it and widens to F32 otherwise. Only checkpoint tensors reassembled from GGUF tensors of
// different dtypes, or through a column permutation of a block format, are widened here.
#pragma once

#include <memory>
#include <string>

#include "io/gguf.h"
#include "io/safetensors.h"
#include "model/config.h"

namespace kestrel {

ModelConfig gguf_model_config(const GgufFile& f);

// The tensors under their Hugging Face names, ready for WeightLoader.
Checkpoint gguf_checkpoint(std::shared_ptr<const GgufFile> f, const ModelConfig& cfg);

}  // namespace kestrel
