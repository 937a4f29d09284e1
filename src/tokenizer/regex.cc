#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <atomic>
#include <memory>

#include "core/error.h"

namespace kestrel::tok {
namespace {

std::atomic<uint64_t> next_id{1};

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof buffer);
  return reinterpret_cast<const char*>(buffer);
}

// Per-thread matching state: a JIT stack (heap, grows to 8 MiB), a match context with limits,
// and match data sized for the most recently used pattern.
struct ThreadState {
  pcre2_jit_stack* stack = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_match_data* data = nullptr;
  uint64_t data_owner = 0;

  ThreadState() {
    stack = pcre2_jit_stack_create(64 * 1024, 8 * 1024 * 1024, nullptr);
    context = pcre2_match_context_create(nullptr);
    KCHECK(stack != nullptr && context != nullptr);
    pcre2_jit_stack_assign(context, nullptr, stack);
    pcre2_set_match_limit(context, 100'000'000);
    pcre2_set_depth_limit(context, 1'000'000);
    pcre2_set_heap_limit(context, 256 * 1024);  // KiB, for the interpreter's backtracking frames
  }
  ~ThreadState() {
    if (data) pcre2_match_data_free(data);
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
  }
  pcre2_match_data* data_for(uint64_t owner, const pcre2_code* code) {
    if (data_owner != owner) {
      if (data) pcre2_match_data_free(data);
      data = pcre2_match_data_create_from_pattern(code, nullptr);
      KCHECK(data != nullptr);
      data_owner = owner;
    }
    return data;
  }
};

ThreadState& thread_state() {
  thread_local ThreadState state;
  return state;
}

}  // namespace

Regex::Regex(const std::string& pattern, const std::string& what) : pattern_(pattern), id_(next_id++) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (code == nullptr) {
    bad_input(what, ": regex '", pattern, "' does not compile: ", pcre2_message(error), " at offset ",
              offset);
  }
  code_ = code;
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() {
  if (code_) pcre2_code_free(static_cast<pcre2_code*>(code_));
}

Regex::Regex(Regex&& other) noexcept
    : pattern_(std::move(other.pattern_)), code_(other.code_), jit_(other.jit_), id_(other.id_) {
  other.code_ = nullptr;
}

void Regex::find_all(std::string_view text, uint32_t base, std::vector<Span>& out) const {
  auto* code = static_cast<const pcre2_code*>(code_);
  ThreadState& state = thread_state();
  pcre2_match_data* data = state.data_for(id_, code);
  auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  PCRE2_SIZE length = text.size(), start = 0;
  while (start < length) {
    int rc = jit_ ? pcre2_jit_match(code, subject, length, start, 0, data, state.context)
                  : pcre2_match(code, subject, length, start, PCRE2_NO_UTF_CHECK, data, state.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      fail(ErrorKind::kUnsupported, "pre_tokenizer regex '", pattern_, "' failed on an input of ",
           length, " bytes at byte offset ", start, ": ", pcre2_message(rc),
           " (split the text into smaller pieces)");
    }
    PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data);
    PCRE2_SIZE b = ovector[0], e = ovector[1];
    if (e > b) {
      out.push_back({static_cast<uint32_t>(base + b), static_cast<uint32_t>(base + e)});
      start = e;
    } else {
      // An empty match: step over one code point and search again.
      start = b + 1;
      while (start < length && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) ++start;
    }
  }
}

}  // namespace kestrel::tok
