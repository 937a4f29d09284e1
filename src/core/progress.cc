#include "core/progress.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace kestrel {

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 4) {
    bytes /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", bytes, units[u]);
  return buf;
}

std::string human_count(double count) {
  const char* units[] = {"", "K", "M", "B", "T"};
  int u = 0;
  while (count >= 1000.0 && u < 4) {
    count /= 1000.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f%s" : "%.2f%s", count, units[u]);
  return buf;
}

Progress::Progress(std::string label, uint64_t total, bool bytes)
    : label_(std::move(label)), total_(total), bytes_(bytes) {
  const char* force = std::getenv("KESTREL_PROGRESS");
  enabled_ = force ? force[0] == '1' : isatty(STDERR_FILENO) != 0;
  start_ = last_draw_ = std::chrono::steady_clock::now();
}

Progress::~Progress() { finish(); }

void Progress::advance(uint64_t n) {
  done_ += n;
  auto now = std::chrono::steady_clock::now();
  if (now - last_draw_ > std::chrono::milliseconds(100)) {
    last_draw_ = now;
    draw(false);
  }
}

void Progress::finish() {
  if (finished_) return;
  finished_ = true;
  draw(true);
}

void Progress::draw(bool final) {
  if (!enabled_) return;
  double frac = total_ ? double(done_) / double(total_) : 1.0;
  if (frac > 1.0) frac = 1.0;
  int width = 30, filled = int(frac * width);
  std::string bar(filled, '#');
  bar.append(width - filled, '.');
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::string amount = bytes_ ? human_bytes(double(done_)) + " / " + human_bytes(double(total_))
                              : std::to_string(done_) + " / " + std::to_string(total_);
  std::fprintf(stderr, "\r%s [%s] %5.1f%% %s %.1fs%s", label_.c_str(), bar.c_str(), frac * 100.0,
               amount.c_str(), secs, final ? "\n" : "");
  std::fflush(stderr);
}

}  // namespace kestrel
