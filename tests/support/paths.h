// Where tests find their data and scratch space, and how they run the CLI.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

namespace kestrel::test {

inline std::string data_path(const std::string& rel) { return std::string(KESTREL_TEST_DATA) + "/" + rel; }

// Scratch files live in a directory of this test process's own: CTest runs tests in parallel
// processes, and two tests writing one file name would corrupt each other's (mapped) files.
inline std::string work_path(const std::string& rel) {
  static const std::string dir = [] {
    std::string d = std::string(KESTREL_TEST_WORK) + "/p" + std::to_string(::getpid());
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir + "/" + rel;
}

inline std::string kestrel_binary() { return KESTREL_BINARY; }

}  // namespace kestrel::test
