// KvManager: block tables, copy-on-write, prefix cache, swap planning and freeing, over a real
// BlockPool and without a device (the manager is host-only bookkeeping).
#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "core/kv/kv_manager.h"

namespace tessera {
namespace {

using Pairs = std::vector<std::pair<int32_t, int32_t>>;

std::vector<int32_t> iota_tokens(int32_t n, int32_t first = 0) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}

std::vector<BlockId> table(const KvManager& kv, SeqId id) {
  const auto b = kv.blocks(id);
  return {b.begin(), b.end()};
}

KvManagerConfig config(int32_t block_size, bool prefix_caching, int32_t host_slots) {
  KvManagerConfig c;
  c.block_size = block_size;
  c.prefix_caching = prefix_caching;
  c.host_slots = host_slots;
  return c;
}

TEST(KvManager, AllocateUntilThePoolIsFullThenFails) {
  BlockPool pool(8);
  KvManager kv(config(4, false, 0), pool);
  ASSERT_TRUE(kv.allocate(1, 0, 20));  // 5 blocks
  ASSERT_TRUE(kv.allocate(2, 0, 12));  // 3 blocks: the pool is used up
  EXPECT_EQ(table(kv, 1).size(), 5u);
  EXPECT_EQ(table(kv, 2).size(), 3u);
  std::set<BlockId> all;
  for (SeqId id : {1, 2})
    for (BlockId b : table(kv, id)) EXPECT_TRUE(all.insert(b).second) << "block " << b << " handed out twice";
  EXPECT_EQ(pool.n_free(), 0);

  EXPECT_FALSE(kv.allocate(3, 0, 1)) << "a full pool must fail so the scheduler preempts";
  EXPECT_TRUE(table(kv, 3).empty());
  EXPECT_FALSE(kv.allocate(2, 0, 13)) << "growing past the pool fails";
  EXPECT_EQ(table(kv, 2).size(), 3u) << "a failed allocate keeps what the sequence had";
  EXPECT_TRUE(kv.allocate(2, 0, 12)) << "nothing new needed";

  kv.free(1);  // the scheduler's preemption
  EXPECT_EQ(pool.n_free(), 5);
  EXPECT_TRUE(kv.allocate(3, 0, 1));
  EXPECT_TRUE(kv.allocate(2, 0, 13));
  EXPECT_EQ(table(kv, 2).size(), 4u);
  EXPECT_TRUE(kv.take_transfers().copies.empty()) << "no block is shared: nothing to copy";
}

TEST(KvManager, TruncateDropsDraftBlocksAndKeepsTheRegisteredOnes) {
  BlockPool pool(16);
  KvManager kv(config(4, true, 0), pool);
  const auto toks = iota_tokens(6);
  ASSERT_TRUE(kv.allocate(1, 5, 6 + 7));  // 6 tokens and a speculative draft of 7: 4 blocks
  EXPECT_EQ(table(kv, 1).size(), 4u);
  kv.commit(1, toks, 6);  // block 0 is full and registered; nothing past token 6 is
  kv.truncate(1, 7);      // one draft token accepted: 7 tokens, 2 blocks
  ASSERT_EQ(table(kv, 1).size(), 2u);
  EXPECT_EQ(pool.n_used(), 2);
  EXPECT_TRUE(pool.is_cached(table(kv, 1)[0]));
  EXPECT_FALSE(pool.is_cached(table(kv, 1)[1]));
  kv.truncate(1, 7);  // idempotent
  EXPECT_EQ(pool.n_used(), 2);
  kv.free(1);
  EXPECT_EQ(pool.n_used(), 0);
}

TEST(KvManager, UsageCountsWasteInPartialBlocks) {
  BlockPool pool(8);
  KvManager kv(config(4, false, 0), pool);
  ASSERT_TRUE(kv.allocate(1, 0, 10));
  kv.commit(1, iota_tokens(10), 10);
  const KvUsage u = kv.usage();
  EXPECT_EQ(u.blocks_total, 8);
  EXPECT_EQ(u.blocks_used, 3);
  EXPECT_EQ(u.slots_allocated, 12);
  EXPECT_EQ(u.slots_waste, 2) << "10 tokens in 3 blocks of 4";
}

TEST(KvManager, ForkSharesBlocksAndCopiesASharedPartialBlockOnFirstWrite) {
  BlockPool pool(16);
  KvManager kv(config(4, true, 0), pool);
  const auto toks = iota_tokens(10);
  ASSERT_TRUE(kv.allocate(1, 0, 10));  // 2 full blocks and a partial one
  kv.commit(1, toks, 10);
  const auto parent = table(kv, 1);
  ASSERT_EQ(parent.size(), 3u);

  kv.fork(1, 2);
  EXPECT_EQ(table(kv, 2), parent);
  for (BlockId b : parent) EXPECT_EQ(pool.refcount(b), 2) << "block " << b;
  EXPECT_EQ(pool.n_used(), 3) << "a fork takes no block";
  EXPECT_EQ(kv.usage().slots_waste, 2) << "shared blocks count once";

  // The child writes token 10 into the shared partial block 2: copied first.
  ASSERT_TRUE(kv.allocate(2, 10, 11));
  const auto child = table(kv, 2);
  ASSERT_EQ(child.size(), 3u);
  EXPECT_EQ(child[0], parent[0]);
  EXPECT_EQ(child[1], parent[1]);
  EXPECT_NE(child[2], parent[2]);
  EXPECT_EQ(pool.refcount(parent[2]), 1);
  EXPECT_EQ(pool.refcount(child[2]), 1);
  EXPECT_EQ(pool.refcount(parent[0]), 2) << "full blocks stay shared";
  EXPECT_EQ(kv.stats().cow_copies, 1);

  // The parent now owns its partial block alone: no second copy.
  ASSERT_TRUE(kv.allocate(1, 10, 11));
  EXPECT_EQ(table(kv, 1), parent);
  const KvTransfers t = kv.take_transfers();
  EXPECT_EQ(t.copies, (Pairs{{parent[2], child[2]}}));
  EXPECT_TRUE(t.swap_out.empty());
  EXPECT_TRUE(t.swap_in.empty());
  EXPECT_TRUE(kv.take_transfers().copies.empty()) << "taken once";
  EXPECT_EQ(kv.stats().cow_copies, 1);
}

TEST(KvManager, ForkAtABlockBoundaryNeverCopies) {
  BlockPool pool(8);
  KvManager kv(config(4, false, 0), pool);
  ASSERT_TRUE(kv.allocate(1, 0, 8));
  kv.commit(1, iota_tokens(8), 8);
  kv.fork(1, 2);
  ASSERT_TRUE(kv.allocate(2, 8, 9));  // a fresh third block, the full ones stay shared
  EXPECT_EQ(table(kv, 2).size(), 3u);
  EXPECT_TRUE(kv.take_transfers().copies.empty());
  EXPECT_EQ(kv.stats().cow_copies, 0);
}

TEST(KvManager, FullPoolFailsTheCopyOnWrite) {
  BlockPool pool(3);
  KvManager kv(config(4, false, 0), pool);
  ASSERT_TRUE(kv.allocate(1, 0, 6));
  kv.commit(1, iota_tokens(6), 6);
  kv.fork(1, 2);
  ASSERT_TRUE(kv.allocate(3, 0, 4));  // the last free block
  EXPECT_FALSE(kv.allocate(2, 6, 7)) << "no block to copy into";
  EXPECT_EQ(table(kv, 2), table(kv, 1)) << "still sharing";
  EXPECT_TRUE(kv.take_transfers().copies.empty());
}

TEST(KvManager, PrefixMatchAfterFreeReusesTheCachedBlocks) {
  BlockPool pool(16);
  KvManager kv(config(4, true, 0), pool);
  const auto toks = iota_tokens(14, 100);  // 3 full blocks and 2 tokens
  EXPECT_EQ(kv.match_prefix(1, toks), 0) << "an empty cache";
  ASSERT_TRUE(kv.allocate(1, 0, 14));
  kv.commit(1, toks, 14);
  const auto first = table(kv, 1);
  kv.free(1);
  EXPECT_EQ(kv.usage().blocks_used, 0);
  EXPECT_EQ(kv.usage().blocks_cached, 3) << "the full blocks keep their content";
  const KvManagerStats before = kv.stats();
  EXPECT_EQ(before.prefix_hits, 0);

  EXPECT_EQ(kv.match_prefix(2, toks), 12);
  const auto second = table(kv, 2);
  ASSERT_EQ(second.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(second[i], first[i]) << "block " << i;
  const KvManagerStats after = kv.stats();
  EXPECT_EQ(after.prefix_hits - before.prefix_hits, 3);
  EXPECT_EQ(after.prefix_lookups - before.prefix_lookups, 3);
  EXPECT_EQ(kv.usage().blocks_cached, 0) << "taken out of the LRU";
  ASSERT_TRUE(kv.allocate(2, 12, 14));
  EXPECT_EQ(table(kv, 2).size(), 4u);

  // 12 tokens: the block of the last token is computed again (the step needs its logits).
  EXPECT_EQ(kv.match_prefix(3, iota_tokens(12, 100)), 8);
  // A different second block: only the first matches (the hash chains through the parent).
  auto diverged = toks;
  diverged[5] = 7;
  EXPECT_EQ(kv.match_prefix(4, diverged), 4);
  for (SeqId id : {2, 3, 4}) kv.free(id);
  EXPECT_EQ(pool.n_free(), 16);
}

TEST(KvManager, PrefixCachingOffMatchesNothing) {
  BlockPool pool(8);
  KvManager kv(config(4, false, 0), pool);
  const auto toks = iota_tokens(9);
  ASSERT_TRUE(kv.allocate(1, 0, 9));
  kv.commit(1, toks, 9);
  kv.free(1);
  EXPECT_EQ(kv.match_prefix(2, toks), 0);
  EXPECT_EQ(kv.usage().blocks_cached, 0);
  EXPECT_EQ(kv.stats().prefix_lookups, 0);
}

TEST(KvManager, SwapOutThenSwapInPlansBlockSlotPairsAndReturnsSlots) {
  BlockPool pool(8);
  KvManager kv(config(4, true, 4), pool);
  const auto toks = iota_tokens(10);
  ASSERT_TRUE(kv.allocate(1, 0, 12));  // 3 blocks; 10 tokens computed
  kv.commit(1, toks, 10);
  const auto out_blocks = table(kv, 1);

  ASSERT_TRUE(kv.swap_out(1, 10));
  EXPECT_TRUE(kv.swapped(1));
  EXPECT_TRUE(table(kv, 1).empty());
  EXPECT_EQ(kv.n_host_slots_free(), 1);
  EXPECT_EQ(pool.n_used(), 0) << "every block is released";
  KvTransfers t = kv.take_transfers();
  EXPECT_EQ(t.swap_out, (Pairs{{out_blocks[0], 0}, {out_blocks[1], 1}, {out_blocks[2], 2}}));
  EXPECT_TRUE(t.swap_in.empty());

  // One host slot left: a sequence of two computed blocks cannot swap, and nothing changes.
  ASSERT_TRUE(kv.allocate(2, 0, 8));
  const auto two = table(kv, 2);
  EXPECT_FALSE(kv.swap_out(2, 8));
  EXPECT_EQ(table(kv, 2), two);
  EXPECT_FALSE(kv.swapped(2));
  EXPECT_EQ(kv.n_host_slots_free(), 1);
  EXPECT_TRUE(kv.take_transfers().swap_out.empty());

  // 6 free blocks minus 4 taken: too few for 3 slots plus the next token's block. All or nothing.
  ASSERT_TRUE(kv.allocate(3, 0, 16));
  EXPECT_EQ(pool.n_free(), 2);
  EXPECT_FALSE(kv.swap_in(1, 10, 11));
  EXPECT_TRUE(kv.swapped(1));
  EXPECT_EQ(pool.n_free(), 2);
  EXPECT_TRUE(kv.take_transfers().swap_in.empty());
  kv.free(3);

  ASSERT_TRUE(kv.swap_in(1, 10, 11));
  EXPECT_FALSE(kv.swapped(1));
  const auto in_blocks = table(kv, 1);
  ASSERT_EQ(in_blocks.size(), 3u);
  t = kv.take_transfers();
  EXPECT_EQ(t.swap_in, (Pairs{{0, in_blocks[0]}, {1, in_blocks[1]}, {2, in_blocks[2]}}));
  EXPECT_TRUE(t.swap_out.empty());
  EXPECT_TRUE(t.copies.empty());
  EXPECT_EQ(kv.n_host_slots_free(), 4);
  const KvManagerStats s = kv.stats();
  EXPECT_EQ(s.swap_outs, 1);
  EXPECT_EQ(s.swap_ins, 1);
  EXPECT_EQ(s.blocks_swapped_out, 3);
  EXPECT_EQ(s.blocks_swapped_in, 3);
}

TEST(KvManager, SwapOutOfAFreshCopyTakesTheCopySource) {
  // A copy-on-write recorded this step has not run when the swap-out does (swaps run first):
  // the swap-out must read the copy's source and the copy is dropped.
  BlockPool pool(8);
  KvManager kv(config(4, false, 2), pool);
  ASSERT_TRUE(kv.allocate(1, 0, 6));
  kv.commit(1, iota_tokens(6), 6);
  kv.fork(1, 2);
  ASSERT_TRUE(kv.allocate(2, 6, 7));  // copies block 1 of the parent
  const auto parent = table(kv, 1), child = table(kv, 2);
  ASSERT_NE(parent[1], child[1]);
  ASSERT_TRUE(kv.swap_out(2, 6));
  const KvTransfers t = kv.take_transfers();
  EXPECT_EQ(t.swap_out, (Pairs{{parent[0], 0}, {parent[1], 1}}));
  EXPECT_TRUE(t.copies.empty());
}

TEST(KvManager, SwapOffOrNothingComputedLeavesTheSequenceAsItWas) {
  BlockPool pool(4);
  KvManager off(config(4, false, 0), pool);
  ASSERT_TRUE(off.allocate(1, 0, 8));
  const auto blocks = table(off, 1);
  EXPECT_FALSE(off.swap_out(1, 8)) << "no host slots: the scheduler recomputes";
  EXPECT_EQ(table(off, 1), blocks);
  EXPECT_FALSE(off.swapped(1));

  BlockPool pool2(4);
  KvManager on(config(4, false, 4), pool2);
  ASSERT_TRUE(on.allocate(1, 0, 8));
  EXPECT_FALSE(on.swap_out(1, 0)) << "nothing computed: nothing worth keeping";
  EXPECT_EQ(table(on, 1).size(), 2u);
  EXPECT_EQ(on.n_host_slots_free(), 4);
  EXPECT_TRUE(off.take_transfers().swap_out.empty());
  EXPECT_TRUE(on.take_transfers().swap_out.empty());
}

TEST(KvManager, FreeReleasesEverythingAfterRandomWork) {
  constexpr int32_t kBlocks = 24, kSlots = 12, kBs = 4;
  BlockPool pool(kBlocks);
  KvManager kv(config(kBs, true, kSlots), pool);
  std::mt19937 rng(20240611);
  std::map<SeqId, std::pair<std::vector<int32_t>, int32_t>> seqs;  // tokens, computed
  SeqId next = 1;
  auto check_refcounts = [&](int op) {
    std::map<BlockId, int32_t> owners;
    for (const auto& [id, s] : seqs)
      for (BlockId b : kv.blocks(id)) ++owners[b];
    for (BlockId b = 0; b < kBlocks; ++b)
      ASSERT_EQ(pool.refcount(b), owners.count(b) ? owners[b] : 0) << "block " << b << " after op " << op << " (seed 20240611)";
  };
  for (int op = 0; op < 400; ++op) {
    const int kind = int(rng() % 6);
    if (kind == 0 || seqs.empty()) {  // a new sequence, maybe sharing a prefix with an old one
      const int32_t len = int32_t(1 + rng() % 20);
      const int32_t family = int32_t(rng() % 3);  // sequences of a family share prefixes
      std::vector<int32_t> toks = iota_tokens(len, family * 1000);
      const SeqId id = next++;
      const int32_t cached = kv.match_prefix(id, toks);
      if (kv.allocate(id, cached, int32_t(toks.size()))) {
        kv.commit(id, toks, int32_t(toks.size()));
        seqs[id] = {toks, int32_t(toks.size())};
      } else {
        kv.free(id);
      }
    } else {
      auto it = seqs.begin();
      std::advance(it, ptrdiff_t(rng() % seqs.size()));
      const SeqId id = it->first;
      auto& [toks, computed] = it->second;
      if (kind == 1) {
        kv.free(id);
        seqs.erase(it);
      } else if (kind == 2 && !kv.swapped(id)) {
        const SeqId child = next++;
        kv.fork(id, child);
        seqs[child] = seqs[id];
      } else if (kind == 3 && !kv.swapped(id)) {  // one more token
        if (kv.allocate(id, computed, computed + 1)) {
          toks.push_back(int32_t(rng() % 50));
          ++computed;
          kv.commit(id, toks, computed);
        }
      } else if (kind == 4) {
        if (kv.swapped(id)) (void)kv.swap_in(id, computed, computed + 1);
        else (void)kv.swap_out(id, computed);
      }
    }
    kv.take_transfers();
    check_refcounts(op);
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(kv.stats().swap_outs, 0) << "the run exercised swap";
  EXPECT_GT(kv.stats().cow_copies, 0) << "the run exercised copy-on-write";
  for (const auto& [id, s] : seqs) kv.free(id);
  EXPECT_EQ(pool.n_free(), kBlocks);
  EXPECT_EQ(pool.n_used(), 0);
  EXPECT_EQ(kv.n_host_slots_free(), kSlots);
  EXPECT_EQ(kv.usage().blocks_used, 0);
  EXPECT_EQ(kv.usage().slots_waste, 0);
}

}  // namespace
}  // namespace tessera
