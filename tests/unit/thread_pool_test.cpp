#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "backends/cpu/thread_pool.h"

namespace tessera::cpu {
namespace {

TEST(ThreadPool, CoversTheRangeExactlyOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (int64_t n : {int64_t(1), int64_t(7), int64_t(1000), int64_t(4097)}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      pool.parallel_for(n, 16, [&](int64_t b, int64_t e, int t) {
        EXPECT_LT(t, threads);
        EXPECT_EQ(b % 16, 0);
        for (int64_t i = b; i < e; ++i) hits[size_t(i)]++;
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << "threads=" << threads << " n=" << n;
    }
  }
}

// Dynamic chunks: every index once, chunk-aligned ranges of at most |chunk|, and with more
// chunks than threads a thread that is held up leaves its share to the others.
TEST(ThreadPool, DynamicChunksCoverTheRangeAndBalance) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (int64_t n : {int64_t(0), int64_t(1), int64_t(7), int64_t(1000), int64_t(4097)}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      pool.parallel_for_dynamic(n, 16, [&](int64_t b, int64_t e, int t) {
        EXPECT_LT(t, threads);
        EXPECT_EQ(b % 16, 0);
        EXPECT_LE(e - b, 16);
        EXPECT_LE(e, n);
        for (int64_t i = b; i < e; ++i) hits[size_t(i)]++;
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << "threads=" << threads << " n=" << n;
    }
  }
  ThreadPool pool(2);
  std::atomic<int> by_thread[2] = {0, 0};
  pool.parallel_for_dynamic(64, 1, [&](int64_t, int64_t, int t) {
    by_thread[t]++;
    if (t == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));  // thread 0 is slow
  });
  EXPECT_EQ(by_thread[0] + by_thread[1], 64);
  EXPECT_GT(by_thread[1].load(), 32);  // a fixed split would have given each 32
}

// Jobs spaced further apart than the spin window find the workers blocked on the condition
// variable; jobs back to back find them spinning. Both hand-offs must run every thread once.
TEST(ThreadPool, RunsOnEveryThreadRepeatedly) {
  ThreadPool pool(4);
  const auto gap = std::chrono::duration<double>(4 * ThreadPool::kSpinSeconds);
  for (int rep = 0; rep < 200; ++rep) {
    std::atomic<int> runs{0}, mask{0};
    pool.run_on_all([&](int t) {
      runs++;
      mask |= 1 << t;
    });
    ASSERT_EQ(runs.load(), 4) << "rep " << rep;
    ASSERT_EQ(mask.load(), 15) << "rep " << rep;
    if (rep % 4 == 0) std::this_thread::sleep_for(gap);
  }
}

}  // namespace
}  // namespace tessera::cpu
