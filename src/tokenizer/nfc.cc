// NFC in three steps over short "chunks": a safe starter plus the run of relevant code points
// after it (nfc_data.h). Text between chunks is copied unchanged. Each chunk is decomposed
// (canonical, recursive, Hangul algorithmically), put in canonical order, then recomposed.
#include "tokenizer/nfc.h"

#include <algorithm>
#include <vector>

#include "tokenizer/nfc_data.h"
#include "tokenizer/utf8.h"

namespace kestrel::tok {
namespace {

constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr int kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
              kSCount = kLCount * kNCount;

bool relevant(char32_t cp) {
  if (cp < 0x300) return false;
  int lo = 0, hi = nfc::kNumRelevant - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    if (cp < nfc::kRelevant[mid].first) hi = mid - 1;
    else if (cp > nfc::kRelevant[mid].last) lo = mid + 1;
    else return true;
  }
  return false;
}

int combining_class(char32_t cp) {
  if (cp < 0x300) return 0;
  auto* end = nfc::kCombiningClasses + nfc::kNumCombiningClasses;
  auto* it = std::lower_bound(nfc::kCombiningClasses, end, cp,
                              [](const nfc::CombiningClass& e, char32_t c) { return e.cp < c; });
  return it != end && it->cp == cp ? it->ccc : 0;
}

void decompose(char32_t cp, std::vector<char32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    int s = static_cast<int>(cp - kSBase);
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  auto* end = nfc::kDecompositions + nfc::kNumDecompositions;
  auto* it = std::lower_bound(nfc::kDecompositions, end, cp,
                              [](const nfc::Decomposition& e, char32_t c) { return e.cp < c; });
  if (it != end && it->cp == cp) {
    out.insert(out.end(), nfc::kDecompositionData + it->offset,
               nfc::kDecompositionData + it->offset + it->length);
  } else {
    out.push_back(cp);
  }
}

char32_t compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  auto* end = nfc::kCompositions + nfc::kNumCompositions;
  auto* it = std::lower_bound(nfc::kCompositions, end, std::pair{a, b},
                              [](const nfc::Composition& e, std::pair<char32_t, char32_t> k) {
                                return e.first != k.first ? e.first < k.first : e.second < k.second;
                              });
  return it != end && it->first == a && it->second == b ? it->composite : 0;
}

void normalize_chunk(std::string_view chunk, std::string& out) {
  thread_local std::vector<char32_t> cps;   // [decomposed code points]
  thread_local std::vector<int> classes;    // [combining class of each]
  cps.clear();
  for (size_t i = 0; i < chunk.size();) decompose(next_code_point(chunk, i), cps);
  classes.resize(cps.size());
  for (size_t i = 0; i < cps.size(); ++i) classes[i] = combining_class(cps[i]);
  // Canonical ordering: stable insertion sort of each run of non-starters by class.
  for (size_t i = 1; i < cps.size(); ++i) {
    for (size_t j = i; j > 0 && classes[j] != 0 && classes[j - 1] > classes[j]; --j) {
      std::swap(cps[j], cps[j - 1]);
      std::swap(classes[j], classes[j - 1]);
    }
  }
  // Canonical composition.
  size_t n_out = 0;
  ptrdiff_t starter = -1;
  int last_class = 0;
  for (size_t i = 0; i < cps.size(); ++i) {
    char32_t c = cps[i];
    int cc = classes[i];
    if (starter >= 0) {
      bool adjacent = static_cast<ptrdiff_t>(n_out) - 1 == starter;
      if (adjacent || (last_class != 0 && last_class < cc)) {
        if (char32_t composite = compose(cps[starter], c)) {
          cps[starter] = composite;
          continue;
        }
      }
    }
    if (cc == 0) starter = static_cast<ptrdiff_t>(n_out);
    cps[n_out++] = c;
    last_class = cc;
  }
  for (size_t i = 0; i < n_out; ++i) append_utf8(out, cps[i]);
}

}  // namespace

bool nfc_quick_check(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    // Bytes below 0xCC start code points below U+0300, which NFC never changes.
    if (static_cast<unsigned char>(text[i]) < 0xCC) { ++i; continue; }
    if (relevant(next_code_point(text, i))) return false;
  }
  return true;
}

void append_nfc(std::string& out, std::string_view text) {
  size_t copied = 0;                     // text[0, copied) is already in out
  size_t last_safe = std::string_view::npos;  // byte offset of the previous (safe) code point
  size_t i = 0;
  while (i < text.size()) {
    size_t start = i;
    if (static_cast<unsigned char>(text[i]) < 0xCC) {
      last_safe = start;
      i += utf8_length(static_cast<unsigned char>(text[i]));
      continue;
    }
    if (!relevant(next_code_point(text, i))) { last_safe = start; continue; }
    size_t chunk_begin = last_safe != std::string_view::npos && last_safe >= copied ? last_safe : start;
    size_t end = i;
    while (end < text.size()) {
      size_t k = end;
      if (!relevant(next_code_point(text, k))) break;
      end = k;
    }
    out.append(text.data() + copied, chunk_begin - copied);
    normalize_chunk(text.substr(chunk_begin, end - chunk_begin), out);
    copied = end;
    i = end;
    last_safe = std::string_view::npos;
  }
  out.append(text.data() + copied, text.size() - copied);
}

}  // namespace kestrel::tok
