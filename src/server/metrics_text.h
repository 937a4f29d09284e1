// Prometheus text exposition of the scheduler's counters and latency histograms.
#pragma once

#include <mutex>
#include <string>
#include <vector>

#include "engine/scheduler.h"

namespace kestrel::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}
  void add(double v);
  void render(std::string& out, const std::string& name, const std::string& help) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  double sum_ = 0;
  uint64_t n_ = 0;
};

class MetricsText {
 public:
  MetricsText();
  // Takes the latency samples since the last call and renders everything.
  std::string render(Scheduler& scheduler, const std::string& model, int http_in_flight, uint64_t http_rejected);

 private:
  std::mutex mu_;
  Histogram ttft_, itl_;
};

}  // namespace kestrel::server
