// A compiled PCRE2 pattern (UTF + UCP, JIT when available) for the Split pre-tokenizer.
//
// The pattern is compiled exactly as tokenizer.json writes it. Matching uses a per-thread JIT
// stack and match data, so one Regex is shared by all encoding threads. Bounded: a JIT stack of
// at most 8 MiB on the heap and interpreter match/depth limits, so long inputs cannot overflow the
// thread's stack; hitting a limit is an Error naming the input size, never a crash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kestrel::tok {

struct Span {
  uint32_t begin;  // byte offset
  uint32_t end;    // one past the last byte
};

class Regex {
 public:
  // Throws Error(kBadInput) naming `what` and PCRE2's message (with its offset) when the
  // pattern does not compile.
  Regex(const std::string& pattern, const std::string& what);
  ~Regex();
  Regex(Regex&& other) noexcept;
  Regex& operator=(Regex&&) = delete;
  Regex(const Regex&) = delete;

  // Appends the non-empty matches in text[0, size) (valid UTF-8), left to right, offsets shifted
  // by `base`.
  void find_all(std::string_view text, uint32_t base, std::vector<Span>& out) const;

  const std::string& pattern() const { return pattern_; }
  bool jit() const { return jit_; }

 private:
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
  bool jit_ = false;
  uint64_t id_;           // distinguishes this Regex in the per-thread match data cache
};

}  // namespace kestrel::tok
