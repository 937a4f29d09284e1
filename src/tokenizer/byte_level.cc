#include "tokenizer/byte_level.h"

#include "tokenizer/utf8.h"

namespace kestrel::tok {
namespace {

bool printable(int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

struct Tables {
  std::array<char32_t, 256> to_char{};
  std::array<int16_t, 0x200> to_byte{};  // code points used are all below U+0200
  Tables() {
    to_byte.fill(-1);
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      to_char[b] = printable(b) ? static_cast<char32_t>(b) : static_cast<char32_t>(0x100 + next++);
      to_byte[to_char[b]] = static_cast<int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

char32_t byte_level_char(uint8_t b) { return tables().to_char[b]; }

std::optional<uint8_t> byte_level_byte(char32_t cp) {
  if (cp >= 0x200 || tables().to_byte[cp] < 0) return std::nullopt;
  return static_cast<uint8_t>(tables().to_byte[cp]);
}

std::optional<std::string> byte_level_decode(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  for (size_t i = 0; i < token.size();) {
    auto b = byte_level_byte(next_code_point(token, i));
    if (!b) return std::nullopt;
    out += static_cast<char>(*b);
  }
  return out;
}

std::string byte_level_encode(std::string_view bytes) {
  std::string out;
  for (unsigned char b : bytes) append_utf8(out, byte_level_char(b));
  return out;
}

}  // namespace kestrel::tok
