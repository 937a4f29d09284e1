#include "core/thread_pool.h"

#include <algorithm>
#include <cstdlib>
#include <memory>

namespace kestrel {

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

static void run_part(const std::function<void(int64_t, int64_t)>& fn, int64_t n, int parts, int index) {
  int64_t begin = n * index / parts;
  int64_t end = n * (index + 1) / parts;
  if (begin < end) fn(begin, end);
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain) {
  if (n <= 0) return;
  int64_t max_parts = std::max<int64_t>(1, n / std::max<int64_t>(1, grain));
  int parts = int(std::min<int64_t>(n_threads_, max_parts));
  if (parts <= 1) {
    fn(0, n);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = &fn;
    job_n_ = n;
    job_parts_ = parts;
    pending_ = parts - 1;
    ++generation_;
  }
  start_cv_.notify_all();
  run_part(fn, n, parts, 0);
  std::unique_lock<std::mutex> lock(mutex_);
  done_cv_.wait(lock, [this] { return pending_ == 0; });
  job_ = nullptr;
}

void ThreadPool::worker(int index) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int64_t, int64_t)>* job;
    int64_t n;
    int parts;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
      n = job_n_;
      parts = job_parts_;
    }
    if (index < parts) {
      run_part(*job, n, parts, index);
      std::lock_guard<std::mutex> lock(mutex_);
      if (--pending_ == 0) done_cv_.notify_one();
    }
  }
}

namespace {
std::unique_ptr<ThreadPool>& global_pool() {
  static std::unique_ptr<ThreadPool> pool;
  return pool;
}
int default_threads() {
  if (const char* env = std::getenv("KESTREL_THREADS")) {
    int n = std::atoi(env);
    if (n > 0) return n;
  }
  return int(std::max(1u, std::thread::hardware_concurrency()));
}
}  // namespace

ThreadPool& ThreadPool::global() {
  auto& pool = global_pool();
  if (!pool) pool = std::make_unique<ThreadPool>(default_threads());
  return *pool;
}

void ThreadPool::set_global_threads(int n_threads) {
  global_pool() = std::make_unique<ThreadPool>(n_threads > 0 ? n_threads : default_threads());
}

}  // namespace kestrel
