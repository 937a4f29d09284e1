// UTF-8 helpers for the tokenizer: validation with the offending offset, decoding one code
// point, encoding, and the lossy conversion (one U+FFFD per maximal invalid subpart) that
// Hugging Face's decoders apply to byte output.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kestrel::tok {

// Byte offset of the first invalid UTF-8 sequence, or npos when `text` is valid.
size_t find_invalid_utf8(std::string_view text);

// Throws Error(kBadInput) "<what> is not valid UTF-8: byte 0x.. at offset N ..." when invalid.
void require_utf8(std::string_view text, std::string_view what);

// Length in bytes of the (valid) UTF-8 sequence starting with lead byte `b`.
inline int utf8_length(unsigned char b) { return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4; }

// Decodes the code point at text[i] (text must be valid UTF-8); advances i.
inline char32_t next_code_point(std::string_view text, size_t& i) {
  auto b = static_cast<unsigned char>(text[i]);
  if (b < 0x80) { i += 1; return b; }
  int n = utf8_length(b);
  char32_t cp = b & (n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
  for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
  i += n;
  return cp;
}

void append_utf8(std::string& out, char32_t cp);

// Length of the longest prefix of bytes that is complete: valid sequences and invalid bytes, but
// not a trailing valid-so-far prefix of a multi-byte sequence (at most 3 bytes are held back).
size_t complete_utf8_prefix(std::string_view bytes);

// Appends `bytes` to out, replacing each maximal invalid subpart with U+FFFD (like Rust's
// String::from_utf8_lossy, which the Hugging Face ByteLevel decoder uses).
void append_utf8_lossy(std::string& out, std::string_view bytes);

}  // namespace kestrel::tok
