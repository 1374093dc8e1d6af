#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "core/kv/block_pool.h"

namespace tessera {
namespace {

TEST(BlockPool, AllocatesEveryBlockOnceThenRunsOut) {
  BlockPool pool(8);
  std::set<BlockId> seen;
  for (int i = 0; i < 8; ++i) {
    auto b = pool.allocate();
    ASSERT_TRUE(b.has_value());
    EXPECT_TRUE(seen.insert(*b).second);
    EXPECT_GE(*b, 0);
    EXPECT_LT(*b, 8);
  }
  EXPECT_FALSE(pool.allocate().has_value());
  EXPECT_EQ(pool.n_free(), 0);
}

TEST(BlockPool, SharedBlocksReturnWhenTheLastOwnerReleases) {
  BlockPool pool(2);
  const BlockId b = *pool.allocate();
  pool.retain(b);
  EXPECT_EQ(pool.refcount(b), 2);
  pool.release(b);
  EXPECT_EQ(pool.n_free(), 1);
  pool.release(b);
  EXPECT_EQ(pool.n_free(), 2);
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

TEST(BlockPool, CachedBlocksAreFoundAfterReleaseAndEvictedLeastRecentlyUsedFirst) {
  BlockPool pool(3);
  const std::vector<int32_t> t1{1, 2, 3, 4}, t2{5, 6, 7, 8};
  const BlockId a = *pool.allocate(), b = *pool.allocate();
  const BlockHash ha = hash_block(0, t1), hb = hash_block(ha, t2);
  pool.register_full(a, ha, 0, t1);
  pool.register_full(b, hb, ha, t2);
  pool.release(a);  // a is older in the LRU than b
  pool.release(b);
  EXPECT_EQ(pool.n_free(), 3);
  EXPECT_EQ(pool.n_cached_free(), 2);
  // A hit takes the block back with its content.
  auto hit = pool.lookup(hb, ha, t2);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(*hit, b);
  EXPECT_EQ(pool.refcount(b), 1);
  pool.release(b);  // now b is the most recently used
  // The plain free block goes first, then the least recently used cached one (a).
  const BlockId c = *pool.allocate();
  EXPECT_NE(c, a);
  EXPECT_NE(c, b);
  EXPECT_EQ(*pool.allocate(), a);
  EXPECT_FALSE(pool.lookup(ha, 0, t1).has_value()) << "evicted content is gone";
  EXPECT_TRUE(pool.lookup(hb, ha, t2).has_value());
  EXPECT_EQ(pool.stats().evictions, 1);
}

TEST(BlockPool, AHashMatchWithOtherTokensIsNotAHit) {
  BlockPool pool(2);
  const std::vector<int32_t> t{9, 9, 9, 9}, other{9, 9, 9, 8};
  const BlockId a = *pool.allocate();
  const BlockHash h = hash_block(0, t);
  pool.register_full(a, h, 0, t);
  EXPECT_FALSE(pool.lookup(h, 0, other).has_value()) << "a colliding hash must not alias content";
  EXPECT_FALSE(pool.lookup(h, 12345, t).has_value()) << "nor a different parent";
  EXPECT_NE(hash_block(0, t), hash_block(0, other));
  EXPECT_NE(hash_block(0, t), hash_block(1, t));
  // A duplicate of registered content stays unhashed and returns to the plain free list.
  const BlockId d = *pool.allocate();
  pool.register_full(d, h, 0, t);
  EXPECT_FALSE(pool.is_cached(d));
  pool.release(d);
  EXPECT_EQ(pool.n_cached_free(), 0);
}

}  // namespace
}  // namespace tessera
