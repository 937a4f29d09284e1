// A one-line progress bar on stderr, drawn only when stderr is a terminal (or when forced).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace kestrel {

class Progress {
 public:
  Progress(std::string label, uint64_t total, bool bytes = false);
  ~Progress();
  void advance(uint64_t n);
  void finish();

 private:
  void draw(bool final);

  std::string label_;
  uint64_t total_, done_ = 0;
  bool bytes_, enabled_, finished_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

// "1.50 GiB", "312.0 MiB", "12 B"
std::string human_bytes(double bytes);
// "1.23B", "45.6M", "789K"
std::string human_count(double count);

}  // namespace kestrel
