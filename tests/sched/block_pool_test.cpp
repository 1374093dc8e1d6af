#include <gtest/gtest.h>

#include <set>

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
