#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <random>
#include <thread>
#include <utility>
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

// Stealing: every index once in ranges of at most |chunk|; a thread's claims within its own
// share run front to back without a gap (one sequential stream); a held-up thread's share is
// finished by the others from its back end.
TEST(ThreadPool, StealingKeepsEachShareInOrderAndBalances) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (int64_t n : {int64_t(0), int64_t(1), int64_t(7), int64_t(1000), int64_t(4097)}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      std::vector<std::vector<std::pair<int64_t, int64_t>>> ranges(static_cast<size_t>(threads));
      // Shares are of the chunks, min(threads, chunks) of them (threads beyond run nothing).
      const int64_t chunks = (n + 15) / 16;
      const int used = int(std::min<int64_t>(threads, chunks));
      pool.parallel_for_stealing(n, 16, [&](int64_t b, int64_t e, int t) {
        ASSERT_LT(t, std::max(used, 1));
        EXPECT_LT(b, e);
        EXPECT_EQ(b % 16, 0);
        EXPECT_LE(e - b, n > 16 && threads > 1 ? 16 : n);  // one thread: one call over [0, n)
        EXPECT_LE(e, n);
        for (int64_t i = b; i < e; ++i) hits[size_t(i)]++;
        ranges[size_t(t)].emplace_back(b, e);
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << "threads=" << threads << " n=" << n;
      for (int t = 0; t < used; ++t) {
        const int64_t lo = 16 * (chunks * t / used), hi = std::min(n, 16 * (chunks * (t + 1) / used));
        int64_t next = lo;
        for (auto [b, e] : ranges[size_t(t)])
          if (b >= lo && b < hi) {
            EXPECT_EQ(b, next) << "threads=" << threads << " n=" << n << " t=" << t;
            next = e;
          }
      }
    }
  }
  ThreadPool pool(2);
  std::vector<int64_t> taken[2];
  pool.parallel_for_stealing(64, 1, [&](int64_t b, int64_t, int t) {
    taken[t].push_back(b);
    if (t == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));  // thread 0 is slow
  });
  EXPECT_EQ(taken[0].size() + taken[1].size(), 64u);
  ASSERT_GT(taken[1].size(), 32u);  // a fixed split would have given each 32
  // Thread 1 ran its own 32..63 in order, then thread 0's from 31 down.
  for (size_t i = 0; i < 32; ++i) EXPECT_EQ(taken[1][i], int64_t(32 + i));
  for (size_t i = 32; i < taken[1].size(); ++i) EXPECT_EQ(taken[1][i], int64_t(31 - (i - 32)));
}

// The owner and a thief race for the last chunks of a share on every call here (single-unit
// chunks, uneven work): each index still runs exactly once.
TEST(ThreadPool, StealingNeverRunsAChunkTwiceUnderRaces) {
  ThreadPool pool(4);
  std::mt19937 rng(7);
  for (int rep = 0; rep < 1000; ++rep) {
    const int64_t n = 8 + int64_t(rng() % 57);
    const uint32_t salt = rng();
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    pool.parallel_for_stealing(n, 1, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) {
        hits[size_t(i)]++;
        volatile uint32_t spin = 0;  // uneven work, so that shares finish at different times
        for (uint32_t k = 0; k < ((salt >> (i % 24)) & 255u) * 8u; ++k) spin = spin + k;
      }
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << "rep " << rep << " i " << i;
  }
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
