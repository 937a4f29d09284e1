// A Hugging Face tokenizer (tokenizer.json + tokenizer_config.json / chat_template.jinja) as
// llama.cpp's tokenizer.ggml.* metadata, so a converted GGUF carries its own tokenizer.
//
// Byte-level BPE (every Qwen-line tokenizer): tokenizer.ggml.model "gpt2", the token list in id
// order padded to the model's vocab_size with "[PAD<id>]" (as llama.cpp's converter does), token
// types (1 normal, 3 control for special added tokens, 4 user-defined for other added tokens and
// padding), merges as "left right" strings, and the chat template when there is one.
//
// Gemma's SentencePiece-style BPE (spaces as U+2581, byte fallback): tokenizer.ggml.model
// "gemma4" and no tokenizer.ggml.pre, as llama.cpp's Gemma 4 converter writes it. Types: 6 byte
// for <0xNN>, 3 control for special added tokens except Gemma 4's seven chat markers llama.cpp
// renders as text (4 user-defined), 4 user-defined for the other added tokens (llama.cpp's
// converter types those normal, which loses that Hugging Face cuts them out of the text before
// BPE; user-defined keeps it, and llama.cpp matches user-defined tokens in text the same way),
// 5 unused "[PAD<id>]" past the tokenizer; scores -1000; bos/eos/unk/sep/pad/cls/mask ids from
// tokenizer_config.json (config.json as fallback); add_bos_token from the post-processor;
// add_space_prefix false. docs/gguf.md has the details.
#pragma once

#include <cstdint>
#include <string>

namespace kestrel {

class GgufWriter;

// Returns false (and writes nothing) when the directory has no tokenizer.json. `pre` is the
// llama.cpp pre-tokenizer name ("qwen2" for the Qwen line). Errors name the file and field.
bool add_tokenizer_metadata(GgufWriter& w, const std::string& dir, int64_t vocab_size, const std::string& pre);

// Gemma's tokenizer.json as tokenizer.ggml.model "gemma4" (false when there is none). Tokenizers
// of another shape (normalizer, pre-tokenizer, decoder, post-processor, added-token flags) are
// refused by name rather than written as something that tokenizes differently.
bool add_gemma4_tokenizer_metadata(GgufWriter& w, const std::string& dir, int64_t vocab_size);

}  // namespace kestrel
