// Helpers the benchmark commands share: the date and machine they record, and a median timer.
#pragma once

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/args.h"

namespace kestrel::cli {

std::string now_utc(const char* format = "%Y-%m-%dT%H:%M:%SZ");  // strftime of the UTC time now
std::string cpu_model();                                          // /proc/cpuinfo's model name
std::string host_name();
nlohmann::json machine_record();  // {"host", "cpu", "cores"} of this machine

// Writes a benchmark's JSON record (atomically) to --out, by default
// bench/results/<name>-<UTC date and time>.json, creating the folder; prints and returns the path.
std::string save_bench_record(const Args& args, const std::string& name, const nlohmann::json& record);

// Median seconds per call of fn over at least `min_calls` calls and `min_seconds` (after one
// warm-up call).
template <typename Fn>
double median_seconds(Fn&& fn, double min_seconds, size_t min_calls = 5) {
  using Clock = std::chrono::steady_clock;
  fn();
  std::vector<double> times;
  const auto start = Clock::now();
  while (times.size() < min_calls || std::chrono::duration<double>(Clock::now() - start).count() < min_seconds) {
    const auto t0 = Clock::now();
    fn();
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace kestrel::cli
