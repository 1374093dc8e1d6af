// Hybrid memory's sliding-window group: a KvManager with a window gives back the blocks that fell
// out of every later query's window (a sequence holds about window + one step's tokens), keeps
// its prefix cache usable only while the window's blocks are still cached, and HybridKv serves a
// prefix match that both groups can; KvCache sizes and copies the window layers on their own.
#include <gtest/gtest.h>

#include <random>

#include "core/kv/hybrid_kv.h"
#include "core/kv/kv_cache.h"
#include "tests/kv/counting_device.h"
#include "tests/kv/test_devices.h"

namespace tessera {
namespace {

constexpr int32_t kBs = 4;

std::vector<int32_t> random_tokens(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = int32_t(rng() % 1000) + 1;
  return t;
}

int32_t held(std::span<const BlockId> blocks) {
  int32_t n = 0;
  for (BlockId b : blocks) n += b != KvManager::kReleased;
  return n;
}

KvManagerConfig window_cfg(int32_t window) {
  KvManagerConfig c;
  c.block_size = kBs;
  c.window = window;
  return c;
}

TEST(WindowKv, ADecodingSequenceHoldsItsWindowAndAStepNotItsContext) {
  for (int32_t window : {1, 4, 9, 16}) {
    SCOPED_TRACE(window);
    BlockPool pool(64);
    KvManager kv(window_cfg(window), pool);
    const auto tokens = random_tokens(200, 1);
    ASSERT_TRUE(kv.allocate(1, 0, 8));  // a prefill of 8
    kv.commit(1, tokens, 8);
    for (int32_t n = 8; n < 200; ++n) {  // then one token per step
      ASSERT_TRUE(kv.allocate(1, n, n + 1));
      // Every key a query at position >= n sees (from n - window + 1) is in a held block.
      const auto blocks = kv.blocks(1);
      for (int32_t j = std::max(0, n - window + 1); j <= n; ++j) ASSERT_NE(blocks[size_t(j / kBs)], KvManager::kReleased) << j;
      // And no more than the window's blocks plus the partial ones at each end are held.
      EXPECT_LE(held(blocks), (window + kBs - 1) / kBs + 2) << n;
      EXPECT_EQ(pool.n_used(), held(blocks));
      EXPECT_EQ(kv.released(1), int32_t(blocks.size()) - held(blocks));
      kv.commit(1, tokens, n + 1);
    }
    kv.free(1);
    EXPECT_EQ(pool.n_used(), 0);
  }
}

TEST(WindowKv, AFullGroupKeepsEveryBlock) {
  BlockPool pool(64);
  KvManager kv(window_cfg(0), pool);
  ASSERT_TRUE(kv.allocate(1, 0, 100));
  ASSERT_TRUE(kv.allocate(1, 99, 100));
  EXPECT_EQ(held(kv.blocks(1)), 25);
  EXPECT_EQ(kv.released(1), 0);
}

TEST(WindowKv, APrefixHitNeedsOnlyTheWindowsBlocks) {
  constexpr int32_t kWindow = 8;
  BlockPool pool(64);
  KvManager kv(window_cfg(kWindow), pool);
  const auto tokens = random_tokens(41, 2);
  // A finished sequence registered its blocks, then gave back those outside its window.
  ASSERT_TRUE(kv.allocate(1, 0, 41));
  kv.commit(1, tokens, 41);
  ASSERT_TRUE(kv.allocate(1, 41, 42));
  EXPECT_GT(kv.released(1), 0);
  kv.free(1);
  // A second sequence with the same prompt matches 40 tokens (never the last one) with the
  // window's blocks of the next query (position 40 sees 33..40: blocks 8 and 9) cached.
  EXPECT_EQ(kv.match_prefix(2, tokens), 40);
  const auto b = kv.blocks(2);
  ASSERT_EQ(b.size(), 10u);
  EXPECT_EQ(kv.released(2), 8);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(b[size_t(i)], KvManager::kReleased);
  for (int i = 8; i < 10; ++i) EXPECT_NE(b[size_t(i)], KvManager::kReleased);
  // It continues like any sequence.
  ASSERT_TRUE(kv.allocate(2, 40, 41));
  kv.free(2);
  EXPECT_EQ(pool.n_used(), 0);
}

TEST(WindowKv, AMatchShortensToTheLongestPrefixWhoseWindowIsStillCached) {
  constexpr int32_t kWindow = 4;
  BlockPool pool(8);
  KvManager kv(window_cfg(kWindow), pool);
  const auto tokens = random_tokens(33, 3);
  // Prefill in chunks of 4 so that early blocks go back while later ones are taken: with 8
  // blocks in the pool the cached early blocks are evicted by the later ones.
  for (int32_t n = 0; n < 33; n += 4) {
    ASSERT_TRUE(kv.allocate(1, n, std::min(n + 4, 33)));
    kv.commit(1, tokens, std::min(n + 4, 33));
  }
  kv.free(1);
  // Whatever survived, a match is only taken where the next query's window is cached, and the
  // blocks it holds are exactly those.
  const int32_t m = kv.match_prefix(2, tokens);
  EXPECT_EQ(m % kBs, 0);
  EXPECT_LE(m, 32);
  const auto b = kv.blocks(2);
  ASSERT_EQ(int32_t(b.size()), m / kBs);
  for (int32_t j = std::max(0, m - kWindow + 1); j < m; ++j) EXPECT_NE(b[size_t(j / kBs)], KvManager::kReleased) << j;
  // A tighter pool that cached nothing of the window gives no match at all.
  BlockPool tiny(3);
  KvManager small(window_cfg(kWindow), tiny);
  ASSERT_TRUE(small.allocate(1, 0, 4));
  small.commit(1, tokens, 4);
  for (int32_t n = 4; n < 20; ++n) {
    ASSERT_TRUE(small.allocate(1, n, n + 1));
    small.commit(1, tokens, n + 1);
  }
  small.free(1);
  const auto other = random_tokens(40, 4);  // evicts the rest
  ASSERT_TRUE(small.allocate(3, 0, 12));
  small.commit(3, other, 12);
  small.free(3);
  EXPECT_EQ(small.match_prefix(4, tokens), 0);
}

TEST(WindowKv, ForksShareHeldBlocksAndTruncationKeepsTheWindow) {
  BlockPool pool(32);
  KvManager kv(window_cfg(6), pool);
  const auto tokens = random_tokens(30, 5);
  ASSERT_TRUE(kv.allocate(1, 0, 30));
  kv.commit(1, tokens, 30);
  ASSERT_TRUE(kv.allocate(1, 30, 34));  // a decode with a 3-token draft
  const int32_t used = pool.n_used();
  kv.fork(1, 2);
  EXPECT_EQ(pool.n_used(), used);  // shared, not copied
  EXPECT_EQ(kv.released(2), kv.released(1));
  kv.truncate(1, 31);               // the draft was rejected
  EXPECT_EQ(kv.blocks(1).size(), 8u);
  kv.free(1);
  kv.free(2);
  EXPECT_EQ(pool.n_used(), 0);
}

TEST(WindowKv, SwapOutIsRefusedSoTheSchedulerRecomputes) {
  BlockPool pool(16);
  KvManagerConfig c = window_cfg(4);
  c.host_slots = 16;
  KvManager kv(c, pool);
  ASSERT_TRUE(kv.allocate(1, 0, 8));
  EXPECT_FALSE(kv.swap_out(1, 8));
  EXPECT_FALSE(kv.swapped(1));
}

TEST(HybridKv, AMatchIsWhatBothGroupsCanServe) {
  BlockPool full(64), win(64);
  KvManagerConfig c;
  c.block_size = kBs;
  HybridKv kv(c, full, &win, 8);
  ASSERT_TRUE(kv.has_window());
  const auto tokens = random_tokens(41, 6);
  ASSERT_TRUE(kv.allocate(1, 0, 41));
  kv.commit(1, tokens, 41);
  kv.free(1);
  EXPECT_EQ(kv.match_prefix(2, tokens), 40);
  EXPECT_EQ(kv.blocks(2).size(), 10u);
  EXPECT_EQ(kv.window_blocks(2).size(), 10u);
  EXPECT_EQ(held(kv.window_blocks(2)), 2);
  kv.free(2);
  // The window group lost its blocks (evicted by other content), the full group kept them: the
  // full group's match is cut back to nothing, so no sequence reads a window it lacks.
  const auto other = random_tokens(256, 7);
  ASSERT_TRUE(kv.allocate(3, 0, 256));
  kv.commit(3, other, 256);
  kv.free(3);
  EXPECT_EQ(kv.match_prefix(4, tokens), 0);
  EXPECT_TRUE(kv.blocks(4).empty());
  EXPECT_TRUE(kv.window_blocks(4).empty());
  kv.free(4);
  EXPECT_EQ(full.n_used(), 0);
  EXPECT_EQ(win.n_used(), 0);
}

TEST(HybridKv, WithoutAWindowItIsOneKvManager) {
  BlockPool full(16);
  KvManagerConfig c;
  c.block_size = kBs;
  c.host_slots = 4;
  HybridKv kv(c, full, nullptr, 0);
  EXPECT_FALSE(kv.has_window());
  ASSERT_TRUE(kv.allocate(1, 0, 8));
  EXPECT_TRUE(kv.window_blocks(1).empty());
  EXPECT_TRUE(kv.swap_out(1, 8));  // swap stays available
}

TEST(WindowKvCache, WindowLayersHaveTheirOwnBlocksAndCopies) {
  auto dev = std::make_shared<testing::CountingDevice>(testing::cpu_and_unmapped_vulkan(1).front().second);
  KvCacheConfig c;
  c.n_layers = 4;
  c.n_kv_heads = 2;
  c.head_dim = 8;
  c.block_size = kBs;
  c.n_blocks = 32;
  c.dtype = DType::kF32;
  c.window = 8;
  c.n_window_blocks = 6;
  c.window_layers = {1, 0, 1, 0};
  auto kv = KvCache::create(*dev, c);
  ASSERT_TRUE(kv.ok()) << kv.status().to_string();
  KvCache& k = **kv;
  EXPECT_TRUE(k.has_window());
  EXPECT_EQ(k.n_window_layers(), 2);
  EXPECT_EQ(k.k(0).shape[0], 6);
  EXPECT_EQ(k.k(1).shape[0], 32);
  EXPECT_EQ(k.window_pool()->n_blocks(), 6);
  EXPECT_EQ(k.pool().n_blocks(), 32);
  // A window copy touches only window layers' tensors, in one batched copy.
  const int64_t copies = dev->copies;
  const std::pair<BlockId, BlockId> pair{1, 5};
  ASSERT_TRUE(k.copy_window_blocks(std::span(&pair, 1)).ok());
  EXPECT_EQ(dev->copies, copies + 1);
  // Block 20 exists in the full layers only.
  const std::pair<BlockId, BlockId> big{20, 1};
  EXPECT_FALSE(k.copy_window_blocks(std::span(&big, 1)).ok());
  EXPECT_TRUE(k.copy_blocks(std::span(&big, 1)).ok());
  // A window group without flags per layer is refused by name.
  c.window_layers = {1};
  auto bad = KvCache::create(*dev, c);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("window flag per layer"), std::string::npos) << bad.status().message();
}

}  // namespace
}  // namespace tessera
