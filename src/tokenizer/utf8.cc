#include "tokenizer/utf8.h"

#include <cstdio>

#include "core/error.h"

namespace kestrel::tok {
namespace {

struct Sequence {
  int length;      // bytes consumed: the whole sequence, or the maximal invalid subpart
  bool valid;
  bool truncated;  // a valid prefix cut off by the end of the input
};

// Well-formed sequences per Unicode Table 3-7.
Sequence scan(std::string_view s, size_t i) {
  auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) return {1, true, false};
  if (b < 0xC2 || b > 0xF4) return {1, false, false};
  int n = utf8_length(b);
  unsigned char lo = 0x80, hi = 0xBF;
  if (b == 0xE0) lo = 0xA0;
  if (b == 0xED) hi = 0x9F;
  if (b == 0xF0) lo = 0x90;
  if (b == 0xF4) hi = 0x8F;
  for (int k = 1; k < n; ++k) {
    if (i + k >= s.size()) return {k, false, true};
    auto c = static_cast<unsigned char>(s[i + k]);
    if (c < lo || c > hi) return {k, false, false};
    lo = 0x80, hi = 0xBF;
  }
  return {n, true, false};
}

}  // namespace

size_t find_invalid_utf8(std::string_view text) {
  size_t i = 0, n = text.size();
  while (i < n) {
    // Fast path: 8 ASCII bytes at a time.
    while (i + 8 <= n) {
      uint64_t w;
      __builtin_memcpy(&w, text.data() + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    if (static_cast<unsigned char>(text[i]) < 0x80) { ++i; continue; }
    Sequence seq = scan(text, i);
    if (!seq.valid) return i;
    i += seq.length;
  }
  return std::string_view::npos;
}

void require_utf8(std::string_view text, std::string_view what) {
  size_t at = find_invalid_utf8(text);
  if (at == std::string_view::npos) return;
  char hex[8];
  std::snprintf(hex, sizeof hex, "0x%02X", static_cast<unsigned char>(text[at]));
  bad_input(what, " is not valid UTF-8: byte ", hex, " at byte offset ", at,
            " does not start a well-formed sequence");
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

size_t complete_utf8_prefix(std::string_view bytes) {
  size_t i = 0;
  while (i < bytes.size()) {
    Sequence seq = scan(bytes, i);
    if (seq.truncated) return i;
    i += seq.length;
  }
  return i;
}

void append_utf8_lossy(std::string& out, std::string_view bytes) {
  size_t i = 0, start = 0;
  while (i < bytes.size()) {
    if (static_cast<unsigned char>(bytes[i]) < 0x80) { ++i; continue; }
    Sequence seq = scan(bytes, i);
    if (seq.valid) { i += seq.length; continue; }
    out.append(bytes.data() + start, i - start);
    out += "\xEF\xBF\xBD";
    i += seq.length;
    start = i;
  }
  out.append(bytes.data() + start, i - start);
}

}  // namespace kestrel::tok
