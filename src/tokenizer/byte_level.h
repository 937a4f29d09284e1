// The GPT-2 byte-level alphabet: each of the 256 byte values is shown as one printable code
// point (printable Latin-1 bytes as themselves, the rest as U+0100 + n in byte order), so that
// byte strings can live in a JSON vocabulary.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kestrel::tok {

// Code point standing for byte b.
char32_t byte_level_char(uint8_t b);

// The byte a code point stands for, or nullopt when it is not in the alphabet.
std::optional<uint8_t> byte_level_byte(char32_t cp);

// Maps every code point of `token` (valid UTF-8) back to its byte; nullopt when one is not in the
// alphabet.
std::optional<std::string> byte_level_decode(std::string_view token);

// Maps each byte of `bytes` to its alphabet code point, as UTF-8.
std::string byte_level_encode(std::string_view bytes);

}  // namespace kestrel::tok
