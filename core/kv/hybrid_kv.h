// HybridKv: the block bookkeeping of a KV cache whose layers keep different memory (hybrid
// memory, as llama.cpp's llama-memory-hybrid and vLLM's hybrid KV cache manager): one KvManager
// for the full-attention layers over the cache's main pool, and, when the model has
// sliding-window layers, one over the window pool whose sequences give back the blocks that fell
// out of their window (KvManagerConfig::window). The Scheduler talks to this class as it talked to
// one KvManager; each call goes to every group, and a prefix match is the longest both groups can
// serve. Host-only, engine thread only (as KvManager).
#pragma once
#include <limits>
#include <optional>
#include <span>

#include "core/kv/kv_manager.h"

namespace tessera {

class HybridKv {
 public:
  // |window_pool| (nullable) and |window| > 0 add the sliding-window group.
  HybridKv(const KvManagerConfig& cfg, BlockPool& pool, BlockPool* window_pool, int32_t window);

  bool has_window() const { return window_.has_value(); }
  const KvManager& full() const { return full_; }
  const KvManager* window() const { return window_ ? &*window_ : nullptr; }

  std::span<const BlockId> blocks(SeqId id) const { return full_.blocks(id); }
  std::span<const BlockId> window_blocks(SeqId id) const { return window_ ? window_->blocks(id) : std::span<const BlockId>{}; }
  bool swapped(SeqId id) const { return full_.swapped(id); }
  std::span<const BlockHash> hashes(SeqId id) const { return full_.hashes(id); }

  // KvManager's, in every group; the result is the shorter match, to which the longer is cut.
  int32_t match_prefix(SeqId id, std::span<const int32_t> tokens,
                       int32_t max_tokens = std::numeric_limits<int32_t>::max(), int32_t lora_id = 0);
  // Every group's; false when any pool ran out (blocks taken so far stay, as KvManager's).
  [[nodiscard]] bool allocate(SeqId id, int32_t n_computed, int32_t n_tokens);
  void commit(SeqId id, std::span<const int32_t> tokens, int32_t n_computed);
  void truncate(SeqId id, int32_t n_tokens);
  void fork(SeqId parent, SeqId child);
  void free(SeqId id);
  // Swap preemption of the full group; false (recompute) when the cache has a window group.
  [[nodiscard]] bool swap_out(SeqId id, int32_t n_computed);
  [[nodiscard]] bool swap_in(SeqId id, int32_t n_computed, int32_t n_tokens);

  KvTransfers take_transfers() { return full_.take_transfers(); }
  // The window group's copy-on-write copies (it never swaps).
  KvTransfers take_window_transfers() { return window_ ? window_->take_transfers() : KvTransfers{}; }

 private:
  KvManager full_;
  std::optional<KvManager> window_;
};

}  // namespace tessera
