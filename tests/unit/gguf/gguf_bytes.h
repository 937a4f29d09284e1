// Hand-assembled GGUF bytes for the reader tests: every field explicit, so a test can break
// exactly one of them.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "support/paths.h"

namespace kestrel::test {

class GgufBytes {
 public:
  GgufBytes& raw(std::string_view s) {
    s_.append(s);
    return *this;
  }
  GgufBytes& u8(uint8_t v) { return put(&v, 1); }
  GgufBytes& u32(uint32_t v) { return put(&v, 4); }
  GgufBytes& u64(uint64_t v) { return put(&v, 8); }
  GgufBytes& f32(float v) { return put(&v, 4); }
  GgufBytes& str(std::string_view v) { return u64(v.size()).raw(v); }
  GgufBytes& zeros(size_t n) {
    s_.append(n, '\0');
    return *this;
  }
  GgufBytes& pad(size_t align) {
    while (s_.size() % align) s_.push_back('\0');
    return *this;
  }

  GgufBytes& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    return raw("GGUF").u32(version).u64(n_tensors).u64(n_kv);
  }
  GgufBytes& kv_u32(std::string_view key, uint32_t v) { return str(key).u32(4).u32(v); }
  GgufBytes& kv_str(std::string_view key, std::string_view v) { return str(key).u32(8).str(v); }
  // ne: file order (innermost first).
  GgufBytes& tensor(std::string_view name, const std::vector<uint64_t>& ne, uint32_t type, uint64_t offset) {
    str(name).u32(uint32_t(ne.size()));
    for (uint64_t d : ne) u64(d);
    return u32(type).u64(offset);
  }

  const std::string& bytes() const { return s_; }
  size_t size() const { return s_.size(); }

  // Writes the bytes (or their first `n`) to a scratch file and returns its path.
  std::string save(const std::string& name, size_t n = std::string::npos) const {
    const std::string path = work_path(name);
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(s_.data(), std::streamsize(std::min(n, s_.size())));
    return path;
  }

 private:
  GgufBytes& put(const void* p, size_t n) {
    s_.append(static_cast<const char*>(p), n);
    return *this;
  }
  std::string s_;
};

// A small valid file: 2 metadata keys, a Q8_0 [2, 32] tensor and an F32 [4] tensor.
inline GgufBytes valid_gguf() {
  GgufBytes b;
  b.header(2, 2).kv_str("general.architecture", "test").kv_u32("general.alignment", 32);
  b.tensor("a", {32, 2}, 8, 0).tensor("b", {4}, 0, 96);
  b.pad(32);
  for (int i = 0; i < 68; ++i) b.u8(uint8_t(i));
  b.zeros(96 - 68);
  for (int i = 0; i < 4; ++i) b.f32(float(i));
  return b;
}

}  // namespace kestrel::test
