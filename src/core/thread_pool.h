// A fixed pool of worker threads running statically partitioned loops.
//
// parallel_for splits [0, n) into contiguous ranges, one per worker, so the same n always
// gives the same split: kernels that write disjoint outputs stay bit-deterministic.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kestrel {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Runs fn(begin, end) over a partition of [0, n) and waits. Work smaller than `grain` items
  // per thread runs on fewer threads. Not reentrant: fn must not call parallel_for.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain = 1);

  // The process-wide pool (threads = KESTREL_THREADS or the number of cores).
  static ThreadPool& global();
  static void set_global_threads(int n_threads);

 private:
  void worker(int index);

  int n_threads_;
  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable start_cv_, done_cv_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int job_parts_ = 0;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

}  // namespace kestrel
