// BlockPool: the host-side bookkeeping of the paged KV cache. Blocks are reference counted
// (forks share them); full blocks may be hashed for prefix caching (issue: serving core).
// Pure data structure: no device memory here (core/kv/kv_cache.h owns the device tensors).
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

namespace tessera {

using BlockId = int32_t;

class BlockPool {
 public:
  explicit BlockPool(int32_t n_blocks);

  int32_t n_blocks() const { return int32_t(ref_.size()); }
  int32_t n_free() const { return int32_t(free_.size()); }
  int32_t n_used() const { return n_blocks() - n_free(); }

  // A fresh block with refcount 1, or nullopt when none is free (the scheduler then preempts).
  std::optional<BlockId> allocate();
  // Another owner of |b| (a fork).
  void retain(BlockId b);
  // Drops one owner; the block returns to the free list at zero.
  void release(BlockId b);
  int32_t refcount(BlockId b) const { return ref_[size_t(b)]; }

 private:
  std::vector<int32_t> ref_;
  std::vector<BlockId> free_;  // LIFO: recently freed blocks are warm in cache
};

}  // namespace tessera
