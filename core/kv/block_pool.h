// BlockPool: the host-side bookkeeping of the paged KV cache. Blocks are reference counted
// (forks share them). Full blocks may be registered under a content hash (the hash of the
// parent block's hash and the block's token ids) for prefix caching: a block whose last owner
// releases it keeps its contents and goes to an LRU list, where a later sequence with the same
// prefix finds it (lookup) and an allocation that finds no plain free block evicts the oldest.
// Pure data structure: no device memory here (core/kv/kv_cache.h owns the device tensors).
// Not thread-safe: the engine thread owns it.
#pragma once
#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace tessera {

using BlockId = int32_t;
using BlockHash = uint64_t;

// The hash of a full block of |tokens| following the block hashed |parent| (0 for the first),
// computed under LoRA adapter |lora_id| (0: the base model). The adapter is mixed into every
// block's hash (as vLLM's extra keys), so K/V computed under different adapters never share a
// block, and a base-model chain hashes as it did before adapters existed.
BlockHash hash_block(BlockHash parent, std::span<const int32_t> tokens, int32_t lora_id = 0);

// Told about the prefix cache's content as it changes (KV events for a router: server/kv_events.h).
// Called on the thread that owns the pool, inside its calls: an implementation must not block
// and must not call back into the pool. Only hashed (full, registered) blocks are reported.
class BlockEventSink {
 public:
  virtual ~BlockEventSink() = default;
  // The cache now holds |tokens| (one full block) after the block hashed |parent| (0: none),
  // computed under adapter |lora_id| (0: the base model), under |hash| = hash_block(parent,
  // tokens, lora_id).
  virtual void on_block_stored(BlockHash hash, BlockHash parent, std::span<const int32_t> tokens, int32_t lora_id) = 0;
  // The content hashed |hash| left the cache (its block was taken for other content).
  virtual void on_block_removed(BlockHash hash) = 0;
};

struct BlockPoolStats {
  int64_t lookups = 0;    // prefix-cache block lookups
  int64_t hits = 0;       // of which found a cached block
  int64_t evictions = 0;  // cached blocks reused for other content
};

class BlockPool {
 public:
  explicit BlockPool(int32_t n_blocks);

  int32_t n_blocks() const { return int32_t(ref_.size()); }
  // Blocks an allocation can take: plain free blocks plus evictable cached ones.
  int32_t n_free() const { return int32_t(free_.size() + lru_.size()); }
  int32_t n_used() const { return n_blocks() - n_free(); }
  int32_t n_cached_free() const { return int32_t(lru_.size()); }

  // A block with refcount 1 and no hash, or nullopt when none is free (the scheduler then
  // preempts). Takes a plain free block first, else evicts the least recently used cached one.
  std::optional<BlockId> allocate();
  // Another owner of |b| (a fork).
  void retain(BlockId b);
  // Drops one owner. At zero a hashed block goes to the LRU tail, a plain one to the free list.
  void release(BlockId b);
  int32_t refcount(BlockId b) const { return ref_[size_t(b)]; }

  // The cached block holding |tokens| after |parent| under adapter |lora_id|, retained for the
  // caller, or nullopt.
  std::optional<BlockId> lookup(BlockHash hash, BlockHash parent, std::span<const int32_t> tokens, int32_t lora_id = 0);
  // Whether lookup would find that content (no counters change, nothing is retained).
  bool has(BlockHash hash, BlockHash parent, std::span<const int32_t> tokens, int32_t lora_id = 0) const;
  // Records that |b| (owned, full) holds |tokens| after |parent| under |lora_id|. When another
  // block already holds that content, |b| stays unhashed (duplicates are not cached twice).
  void register_full(BlockId b, BlockHash hash, BlockHash parent, std::span<const int32_t> tokens, int32_t lora_id = 0);
  bool is_cached(BlockId b) const { return meta_[size_t(b)].hashed; }

  const BlockPoolStats& stats() const { return stats_; }
  // Reports cache changes to |sink| from now on (nullptr: none). |sink| must outlive the pool
  // or be unset first; set it before another thread starts driving the pool.
  void set_event_sink(BlockEventSink* sink) { sink_ = sink; }

 private:
  struct Meta {
    bool hashed = false;
    BlockHash hash = 0, parent = 0;
    int32_t lora_id = 0;
    std::vector<int32_t>
        tokens;  // checked on lookup (with parent and lora_id), so a hash collision cannot alias content
    std::list<BlockId>::iterator lru_pos;
  };
  void forget_hash(BlockId b);

  std::vector<int32_t> ref_;
  std::vector<Meta> meta_;
  std::vector<BlockId> free_;  // LIFO: recently freed blocks are warm in cache
  std::list<BlockId> lru_;     // cached blocks with refcount 0, least recently used first
  std::unordered_map<BlockHash, BlockId> by_hash_;
  BlockPoolStats stats_;
  BlockEventSink* sink_ = nullptr;
};

}  // namespace tessera
