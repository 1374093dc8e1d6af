// RecurrentStatePool: the per-sequence fixed-size state of a hybrid model's recurrent layers
// (Gated DeltaNet, Mamba-2, short convolutions), with checkpoints for prefix caching and for
// rolling back rejected speculative drafts. The recurrent counterpart of KvCache: where an
// attention layer keeps one KV row per token in paged blocks, a recurrent layer keeps one state
// per sequence whatever its length, so a sequence holds one live slot, and a cached prefix is a
// copy of the state as it was at that prefix's end (a checkpoint).
//
// Device memory: one tensor per (layer, state) of shape [n_slots + n_checkpoints, ...state
// shape], allocated kDevice. Row r < n_slots is live slot r (the slot id is its row); the rows
// after it hold checkpoints. A graph sees only the live rows (tensors(): views of shape
// [n_slots, ...]) and indexes one slot per sequence, as attention indexes KvCache blocks.
//
// Every operation that moves state (zero, fork, checkpoint, restore, rollback, swap) is ONE
// batched Device::copy over every layer and state tensor of all the slots it names, queued on the
// device's stream at once and not waited for: calls run on the device in the order they are
// made, before any step submitted after them. Nothing is copied through the host. A call with a
// bad argument queues nothing. Pairs are (source, destination), as in KvCache.
//
// Not thread-safe: the engine thread owns it, as it owns KvCache.
#pragma once
#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/kv/block_pool.h"

namespace tessera {

// A live slot: the row of every state tensor that holds one sequence's state.
using StateSlot = int32_t;

// One state tensor of a recurrent layer, per sequence: a conv tail [conv_kernel - 1, channels],
// a matrix state [heads, dk, dv]. Up to 3 dims (the slot dimension makes kMaxDims).
struct StateTensorSpec {
  std::string name;            // unique within its layer: "conv", "ssm"
  DType dtype = DType::kF32;   // f32, f16 or bf16
  std::vector<int64_t> shape;  // without the slot dimension; every dim positive
};

// The states of one recurrent layer. Attention layers of the model are simply not listed.
struct RecurrentLayerSpec {
  int32_t layer = 0;  // the model's layer index (unique, >= 0)
  std::vector<StateTensorSpec> states;
};

struct RecurrentStateConfig {
  std::vector<RecurrentLayerSpec> layers;
  int32_t n_slots = 0;        // live slots: the most sequences with a state at once
  int32_t n_checkpoints = 0;  // checkpoint rows (prefix-cache entries and draft snapshots); may be 0
};

// A checkpoint row as one holder saw it. A row's generation changes each time it is taken, and an
// evicted or released row holds nothing, so a stale id is an error (never another checkpoint's
// state).
struct CheckpointId {
  int32_t row = -1;         // in [0, n_checkpoints)
  uint32_t generation = 0;
  bool operator==(const CheckpointId&) const = default;
};

// For /metrics. Counters only grow; the rest is a snapshot.
struct RecurrentStateStats {
  int32_t slots_total = 0;
  int32_t slots_used = 0;
  int32_t checkpoints_total = 0;
  int32_t checkpoints_held = 0;     // rows holding a checkpoint (keyed or snapshot)
  int32_t checkpoints_pinned = 0;   // of which pinned (not evictable)
  int64_t lookups = 0;              // lookup() calls
  int64_t hits = 0;                 // of which found a checkpoint
  int64_t misses = 0;               // and of which did not
  int64_t checkpoints_taken = 0;    // state copies into checkpoint rows (keyed and snapshots)
  int64_t checkpoints_skipped = 0;  // keyed checkpoints not taken: every row pinned
  int64_t evictions = 0;            // keyed checkpoints dropped for room (LRU)
  int64_t restores = 0;             // checkpoint -> slot copies (restore and rollback)
  int64_t bytes_per_slot = 0;       // one slot of every layer's states
  int64_t device_bytes = 0;         // all tensors: (n_slots + n_checkpoints) * bytes_per_slot
                                    // (plus a zero region of the largest state's row)
  int64_t swap_bytes = 0;           // reserved host-pinned swap space
};

// The key of the state after a prompt (or any prefix) whose length is not a multiple of the block
// size: |parent| is the hash of the last full block before it (0: none), |tail| the tokens after
// that block. Never equal to a full block's hash_block (|tail| is hashed with a terminator no
// token id takes), so it cannot alias a block-boundary checkpoint. A block boundary's key is the
// hash KvManager registers for that block (hash_block).
BlockHash partial_prefix_key(BlockHash parent, std::span<const int32_t> tail);

class RecurrentStatePool {
 public:
  // Validates |cfg| (InvalidArgument naming the layer and state) and allocates the tensors
  // (ResourceExhausted from the device, naming the tensor).
  static Result<std::unique_ptr<RecurrentStatePool>> create(Device& device, const RecurrentStateConfig& cfg);
  // Waits for the device's queued work first: copies into the pool's tensors may still be queued,
  // and a buffer's memory goes back to the driver as soon as it is destroyed.
  ~RecurrentStatePool();
  RecurrentStatePool(const RecurrentStatePool&) = delete;
  RecurrentStatePool& operator=(const RecurrentStatePool&) = delete;

  const RecurrentStateConfig& config() const { return cfg_; }
  // Every state tensor, in config order (layer by layer, state by state), each a view of the live
  // rows: [n_slots, ...state shape], named "<state>.<layer>" ("ssm.3"). A graph reads and writes
  // row |slot| of each for that slot's sequence.
  std::span<const Tensor> tensors() const { return live_; }
  // Layer |layer|'s state named |name|, or nullptr when there is none.
  const Tensor* find(int32_t layer, std::string_view name) const;
  int64_t bytes_per_slot() const { return bytes_per_slot_; }
  int64_t device_bytes() const { return bytes_per_slot_ * (int64_t(cfg_.n_slots) + cfg_.n_checkpoints); }

  // ---- Live slots (bookkeeping only: nothing is copied) ----

  // A free slot, now live, or nullopt when every slot is live: the scheduler waits for a free
  // (nothing is dropped). Its rows still hold whatever their last owner left: zero() or
  // restore() it before a step reads it.
  std::optional<StateSlot> allocate();
  // Makes live |slot| free. InvalidArgument for an id out of range or a slot not live (a double
  // free).
  Status free(StateSlot slot);
  bool is_live(StateSlot slot) const;
  int32_t n_free() const { return int32_t(free_.size()); }

  // ---- State copies: each ONE batched Device::copy ----

  // Zeroes every state of each live slot in |slots| (a new sequence's start), copied from a zero
  // region on the device. InvalidArgument for a slot not live or named twice.
  Status zero(std::span<const StateSlot> slots);
  // Parallel sampling (n > 1): |n| fresh live slots, each holding a copy of live |src|'s state.
  // All or nothing: nullopt, taking no slot, when fewer than |n| slots are free (wait, as for
  // allocate). InvalidArgument when |src| is not live or n < 1.
  Result<std::optional<std::vector<StateSlot>>> fork(StateSlot src, int32_t n = 1);

  // ---- Checkpoints ----
  // A checkpoint row holds a copy of a slot's state. Keyed checkpoints are the prefix cache:
  // unpinned ones stay in an LRU and the least recently used is evicted when a new one needs a
  // row. Snapshots (no key) belong to whoever took them until released. A pinned checkpoint
  // (pin count > 0; a snapshot always is) is never evicted.

  // Copies each (live slot, key) pair's current state into a checkpoint under |key|: the state
  // after the prefix |key| names (a block hash at a block boundary, or partial_prefix_key). A key
  // already held is only marked recently used: it names the same state. A new key takes a free
  // row, else evicts the least recently used unpinned keyed checkpoint; when every row is pinned
  // (or taken earlier in this call) that pair is skipped (stats: checkpoints_skipped), since a
  // cache entry is never owed. InvalidArgument for a slot not live.
  Status checkpoint(std::span<const std::pair<StateSlot, BlockHash>> pairs);
  Status checkpoint(StateSlot slot, BlockHash key);
  // The checkpoint held under |key|, marked recently used, or nullopt (counted in stats as a
  // hit or a miss). Pin it to keep it past later calls that take checkpoints.
  std::optional<CheckpointId> lookup(BlockHash key);
  // Whether |key| is held; no stats, no LRU change.
  bool contains(BlockHash key) const;
  // Pins (keeps from eviction) or unpins a held checkpoint. Unpinning a snapshot's last pin
  // releases its row; a keyed checkpoint at zero pins goes back to the LRU (most recent end).
  // InvalidArgument for a stale id (evicted or released: the message says which generation the
  // row holds now) or an unpin below zero.
  Status pin(CheckpointId id);
  Status unpin(CheckpointId id);

  // Copies each (checkpoint, live slot) pair's checkpointed state into the slot (a prefix-cache
  // hit). InvalidArgument for a stale checkpoint id (evicted or released since lookup), a slot not
  // live, or a slot named twice.
  Status restore(std::span<const std::pair<CheckpointId, StateSlot>> pairs);

  // Speculative decoding. Before a step verifies drafts, snapshot each drafted slot (its state
  // before the drafts); after verifying, rollback the slots whose drafts were rejected and unpin
  // the snapshots of the others. Snapshots are pinned unkeyed checkpoints. All or nothing:
  // nullopt, taking no row, when fewer rows than |slots| are free or evictable (run the step
  // without drafts). InvalidArgument for a slot not live or named twice.
  Result<std::optional<std::vector<CheckpointId>>> snapshot(std::span<const StateSlot> slots);
  // Restores each (snapshot, slot) pair's snapshot into the slot and releases the snapshot (all
  // its pins). Errors as restore, and InvalidArgument for a keyed checkpoint; nothing is queued
  // or released when any pair is bad.
  Status rollback(std::span<const std::pair<CheckpointId, StateSlot>> pairs);
  Status rollback(CheckpointId snap, StateSlot slot);

  // ---- Swap preemption ----

  // Host memory for swapped-out states: |n_host_slots| slots of bytes_per_slot() each, in
  // host-pinned memory of the device, laid out [host slot][layer][state][row]. Replaces any
  // earlier reservation (and its contents).
  Status reserve_swap(int32_t n_host_slots);
  int32_t swap_slots() const { return swap_slots_; }
  int64_t swap_bytes() const { return swap_ ? int64_t(swap_->size()) : 0; }
  // Copies each (live slot, host slot) pair's states to the host slot, and back with (host slot,
  // live slot) pairs. The caller owns the host slots' bookkeeping (as KvManager does for KV) and
  // frees / allocates the live slots; a slot freed and reused after swap_out is overwritten only
  // by copies queued later, so the swapped-out bytes are safe. InvalidArgument for a live slot
  // not live, a host slot outside the reservation, or a destination named twice.
  Status swap_out(std::span<const std::pair<StateSlot, int32_t>> pairs);
  Status swap_in(std::span<const std::pair<int32_t, StateSlot>> pairs);

  RecurrentStateStats stats() const;

 private:
  struct Row {  // one checkpoint row
    uint32_t generation = 0;
    bool held = false;
    bool keyed = false;
    BlockHash key = 0;
    int32_t pins = 0;
    std::list<int32_t>::iterator lru_pos;  // valid when keyed, held and unpinned
  };
  RecurrentStatePool(Device& device, const RecurrentStateConfig& cfg) : device_(device), cfg_(cfg) {}

  Status check_live(const char* what, StateSlot slot) const;
  Status check_checkpoint(const char* what, CheckpointId id) const;
  // A free checkpoint row, else the least recently used evictable one (evicted), or -1.
  int32_t take_row();
  void drop_row(int32_t row);  // forgets its key and pins; back to the free rows
  CheckpointId hold_row(int32_t row, bool keyed, BlockHash key, int32_t pins);
  // Appends the regions copying every state tensor's row |src_row| to row |dst_row|.
  void add_row_regions(int64_t src_row, int64_t dst_row, std::vector<CopyRegion>* out) const;
  Status queue(const std::vector<CopyRegion>& regions);

  Device& device_;
  RecurrentStateConfig cfg_;
  std::vector<Tensor> full_;  // [n_slots + n_checkpoints, ...]: every row (the copies' view)
  std::vector<Tensor> live_;  // [n_slots, ...]: the same memory, the graph's view
  std::vector<int64_t> row_bytes_;  // per tensor: one row
  int64_t bytes_per_slot_ = 0;
  BufferPtr zeros_;  // max(row_bytes_) zero bytes, kDevice

  std::vector<bool> live_slot_;
  std::vector<StateSlot> free_;  // LIFO; slot 0 first

  std::vector<Row> rows_;
  std::vector<int32_t> free_rows_;                     // LIFO; row 0 first
  std::list<int32_t> lru_;                             // unpinned keyed rows, least recent first
  std::unordered_map<BlockHash, int32_t> by_key_;

  int32_t swap_slots_ = 0;
  BufferPtr swap_;  // [swap_slots][layer][state][row bytes], MemoryKind::kHostPinned

  RecurrentStateStats stats_;  // counters; the snapshot fields are filled by stats()
};

}  // namespace tessera
