// Python's str operations on UTF-8 text, as the template builtins need them.
// Case mapping (upper/lower/title/capitalize) covers ASCII letters only; other characters pass
// through unchanged.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kestrel::chat {

class Budget;

bool is_py_space(char32_t cp);
// str.strip([chars]) / lstrip / rstrip; `chars` absent means Unicode whitespace.
std::string py_strip(const std::string& s, const std::optional<std::string>& chars, bool left, bool right);
// str.split(sep=None, maxsplit=-1) and str.rsplit.
std::vector<std::string> py_split(const std::string& s, const std::optional<std::string>& sep, int64_t maxsplit,
                                  bool from_right);
std::vector<std::string> py_splitlines(const std::string& s);
std::string py_replace(const std::string& s, const std::string& old_s, const std::string& new_s, int64_t count,
                       Budget& budget);
std::string ascii_upper(std::string s);
std::string ascii_lower(std::string s);
std::string py_title(const std::string& s);
std::string py_capitalize(const std::string& s);
// isdigit / isalpha / isalnum / isspace / isupper / islower (ASCII classes, whitespace in full).
bool py_is(const std::string& s, const std::string& what);

}  // namespace kestrel::chat
