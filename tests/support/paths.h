// Where tests find their data and scratch space, and how they run the CLI.
#pragma once

#include <string>

namespace kestrel::test {

inline std::string data_path(const std::string& rel) { return std::string(KESTREL_TEST_DATA) + "/" + rel; }
inline std::string work_path(const std::string& rel) { return std::string(KESTREL_TEST_WORK) + "/" + rel; }
inline std::string kestrel_binary() { return KESTREL_BINARY; }

}  // namespace kestrel::test
