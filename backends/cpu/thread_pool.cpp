#include "backends/cpu/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace tessera::cpu {

int default_thread_count() {
  if (const char* env = std::getenv("TESSERA_THREADS")) {
    const int n = std::atoi(env);
    if (n > 0) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Polls |done| for up to ThreadPool::kSpinSeconds; true when it turned true meanwhile. The clock
// is read once per 64 polls (a pause is ~10-140 cycles, a clock read ~20 ns).
template <class Pred>
bool spin_until(Pred done) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration<double>(ThreadPool::kSpinSeconds);
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      cpu_relax();
    }
    if (Clock::now() >= deadline) return done();
  }
}

}  // namespace

ThreadPool::ThreadPool(int n_threads)
    : n_threads_(std::max(1, n_threads)), shares_(std::make_unique<Share[]>(size_t(n_threads_))) {
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true, std::memory_order_release);
  }
  cv_start_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::worker(int index) {
  uint64_t seen = 0;
  for (;;) {
    const auto ready = [&] {
      return stop_.load(std::memory_order_acquire) || generation_.load(std::memory_order_acquire) != seen;
    };
    if (!spin_until(ready)) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_start_.wait(lock, ready);
    }
    if (stop_.load(std::memory_order_acquire)) return;
    seen = generation_.load(std::memory_order_acquire);
    (*job_)(index);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      // The caller may be blocked on cv_done_: taking the lock orders this notify after its
      // predicate check (no lost wake-up).
      std::lock_guard<std::mutex> lock(mu_);
      cv_done_.notify_one();
    }
  }
}

void ThreadPool::run_on_all(const std::function<void(int)>& fn) {
  if (n_threads_ == 1) {
    fn(0);
    return;
  }
  job_ = &fn;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  {
    // Workers that gave up spinning check the predicate under mu_; taking it here orders this
    // notify after any such check.
    std::lock_guard<std::mutex> lock(mu_);
  }
  cv_start_.notify_all();
  fn(0);
  const auto done = [&] { return pending_.load(std::memory_order_acquire) == 0; };
  if (!spin_until(done)) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_done_.wait(lock, done);
  }
  job_ = nullptr;
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t, int)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t units = (n + grain - 1) / grain;
  const int threads = int(std::min<int64_t>(n_threads_, units));
  if (threads <= 1) {
    fn(0, n, 0);
    return;
  }
  run_on_all([&](int t) {
    if (t >= threads) return;
    const int64_t u0 = units * t / threads, u1 = units * (t + 1) / threads;
    const int64_t b = u0 * grain, e = std::min(n, u1 * grain);
    if (b < e) fn(b, e, t);
  });
}

void ThreadPool::parallel_for_dynamic(int64_t n, int64_t chunk, const std::function<void(int64_t, int64_t, int)>& fn) {
  if (n <= 0) return;
  chunk = std::max<int64_t>(1, chunk);
  const int64_t chunks = (n + chunk - 1) / chunk;
  if (n_threads_ == 1 || chunks == 1) {
    for (int64_t k = 0; k < chunks; ++k) fn(k * chunk, std::min(n, (k + 1) * chunk), 0);
    return;
  }
  std::atomic<int64_t> next{0};
  run_on_all([&](int t) {
    for (int64_t k; (k = next.fetch_add(1, std::memory_order_relaxed)) < chunks;)
      fn(k * chunk, std::min(n, (k + 1) * chunk), t);
  });
}

void ThreadPool::parallel_for_stealing(int64_t n, int64_t chunk, const std::function<void(int64_t, int64_t, int)>& fn) {
  if (n <= 0) return;
  chunk = std::max<int64_t>(1, chunk);
  const int64_t chunks = (n + chunk - 1) / chunk;
  const int threads = int(std::min<int64_t>(n_threads_, chunks));
  if (threads <= 1) {
    fn(0, n, 0);
    return;
  }
  if (chunks >= (int64_t(1) << 32)) {  // the packed shares below hold 32-bit chunk indices
    parallel_for_dynamic(n, chunk, fn);
    return;
  }
  // Shares and claims count chunks. Each share is [lo, hi) packed into one word, so that the
  // owner's claim from the front and a thief's from the back never overlap: both are
  // compare-exchanges of the same word.
  const auto pack = [](int64_t lo, int64_t hi) { return uint64_t(lo) | uint64_t(hi) << 32; };
  Share* shares = shares_.get();
  for (int t = 0; t < threads; ++t)
    shares[t].range.store(pack(chunks * t / threads, chunks * (t + 1) / threads), std::memory_order_relaxed);
  // Claims one chunk of |r| (its first, or its last when |back|); -1 once the share is empty.
  const auto claim = [&](std::atomic<uint64_t>& r, bool back) -> int64_t {
    uint64_t v = r.load(std::memory_order_relaxed);
    for (;;) {
      const int64_t lo = int64_t(v & 0xffffffffu), hi = int64_t(v >> 32);
      if (lo >= hi) return -1;
      if (r.compare_exchange_weak(v, back ? pack(lo, hi - 1) : pack(lo + 1, hi), std::memory_order_relaxed))
        return back ? hi - 1 : lo;
    }
  };
  run_on_all([&](int t) {
    if (t >= threads) return;
    // Own share front to back, then the others' back to front.
    for (int k = 0; k < threads; ++k)
      for (int64_t c; (c = claim(shares[(t + k) % threads].range, k > 0)) >= 0;)
        fn(c * chunk, std::min(n, (c + 1) * chunk), t);
  });
}

}  // namespace tessera::cpu
