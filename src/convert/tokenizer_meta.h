// A Hugging Face tokenizer (tokenizer.json + tokenizer_config.json / chat_template.jinja) as
// llama.cpp's tokenizer.ggml.* metadata, so a converted GGUF carries its own tokenizer.
//
// Byte-level BPE only (every Qwen-line tokenizer): tokenizer.ggml.model "gpt2", the token list
// in id order padded to the model's vocab_size with "[PAD<id>]" (as llama.cpp's converter does),
// token types (1 normal, 3 control for special added tokens, 4 user-defined for other added
// tokens and padding), merges as "left right" strings, and the chat template when there is one.
#pragma once

#include <cstdint>
#include <string>

namespace kestrel {

class GgufWriter;

// Returns false (and writes nothing) when the directory has no tokenizer.json. `pre` is the
// llama.cpp pre-tokenizer name ("qwen2" for the Qwen line). Errors name the file and field.
bool add_tokenizer_metadata(GgufWriter& w, const std::string& dir, int64_t vocab_size, const std::string& pre);

}  // namespace kestrel
