// Where tests find their data and scratch space, and how they run the CLI.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
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

// Runs `kestrel ARGS` and returns its stdout and stderr; `status` gets the exit status.
inline std::string run_cli(const std::string& args, int* status) {
  const std::string cmd = kestrel_binary() + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while (p && (n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = p ? pclose(p) : -1;
  *status = st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

}  // namespace kestrel::test
