// A persistent pool of worker threads for the CPU backend. parallel_for splits [0, n) into
// chunks; the calling thread takes part, so a pool of N threads has N-1 workers.
//
// Hand-off is spin-then-sleep: a worker that finished a job polls for the next one for a short
// while (kSpinSeconds) before it blocks on a condition variable, and the caller polls for the
// workers' completion the same way. A decode step is hundreds of sub-millisecond ops in a row;
// waking a blocked thread costs a futex call plus, in a VM, an IPI to a halted vCPU (tens of
// microseconds each), which measured 25-35% of a 2-thread 8192x2048 Q4_0 GEMV (docs/bench.md).
// An idle pool stops spinning after kSpinSeconds, so an embedding app does not pay for it.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
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
  // Calls fn(begin, end, thread_index) over the chunks [k * chunk, (k + 1) * chunk) of [0, n),
  // each thread taking the next unclaimed chunk until none is left, in order. For jobs of many
  // equal units where a fixed split leaves one thread waiting on the other (a prefill GEMM: a
  // vCPU that runs 5% slower, or a ragged last row block, idles the rest at every op's end).
  // Blocks until all are done. Not re-entrant.
  void parallel_for_dynamic(int64_t n, int64_t chunk, const std::function<void(int64_t, int64_t, int)>& fn);
  // Calls fn(begin, end, thread_index) over the chunks [k * chunk, (k + 1) * chunk) of [0, n):
  // thread t owns the t-th of T contiguous shares of the chunks and claims it from the front,
  // so each thread's reads stay one sequential stream (what a decode GEMV needs: interleaved
  // chunks measured -12%); a thread whose share is done takes chunks from the back of the
  // others'. For memory-bound jobs where the threads run at different speeds (a vCPU's
  // neighbour, the caller's own hand-off): the fixed split left the faster thread idle ~5-9% of
  // a decode step (docs/bench.md). |chunk| >= 1; fewer than 2^32 chunks; one call over [0, n)
  // when a single thread would run. Blocks until all are done. Not re-entrant.
  void parallel_for_stealing(int64_t n, int64_t chunk, const std::function<void(int64_t, int64_t, int)>& fn);
  // Runs fn(thread_index) once on every thread (for per-thread setup or first touch). Not
  // re-entrant (never call it from inside a job), and jobs must not throw.
  void run_on_all(const std::function<void(int)>& fn);

  // How long a thread polls before it blocks: long enough to bridge the gap between two ops of
  // a decode step, short enough that an idle pool costs nothing measurable.
  static constexpr double kSpinSeconds = 200e-6;

 private:
  void worker(int index);

  int n_threads_;
  // parallel_for_stealing's share of each thread: [lo, hi) of its chunks packed into one word,
  // on a cache line of its own (allocated once: the call runs per decode matmul).
  struct alignas(64) Share {
    std::atomic<uint64_t> range{0};
  };
  std::unique_ptr<Share[]> shares_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_start_;
  std::condition_variable cv_done_;
  // job_ is written before generation_ is bumped (release) and read after it is seen (acquire).
  const std::function<void(int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
};

// Threads to use by default: TESSERA_THREADS if set, else the hardware concurrency.
int default_thread_count();

}  // namespace tessera::cpu
