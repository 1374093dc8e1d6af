// StateManager: which sequence holds which recurrent state, the recurrent counterpart of
// KvManager. It keeps the per-sequence bookkeeping over a RecurrentStatePool (core/kv/state_pool.h)
// and decides nothing the scheduler does not ask for:
//   - a live slot per running sequence (a fixed cost: a sequence is admitted only with one free);
//   - checkpoints at block boundaries, keyed by the KV prefix cache's block hash of the block that
//     ends there (the chain KvManager::hashes holds for the sequence; nothing is hashed twice), so a prefix-cache hit restores the state as it was after that prefix. A step
//     leaves one state per sequence (after its last token), so checkpoints exist only where a
//     step ends: the scheduler ends prefill chunks at the boundaries next_boundary() names (every
//     |checkpoint_every| tokens, the last block boundary of the prompt, the most an identical
//     prompt can reuse since its last token is always computed, and the branch point: where a
//     prompt whose KV matched further than any checkpoint parts from the cached one, so the next
//     prompt sharing that prefix (a system prompt) restores the state there);
//   - a snapshot before a step verifies draft tokens; when any is rejected the slot goes back to
//     it and the sequence recomputes its accepted tokens (a recurrent state cannot drop tokens);
//   - forks (copy of the parent's slot) and swap preemption (to host slots and back).
// Every state copy is one batched device copy, queued at once in call order (the pool's rule):
// the scheduler calls this while it plans a step, after the previous step was collected and
// before the next is submitted, so each copy sees the state the previous step left.
// Host-only bookkeeping plus queued copies; engine thread only.
#pragma once
#include <cstdint>
#include <limits>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/kv/kv_manager.h"
#include "core/kv/state_pool.h"

namespace tessera {

struct StateManagerConfig {
  int32_t block_size = 16;
  // Tokens between checkpoints (rounded up to a multiple of the unit); 0: only the prompt's end.
  int32_t checkpoint_every = 512;
  // Every boundary is a multiple of unit() = lcm(block_size, align) (SchedulerConfig::state_align).
  int32_t align = 1;
  bool prefix_caching = true;  // false: no checkpoints are taken or looked up
};

// For /metrics: the pool's own counters and the manager's.
struct StateManagerStats {
  RecurrentStateStats pool;
  int64_t restored_tokens = 0;  // prompt tokens whose state came from a checkpoint
  int64_t rollbacks = 0;        // speculative steps undone (a draft token rejected)
  int64_t forks = 0;            // children given a copy of their parent's state
  int64_t fork_waits = 0;       // children that waited for a slot and recomputed instead
  int64_t swapped_out = 0;      // states copied to host slots (swap preemption)
  int64_t swapped_in = 0;
  int32_t swapped = 0;          // states in host slots now
};

class StateManager {
 public:
  StateManager(const StateManagerConfig& cfg, RecurrentStatePool& pool);

  // A live slot is free (admission needs one; none free: the sequence waits).
  bool can_admit() const { return pool_.n_free() > 0; }
  // The longest prefix covered by |chain| (a sequence's block hashes, KvManager::hashes) whose
  // state is checkpointed, in tokens (a multiple of the block size; 0: none). Counts nothing;
  // admit() restores it.
  int32_t match(std::span<const BlockHash> chain) const;
  // Gives |id| a live slot holding the state after the blocks of |chain|: the checkpoint match()
  // found for all of them, or zeros when |chain| is empty. Needs can_admit().
  void admit(SeqId id, std::span<const BlockHash> chain);
  // Before admission: the KV cache matched |id|'s prompt up to |kv_match| tokens but the state
  // only up to |matched|; the block boundary at or below kv_match becomes one of |id|'s
  // boundaries (the branch point), so its state there is checkpointed.
  void note_match(SeqId id, int32_t matched, int32_t kv_match);
  // Boundaries are multiples of this many tokens (block_size and align both divide it).
  int32_t unit() const { return unit_; }
  // The first checkpoint boundary of |id| after |n_computed| for an |n_prompt|-token prompt
  // (prefill chunks end there), or INT32_MAX when none is left.
  int32_t next_boundary(SeqId id, int32_t n_computed, int32_t n_prompt) const;
  // After a step that computed |id|'s tokens up to |n_computed| (with no draft in its state and
  // its full blocks' hashes in |chain|): checkpoints the state when n_computed is a boundary.
  void computed(SeqId id, std::span<const BlockHash> chain, int32_t n_computed, int32_t n_prompt);

  // Speculative decoding: a snapshot before a step with drafts (false when no checkpoint row can
  // be had: run that step without drafts), then release or rollback once they are verified.
  bool snapshot(SeqId id);
  bool has_snapshot(SeqId id) const;
  void release_snapshot(SeqId id);
  void rollback(SeqId id);

  // |child| gets a live slot holding a copy of |parent|'s state; false when no slot is free.
  bool fork(SeqId parent, SeqId child);

  // Swap preemption: a host slot is free; |id|'s state goes there and its live slot is freed.
  bool can_swap_out();
  void swap_out(SeqId id);
  bool swapped(SeqId id) const { return host_.count(id) != 0; }
  // A swapped-out |id| gets a live slot back with its state (needs can_admit()).
  void swap_in(SeqId id);

  // Frees whatever |id| holds: its live slot, snapshot or host slot. No-op for an unknown id.
  void free(SeqId id);
  // |id|'s live slot, or -1.
  StateSlot slot(SeqId id) const;
  // The first error of a state copy (a bug: the manager passes only valid ids); OK otherwise.
  const Status& status() const { return status_; }
  StateManagerStats stats() const;
  const RecurrentStatePool& pool() const { return pool_; }

 private:
  bool is_boundary(SeqId id, int32_t n, int32_t n_prompt) const;
  void check(Status s);

  StateManagerConfig cfg_;
  int32_t unit_;  // lcm(block_size, align)
  RecurrentStatePool& pool_;
  std::unordered_map<SeqId, StateSlot> slots_;
  std::unordered_map<SeqId, CheckpointId> snapshots_;
  std::unordered_map<SeqId, int32_t> host_;  // swapped out: its host slot
  std::unordered_map<SeqId, int32_t> branch_;  // a sequence's branch point (a block boundary)
  std::vector<bool> host_used_;               // [pool_.swap_slots()]
  StateManagerStats stats_;
  Status status_;
};

}  // namespace tessera
