// A Hugging Face tokenizer.json (BPE: byte-level like Qwen, or SentencePiece-style with byte
// fallback like Gemma), loaded and run without Python.
//
//   auto tok = kestrel::tok::Tokenizer::load("models/qwen3");      // dir or tokenizer.json
//   std::vector<int32_t> ids = tok.encode("Hello", {.add_special_tokens = true});
//   std::string text = tok.decode(ids, {.skip_special_tokens = true});
//
// Encoding: added tokens are cut out of the raw text first, then each remaining piece is
// normalized, pre-tokenized and run through BPE; the post-processor adds BOS/EOS when asked.
// Everything a tokenizer.json holds that kestrel does not implement is refused by name at load.
// A Tokenizer is immutable after loading: encode/decode may run on many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kestrel {
class GgufFile;
}

namespace kestrel::tok {

struct EncodeOptions {
  bool add_special_tokens = false;  // the post-processor's tokens (BOS, ...), like HF's flag
};

struct DecodeOptions {
  bool skip_special_tokens = false;
};

// What one token contributes to decoded text.
struct TokenPiece {
  std::string_view bytes;  // after the decoders' per-token steps (ByteLevel, Replace, ByteFallback)
  bool raw_bytes;          // bytes may be partial UTF-8 (byte-level tokens, <0xNN> tokens)
  bool special;
};

class Tokenizer {
 public:
  // `path` is a tokenizer.json file or a directory holding one (tokenizer_config.json beside it
  // is read when present: bos/eos token names), or a GGUF file carrying tokenizer.ggml.* metadata.
  static Tokenizer load(const std::string& path);
  // From a GGUF file's tokenizer.ggml.* metadata ("gpt2" byte-level BPE or Gemma's "gemma4";
  // tokenizer_gguf.cc says what is read).
  static Tokenizer from_gguf(const GgufFile& file);
  // From the files' contents; `name` names the source in error messages.
  static Tokenizer from_json(std::string_view tokenizer_json, std::string_view config_json = {},
                             const std::string& name = "tokenizer.json");

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Text must be valid UTF-8 (else Error(kBadInput) naming the byte offset).
  std::vector<int32_t> encode(std::string_view text, EncodeOptions options = {}) const;
  void encode_into(std::string_view text, std::vector<int32_t>& out, EncodeOptions options = {}) const;

  // Ids must be below vocab_size() (else Error(kBadInput) naming the id).
  std::string decode(std::span<const int32_t> ids, DecodeOptions options = {}) const;

  int32_t vocab_size() const;  // model vocabulary plus added tokens
  std::optional<int32_t> token_to_id(std::string_view token) const;
  const std::string& id_to_token(int32_t id) const;  // as written in tokenizer.json
  TokenPiece piece(int32_t id) const;
  bool is_special(int32_t id) const;
  // Raw byte pieces decode like Rust's from_utf8_lossy (ByteLevel) rather than one U+FFFD per
  // byte of an invalid run (ByteFallback).
  bool lossy_bytes() const;

  std::optional<int32_t> bos_id() const;  // from tokenizer_config.json when present
  std::optional<int32_t> eos_id() const;

  struct Impl;

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Detokenizes one generated token at a time, emitting only complete UTF-8: bytes of a character
// split across tokens (byte-level tokens, or <0xE2><0x82><0xAC> byte-fallback tokens) are held
// until the character is complete. Concatenating push() results and finish() gives decode(ids)
// for any output whose bytes are valid UTF-8.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, DecodeOptions options = {});
  std::string push(int32_t id);
  std::string finish();  // held bytes that never completed become U+FFFD

 private:
  const Tokenizer* tokenizer_;
  DecodeOptions options_;
  std::string pending_;  // bytes of an incomplete character (at most 3)
};

}  // namespace kestrel::tok
