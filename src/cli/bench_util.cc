#include "cli/bench_util.h"

#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/files.h"

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

nlohmann::json machine_record() {
  return {{"host", host_name()}, {"cpu", cpu_model()}, {"cores", std::thread::hardware_concurrency()}};
}

std::string save_bench_record(const Args& args, const std::string& name, const nlohmann::json& record) {
  const std::string out = args.get("out", "bench/results/" + name + "-" + now_utc("%Y%m%d-%H%M%S") + ".json");
  const std::filesystem::path parent = std::filesystem::path(out).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  write_file_atomic(out, record.dump(2) + "\n");
  std::printf("wrote %s\n", out.c_str());
  return out;
}

}  // namespace kestrel::cli
