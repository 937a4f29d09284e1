#include "chat/text_util.h"

#include <algorithm>
#include <cctype>

#include "chat/builtins.h"
#include "chat/value.h"

namespace kestrel::chat {

bool is_py_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

std::string py_strip(const std::string& s, const std::optional<std::string>& chars, bool left, bool right) {
  std::vector<char32_t> cps = utf8_decode(s);
  std::vector<char32_t> set;
  if (chars) set = utf8_decode(*chars);
  auto strip_me = [&](char32_t c) {
    return chars ? std::find(set.begin(), set.end(), c) != set.end() : is_py_space(c);
  };
  size_t b = 0, e = cps.size();
  if (left) {
    while (b < e && strip_me(cps[b])) ++b;
  }
  if (right) {
    while (e > b && strip_me(cps[e - 1])) --e;
  }
  if (b == 0 && e == cps.size()) return s;
  return utf8_encode(cps, b, e);
}

std::vector<std::string> py_split(const std::string& s, const std::optional<std::string>& sep, int64_t maxsplit,
                                  bool from_right) {
  std::vector<std::string> out;
  if (sep) {
    if (!from_right) {
      size_t pos = 0;
      while (maxsplit < 0 || int64_t(out.size()) < maxsplit) {
        size_t hit = s.find(*sep, pos);
        if (hit == std::string::npos) break;
        out.push_back(s.substr(pos, hit - pos));
        pos = hit + sep->size();
      }
      out.push_back(s.substr(pos));
      return out;
    }
    size_t end = s.size();
    int64_t splits = 0;
    while (maxsplit < 0 || splits < maxsplit) {
      if (end < sep->size()) break;
      size_t hit = s.rfind(*sep, end - sep->size());
      if (hit == std::string::npos) break;
      out.push_back(s.substr(hit + sep->size(), end - hit - sep->size()));
      end = hit;
      ++splits;
    }
    out.push_back(s.substr(0, end));
    std::reverse(out.begin(), out.end());
    return out;
  }
  // Whitespace runs; no empty strings.
  std::vector<char32_t> cps = utf8_decode(s);
  std::vector<std::pair<size_t, size_t>> words;
  size_t i = 0;
  while (i < cps.size()) {
    while (i < cps.size() && is_py_space(cps[i])) ++i;
    if (i == cps.size()) break;
    size_t j = i;
    while (j < cps.size() && !is_py_space(cps[j])) ++j;
    words.emplace_back(i, j);
    i = j;
  }
  if (maxsplit >= 0 && int64_t(words.size()) > maxsplit + 1) {
    if (!from_right) {
      // The rest keeps its trailing whitespace, as in Python.
      size_t rest = words[size_t(maxsplit)].first;
      words.resize(size_t(maxsplit));
      words.emplace_back(rest, cps.size());
    } else {
      size_t keep_from = words.size() - size_t(maxsplit);
      size_t end = words[keep_from - 1].second;  // the rest keeps its leading whitespace
      std::vector<std::pair<size_t, size_t>> merged = {{0, end}};
      merged.insert(merged.end(), words.begin() + long(keep_from), words.end());
      words = merged;
    }
  }
  for (auto [b, e] : words) out.push_back(utf8_encode(cps, b, e));
  return out;
}

std::vector<std::string> py_splitlines(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '\n' || c == '\r') {
      out.push_back(cur);
      cur.clear();
      if (c == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

std::string py_replace(const std::string& s, const std::string& old_s, const std::string& new_s, int64_t count,
                       Budget& budget) {
  std::string out;
  if (old_s.empty()) {
    // Python inserts `new` between every character (and at both ends).
    std::vector<char32_t> cps = utf8_decode(s);
    int64_t done = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || done < count) {
        out += new_s;
        ++done;
      }
      if (i < cps.size()) utf8_append(out, cps[i]);
      budget.check_size(out.size());
    }
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t hit = s.find(old_s, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out += new_s;
    pos = hit + old_s.size();
    ++done;
    budget.check_size(out.size());
  }
  out.append(s, pos, std::string::npos);
  budget.charge(int64_t(out.size() / 16));
  return out;
}

std::string ascii_upper(std::string s) {
  for (auto& c : s) c = char(std::toupper((unsigned char)c));
  return s;
}

std::string ascii_lower(std::string s) {
  for (auto& c : s) c = char(std::tolower((unsigned char)c));
  return s;
}

std::string py_title(const std::string& s) {
  std::string out = s;
  bool prev_cased = false;
  for (auto& ch : out) {
    unsigned char c = ch;
    if (std::isalpha(c)) {
      ch = char(prev_cased ? std::tolower(c) : std::toupper(c));
      prev_cased = true;
    } else {
      prev_cased = c >= 0x80 ? prev_cased : false;
    }
  }
  return out;
}

std::string py_capitalize(const std::string& s) {
  std::string out = ascii_lower(s);
  if (!out.empty()) out[0] = char(std::toupper((unsigned char)out[0]));
  return out;
}

bool py_is(const std::string& s, const std::string& what) {
  if (s.empty()) return false;
  if (what == "isspace") {
    for (char32_t c : utf8_decode(s)) {
      if (!is_py_space(c)) return false;
    }
    return true;
  }
  bool any_cased = false;
  for (unsigned char c : s) {
    if (what == "isdigit" && !std::isdigit(c)) return false;
    if (what == "isalpha" && !std::isalpha(c)) return false;
    if (what == "isalnum" && !std::isalnum(c)) return false;
    if (what == "isupper" && std::islower(c)) return false;
    if (what == "islower" && std::isupper(c)) return false;
    any_cased = any_cased || std::isalpha(c);
  }
  return (what == "isupper" || what == "islower") ? any_cased : true;
}

}  // namespace kestrel::chat
