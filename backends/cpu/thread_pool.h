// A persistent pool of worker threads for the CPU backend. parallel_for splits [0, n) into
// chunks; the calling thread takes part, so a pool of N threads has N-1 workers.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tessera::cpu {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  // Calls fn(begin, end, thread_index) over disjoint ranges covering [0, n), at most one range per
  // thread, ranges aligned to |grain|. Blocks until all are done. Not re-entrant.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t, int)>& fn);
  // Runs fn(thread_index) once on every thread (for per-thread setup or first touch).
  void run_on_all(const std::function<void(int)>& fn);

 private:
  void worker(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_start_;
  std::condition_variable cv_done_;
  const std::function<void(int)>* job_ = nullptr;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

// Threads to use by default: TESSERA_THREADS if set, else the hardware concurrency.
int default_thread_count();

}  // namespace tessera::cpu
