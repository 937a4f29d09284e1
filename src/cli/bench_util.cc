#include "cli/bench_util.h"

#include <unistd.h>

#include <ctime>
#include <fstream>

namespace kestrel::cli {

std::string now_utc(const char* format) {
  const std::time_t t = std::time(nullptr);
  char buffer[64];
  std::strftime(buffer, sizeof buffer, format, std::gmtime(&t));
  return buffer;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

std::string host_name() {
  char host[256] = "unknown";
  gethostname(host, sizeof host - 1);
  return host;
}

}  // namespace kestrel::cli
