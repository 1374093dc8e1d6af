#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <latch>
#include <numeric>
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

// A worker held back before it takes part (a latch in the test hook, standing for one the OS
// descheduled) does not hold up any op: each completes on the other threads with the serial
// result. Released, it finds those ops done and takes nothing.
TEST(ThreadPool, OpsCompleteWithoutAWorkerThatIsHeldBack) {
  ThreadPool pool(3);
  std::latch release(1);
  std::atomic<int> held{0};
  pool.set_worker_hook_for_testing([&](int index) {
    if (index == 1 && held.exchange(1) == 0) release.wait();
  });
  const int64_t n = 1000;
  std::vector<int64_t> serial(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) serial[size_t(i)] = i * i % 97;
  for (int rep = 0; rep < 50; ++rep) {
    std::vector<int64_t> out(static_cast<size_t>(n), -1);
    std::atomic<int> by_held{0};
    const auto body = [&](int64_t b, int64_t e, int t) {
      if (t == 1) by_held++;
      for (int64_t i = b; i < e; ++i) out[size_t(i)] = i * i % 97;
    };
    switch (rep % 3) {
      case 0: pool.parallel_for(n, 8, body); break;
      case 1: pool.parallel_for_dynamic(n, 8, body); break;
      default: pool.parallel_for_stealing(n, 8, body); break;
    }
    ASSERT_EQ(out, serial) << "rep " << rep;
    EXPECT_EQ(by_held.load(), 0) << "rep " << rep;  // worker 1 is still held
  }
  std::vector<std::atomic<int>> parts(3);
  pool.run_on_all([&](int p) { parts[size_t(p)]++; });
  for (auto& p : parts) EXPECT_EQ(p.load(), 1);
  release.count_down();
  // Released, worker 1 finds its op done; later ops may use it again and still cover the range.
  for (int rep = 0; rep < 50; ++rep) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    pool.parallel_for_stealing(n, 4, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) hits[size_t(i)]++;
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << "rep " << rep << " i " << i;
  }
  // Its first try after the release was for an op long done: counted late (it may take a while
  // to be scheduled on a loaded machine; no timing is asserted).
  for (int i = 0; i < 10000 && pool.stats().late == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_GE(pool.stats().late, 1u);
}

// A worker held inside a chunk it claimed holds only that chunk: the other threads run every
// other chunk (its whole share too, for stealing) while it waits, and the op ends when it lets go.
TEST(ThreadPool, AWorkerHeldInsideAChunkHoldsOnlyThatChunk) {
  for (int mode = 0; mode < 2; ++mode) {
    ThreadPool pool(3);
    const int64_t n = 300;
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    std::atomic<int64_t> finished{0};
    std::atomic<int> holder{-1};
    const auto body = [&](int64_t b, int64_t e, int t) {
      int expected = -1;
      if (t != 0 && holder.compare_exchange_strong(expected, t)) {
        // The first worker to claim a chunk waits here until every other chunk has run.
        while (finished.load() < n - (e - b)) std::this_thread::yield();
      }
      for (int64_t i = b; i < e; ++i) hits[size_t(i)]++;
      finished += e - b;
    };
    if (mode == 0) pool.parallel_for_dynamic(n, 1, body);
    else pool.parallel_for_stealing(n, 1, body);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << "mode " << mode << " i " << i;
  }
}

// Random sizes, chunks, pool sizes and lane caps against a serial reference (fixed seeds).
TEST(ThreadPool, RandomisedAgainstSerial) {
  std::mt19937 rng(1234);
  for (int threads : {1, 2, 3, 5, 8}) {
    ThreadPool pool(threads);
    for (int rep = 0; rep < 150; ++rep) {
      const int caps[2] = {1 + int(rng() % uint32_t(threads)), 1 + int(rng() % uint32_t(threads))};
      pool.set_caps(caps[0], caps[1]);
      const int lane = int(rng() % 2);
      pool.set_lane(lane ? ThreadPool::kBatch : ThreadPool::kDecode);
      const int cap = caps[lane];
      const int64_t n = int64_t(rng() % 5000);
      const int64_t chunk = 1 + int64_t(rng() % 300);
      const uint64_t salt = rng();
      std::vector<uint64_t> out(static_cast<size_t>(n), 0), ref(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) ref[size_t(i)] = (uint64_t(i) * 2654435761u) ^ salt;
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      const auto body = [&](int64_t b, int64_t e, int t) {
        ASSERT_GE(t, 0);
        ASSERT_LT(t, threads);
        ASSERT_LE(b, e);
        for (int64_t i = b; i < e; ++i) {
          out[size_t(i)] = (uint64_t(i) * 2654435761u) ^ salt;
          hits[size_t(i)]++;
        }
      };
      const int mode = int(rng() % 3);
      if (mode == 0) pool.parallel_for(n, chunk, body);
      else if (mode == 1) pool.parallel_for_dynamic(n, chunk, body);
      else pool.parallel_for_stealing(n, chunk, body);
      ASSERT_EQ(out, ref) << "threads " << threads << " rep " << rep << " mode " << mode << " n " << n << " chunk " << chunk;
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1);
      EXPECT_LE(pool.width(), cap);
    }
  }
}

// A lane capped at one thread runs every op on the caller.
TEST(ThreadPool, CapOfOneRunsOnTheCaller) {
  ThreadPool pool(4);
  pool.set_caps(1, 4);
  pool.set_lane(ThreadPool::kDecode);
  const auto caller = std::this_thread::get_id();
  pool.parallel_for_dynamic(1000, 1, [&](int64_t, int64_t, int t) {
    EXPECT_EQ(t, 0);
    EXPECT_EQ(std::this_thread::get_id(), caller);
  });
  pool.set_lane(ThreadPool::kBatch);
  std::atomic<int> mask{0};
  for (int rep = 0; rep < 20; ++rep) pool.run_on_all([&](int p) { mask |= 1 << p; });
  EXPECT_EQ(mask.load(), 15);
  const ThreadPoolStats s = pool.stats();
  EXPECT_EQ(s.cap[0], 1);
  EXPECT_EQ(s.cap[1], 4);
}

// Workers that stall ops (they sleep inside some chunks, as a descheduled thread would) make the
// pool evaluate narrower widths and switch between them; every op still covers its range once.
// No timing is asserted: which width wins is the machine's business.
TEST(ThreadPool, AdaptationKeepsEveryOpExact) {
  ThreadPool pool(3);
  pool.set_adaptive(true);
  std::mt19937 rng(99);
  for (int rep = 0; rep < 1500; ++rep) {
    const int64_t n = 64 + int64_t(rng() % 200);
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    const bool slow = rep % 3 == 0;
    const auto body = [&](int64_t b, int64_t e, int t) {
      if (slow && t != 0 && b == 0) std::this_thread::sleep_for(std::chrono::microseconds(300));
      for (int64_t i = b; i < e; ++i) hits[size_t(i)]++;
    };
    switch (rep % 4) {
      case 0: pool.parallel_for(n, 4, body); break;
      case 1: pool.parallel_for_dynamic(n, 4, body); break;
      case 2: pool.parallel_for_stealing(n, 4, body); break;
      default: {
        std::atomic<int64_t> next{0};
        pool.run_on_all([&](int) {
          for (int64_t i; (i = next.fetch_add(1)) < n;) body(i, i + 1, 0);
        });
      }
    }
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << "rep " << rep << " i " << i;
    ASSERT_GE(pool.width(), 1);
    ASSERT_LE(pool.width(), 3);
  }
  EXPECT_GT(pool.stats().ops, 0u);
}

// Default thread counts: physical cores never exceed logical CPUs; TESSERA_THREADS overrides.
TEST(ThreadPool, DefaultThreadCount) {
  EXPECT_GE(physical_core_count(), 1);
  EXPECT_LE(physical_core_count(), available_cpu_count());
  ::setenv("TESSERA_THREADS", "3", 1);
  EXPECT_EQ(default_thread_count(), std::min(3, 4 * available_cpu_count()));
  ::setenv("TESSERA_THREADS", "0", 1);  // not a count: the default
  EXPECT_EQ(default_thread_count(), physical_core_count());
  ::unsetenv("TESSERA_THREADS");
  EXPECT_EQ(default_thread_count(), physical_core_count());
}

}  // namespace
}  // namespace tessera::cpu
