// BlockPool's event sink (the source of KV events, server/kv_events.h) and the block-hash
// contract that docs/scale-out.md states for routers.
#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "core/kv/block_pool.h"

namespace tessera {
namespace {

struct Recorder : BlockEventSink {
  std::vector<std::string> log;
  void on_block_stored(BlockHash hash, BlockHash parent, std::span<const int32_t> tokens, int32_t lora_id) override {
    log.push_back("stored " + std::to_string(hash) + " parent " + std::to_string(parent) + " n " +
                  std::to_string(tokens.size()) + (lora_id ? " lora " + std::to_string(lora_id) : ""));
  }
  void on_block_removed(BlockHash hash) override { log.push_back("removed " + std::to_string(hash)); }
};

std::vector<int32_t> iota_tokens(int32_t first, int32_t n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}

TEST(BlockPoolEvents, HashMatchesTheDocumentedFunction) {
  // The values of docs/scale-out.md's Python reference for tokens 0..15, then 16..31.
  const BlockHash h0 = hash_block(0, iota_tokens(0, 16));
  EXPECT_EQ(h0, 0x5b06e8dfd74fd0c4ull);
  EXPECT_EQ(hash_block(h0, iota_tokens(16, 16)), 0x064cfcdfe0aa53d4ull);
}

TEST(BlockPoolEvents, AnAdapterHashesEveryBlockApart) {
  // docs/scale-out.md's Python reference with lora_id 3: every block of the chain differs from
  // the base model's, and the base chain is what it was before adapters existed.
  const auto t0 = iota_tokens(0, 16), t1 = iota_tokens(16, 16);
  const BlockHash a0 = hash_block(0, t0, 3);
  EXPECT_EQ(a0, 0x0bc9849399a52ce4ull);
  EXPECT_NE(a0, hash_block(0, t0));
  EXPECT_NE(hash_block(a0, t1, 3), hash_block(a0, t1)) << "the adapter counts in every block, not only the first";
  EXPECT_NE(a0, hash_block(0, t0, 4));

  BlockPool pool(2);
  Recorder rec;
  pool.set_event_sink(&rec);
  const BlockId b = *pool.allocate();
  pool.register_full(b, a0, 0, t0, 3);
  ASSERT_EQ(rec.log.size(), 1u);
  EXPECT_EQ(rec.log[0], "stored " + std::to_string(a0) + " parent 0 n 16 lora 3");
  pool.release(b);
  EXPECT_FALSE(pool.has(a0, 0, t0, 0)) << "the same hash under another adapter is not the same content";
  EXPECT_FALSE(pool.lookup(a0, 0, t0, 4).has_value());
  EXPECT_FALSE(pool.lookup(hash_block(0, t0), 0, t0).has_value()) << "the base model's block was never computed";
  EXPECT_EQ(pool.lookup(a0, 0, t0, 3), b);
  pool.set_event_sink(nullptr);
}

TEST(BlockPoolEvents, StoredOnceWhenRegisteredRemovedWhenReused) {
  BlockPool pool(2);
  Recorder rec;
  pool.set_event_sink(&rec);
  const auto t0 = iota_tokens(0, 16), t1 = iota_tokens(16, 16);
  const BlockHash h0 = hash_block(0, t0), h1 = hash_block(h0, t1);
  const BlockId a = *pool.allocate(), b = *pool.allocate();
  pool.register_full(a, h0, 0, t0);
  pool.register_full(b, h1, h0, t1);
  const BlockId dup = [&] {  // the same content in another block is not cached (nor announced) twice
    pool.release(b);
    const BlockId d = *pool.allocate();  // takes |b| back from the LRU: its content is removed
    pool.register_full(d, h0, 0, t0);
    return d;
  }();
  EXPECT_EQ(dup, b);
  ASSERT_EQ(rec.log.size(), 3u);
  EXPECT_EQ(rec.log[0], "stored " + std::to_string(h0) + " parent 0 n 16");
  EXPECT_EQ(rec.log[1], "stored " + std::to_string(h1) + " parent " + std::to_string(h0) + " n 16");
  EXPECT_EQ(rec.log[2], "removed " + std::to_string(h1));
  // Released cached blocks stay cached: no event until one is reused.
  pool.release(a);
  pool.release(dup);
  EXPECT_EQ(rec.log.size(), 3u);
  pool.set_event_sink(nullptr);
  (void)pool.allocate();
  (void)pool.allocate();
  EXPECT_EQ(rec.log.size(), 3u);
}

}  // namespace
}  // namespace tessera
