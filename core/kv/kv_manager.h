// KvManager: the per-sequence bookkeeping of the paged KV cache, over a BlockPool (as vLLM v1's
// kv_cache_manager.py over block_pool.py). It owns each sequence's block table, copy-on-write of
// a shared partial block, the prefix hash chain (match_prefix, and registering full blocks at
// commit), forks, and the host slots of swapped-out sequences. It decides nothing: allocate and
// swap_in return false when the pool is short, and the Scheduler chooses whom to preempt and how.
// The device work its bookkeeping implies (block copies, swaps) is recorded and handed over by
// take_transfers, for the engine to apply before the step.
// Host-only: no device memory here (core/kv/kv_cache.h owns the device tensors and host slots'
// bytes). Not thread-safe: the engine thread owns it, as it owns the pool.
#pragma once
#include <cstdint>
#include <limits>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/kv/block_pool.h"

namespace tessera {

using SeqId = int64_t;  // the scheduler's RequestId

struct KvManagerConfig {
  int32_t block_size = 16;
  // > 0: the blocks of sliding-window layers that see |window| keys (their own included). A
  // sequence's blocks wholly before the window of its next query go back to the pool (the table
  // keeps kReleased in their place), so it holds about window + one step's tokens.
  int32_t window = 0;
  bool prefix_caching = true;
  int32_t host_slots = 0;  // host slots for swapped-out blocks (KvCache::reserve_swap); 0: no swap
};

struct KvManagerStats {
  int64_t prefix_lookups = 0;      // prefix-cache block lookups (BlockPoolStats::lookups)
  int64_t prefix_hits = 0;         // of which found a cached block
  int64_t cow_copies = 0;          // shared partial blocks copied on write
  int64_t swap_outs = 0;           // sequences swapped out (the rest of the preemptions recomputed)
  int64_t swap_ins = 0;            // sequences brought back
  int64_t blocks_swapped_out = 0;
  int64_t blocks_swapped_in = 0;
};

// A snapshot of KV occupancy. Waste: allocated slots that hold no token (the partial last block
// of each sequence; shared blocks are counted once).
struct KvUsage {
  int32_t blocks_total = 0;     // blocks in the pool
  int32_t blocks_used = 0;      // blocks owned by some sequence
  int32_t blocks_cached = 0;    // free blocks that still hold reusable prefix content
  int64_t slots_allocated = 0;  // blocks_used * block_size
  int64_t slots_waste = 0;
};

// The device work of one step's bookkeeping. The engine applies it before the step in this
// order: swap_out (a block swapped out may be handed to another sequence in the same step), then
// swap_in, then copies.
struct KvTransfers {
  std::vector<std::pair<int32_t, int32_t>> swap_out;  // (device block, host slot)
  std::vector<std::pair<int32_t, int32_t>> swap_in;   // (host slot, device block)
  std::vector<std::pair<int32_t, int32_t>> copies;    // (src block, dst block): copy-on-write
};

class KvManager {
 public:
  // A block table entry given back to the pool (window groups): no kernel reads it, because every
  // query of a later step sees only keys within its window.
  static constexpr BlockId kReleased = -1;

  // |pool| must outlive the manager; the manager is its only user while it lives.
  KvManager(const KvManagerConfig& cfg, BlockPool& pool);
  KvManager(const KvManager&) = delete;
  KvManager& operator=(const KvManager&) = delete;

  int32_t block_size() const { return cfg_.block_size; }
  // |id|'s block table: block i holds tokens [i * block_size, (i + 1) * block_size). Empty when
  // |id| is unknown or swapped out. Valid until the next call that changes |id|.
  std::span<const BlockId> blocks(SeqId id) const;
  // |id| is swapped out: its computed blocks wait in host slots.
  bool swapped(SeqId id) const;

  // Prefix caching: |id|, which holds no blocks and has nothing computed, takes the cached
  // blocks of the longest run of leading full blocks of |tokens| found in the pool (never the
  // block of the last token, so a step computes it and has its logits). Returns the tokens they
  // hold: |id|'s computed tokens now (0 with prefix caching off).
  // At most |max_tokens| are matched. In a window group the match needs only the cached blocks
  // the next query's window covers (the ones before it are kReleased): the longest match whose
  // window blocks are all still cached.
  // |lora_id| (0: the base model) is the adapter |id| runs under: it is part of every block hash
  // of |id|'s chain (hash_block), here and at commit, so adapters never share blocks.
  int32_t match_prefix(SeqId id, std::span<const int32_t> tokens,
                       int32_t max_tokens = std::numeric_limits<int32_t>::max(), int32_t lora_id = 0);
  // |id| keeps only the first |n_tokens| tokens of a prefix match (a multiple of block_size; the
  // other group of a hybrid cache matched fewer): the blocks beyond go back to the pool.
  void shorten_match(SeqId id, int32_t n_tokens);
  // Makes |id|'s table cover |n_tokens| tokens, of which the first |n_computed| are computed.
  // The block that takes token |n_computed| is first copied when another sequence shares it
  // (copy-on-write, recorded for the engine); then fresh blocks are appended. Returns false when
  // the pool runs out: the blocks taken so far stay with |id|, so the caller either frees blocks
  // elsewhere (preemption) and calls again, or gives up on |id| (free).
  [[nodiscard]] bool allocate(SeqId id, int32_t n_computed, int32_t n_tokens);
  // A step computed |id|'s tokens up to |n_computed| (of |tokens|): its blocks that became full
  // are registered in the prefix cache under their hash chain.
  void commit(SeqId id, std::span<const int32_t> tokens, int32_t n_computed);
  // Speculative decoding: |id| keeps only the blocks that cover its first |n_tokens| tokens; the
  // blocks beyond (which held rejected draft positions) go back to the pool. Positions past its
  // computed tokens were never registered (commit registers only computed full blocks), so no
  // rejected draft is hashed into the prefix cache or reported as a KV event. O(blocks released):
  // at most ceil(k / block_size) + 1 for a draft of k tokens, nothing copied or rehashed.
  void truncate(SeqId id, int32_t n_tokens);
  // |child| (unknown so far) shares every block of |parent| (each retained once more), its
  // registered hashes and its computed tokens. The first write into a shared partial block
  // copies it (allocate).
  void fork(SeqId parent, SeqId child);
  // Leading table entries of |id| given back to the pool (window groups; 0 otherwise).
  int32_t released(SeqId id) const;
  // The prefix hash chain of |id|'s leading full blocks, as matched (match_prefix) and committed
  // (commit): entry i is the hash of tokens [0, (i + 1) * block_size). Empty without prefix caching.
  std::span<const BlockHash> hashes(SeqId id) const;
  // Releases |id|'s blocks and host slots and forgets it. No-op for an unknown |id|.
  void free(SeqId id);

  // Swap preemption: the blocks holding |id|'s first |n_computed| tokens are copied to host
  // slots (recorded for the engine) and every block of |id| is released (a released block keeps
  // its content until the engine has copied it out: swaps run first). Returns false, changing
  // nothing, when swap is off, nothing is computed, or too few host slots are free (the caller
  // then recomputes: free).
  [[nodiscard]] bool swap_out(SeqId id, int32_t n_computed);
  // Brings swapped-out |id| back: a fresh block per host slot (recorded for the engine; the
  // slots are free again), then grown to |n_tokens| as allocate does. All or nothing: false when
  // the pool is short, leaving |id| swapped out and the pool as it was.
  [[nodiscard]] bool swap_in(SeqId id, int32_t n_computed, int32_t n_tokens);

  // The device work recorded since the last call; clears it.
  KvTransfers take_transfers();

  KvUsage usage() const;
  KvManagerStats stats() const;
  const BlockPool& pool() const { return pool_; }
  int32_t n_host_slots_free() const { return int32_t(host_free_.size()); }

 private:
  struct Table {
    std::vector<BlockId> blocks;
    std::vector<BlockHash> hashes;    // of the leading full blocks registered in the pool
    std::vector<int32_t> host_slots;  // swapped out: the host slots of its first blocks, in order
    int32_t n_computed = 0;           // as the scheduler last told it (usage)
    int32_t n_released = 0;           // leading entries that are kReleased (window groups)
    int32_t lora_id = 0;              // the adapter its K/V is computed under (match_prefix)
  };
  // Window groups: gives back the blocks wholly before the first key a query at |n_computed| or
  // later sees.
  void release_outside_window(Table& t, int32_t n_computed);
  bool copy_on_write(Table& t);
  bool grow(Table& t, int32_t n_tokens);
  void release_blocks(Table& t);

  KvManagerConfig cfg_;
  BlockPool& pool_;
  std::unordered_map<SeqId, Table> tables_;
  std::vector<int32_t> host_free_;  // free host slots
  KvTransfers pending_;             // recorded since the last take_transfers
  KvManagerStats stats_;            // the prefix counters come from the pool
};

}  // namespace tessera
