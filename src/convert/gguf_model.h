// Loading a GGUF file written by `kestrel convert` (or llama.cpp's converter, for the same
// families) as a model: the architecture metadata becomes the ModelConfig the Qwen parser
// validates, and the llama.cpp tensor names map back to the checkpoint names the architecture
// asks for. BF16/F16/F32 tensors are used in place from the mapping; block-format tensors
// (Q8_0, Q4_K, ...) are dequantized to F32 at load, since the backends have no quantized
// matmul yet — so a quantized GGUF runs at F32 speed and memory, with the quantized values.
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
