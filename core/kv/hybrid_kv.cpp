#include "core/kv/hybrid_kv.h"

#include <algorithm>

namespace tessera {

namespace {
KvManagerConfig window_config(KvManagerConfig c, int32_t window) {
  c.window = window;
  c.host_slots = 0;  // window groups recompute rather than swap
  return c;
}
}  // namespace

HybridKv::HybridKv(const KvManagerConfig& cfg, BlockPool& pool, BlockPool* window_pool, int32_t window) : full_(cfg, pool) {
  if (window_pool && window > 0) window_.emplace(window_config(cfg, window), *window_pool);
}

int32_t HybridKv::match_prefix(SeqId id, std::span<const int32_t> tokens, int32_t max_tokens, int32_t lora_id) {
  const int32_t n = full_.match_prefix(id, tokens, max_tokens, lora_id);
  if (!window_) return n;
  const int32_t w = window_->match_prefix(id, tokens, n, lora_id);
  if (w < n) full_.shorten_match(id, w);
  return std::min(n, w);
}

bool HybridKv::allocate(SeqId id, int32_t n_computed, int32_t n_tokens) {
  if (!full_.allocate(id, n_computed, n_tokens)) return false;
  return !window_ || window_->allocate(id, n_computed, n_tokens);
}

void HybridKv::commit(SeqId id, std::span<const int32_t> tokens, int32_t n_computed) {
  full_.commit(id, tokens, n_computed);
  if (window_) window_->commit(id, tokens, n_computed);
}

void HybridKv::truncate(SeqId id, int32_t n_tokens) {
  full_.truncate(id, n_tokens);
  if (window_) window_->truncate(id, n_tokens);
}

void HybridKv::fork(SeqId parent, SeqId child) {
  full_.fork(parent, child);
  if (window_) window_->fork(parent, child);
}

void HybridKv::free(SeqId id) {
  full_.free(id);
  if (window_) window_->free(id);
}

bool HybridKv::swap_out(SeqId id, int32_t n_computed) { return !window_ && full_.swap_out(id, n_computed); }

bool HybridKv::swap_in(SeqId id, int32_t n_computed, int32_t n_tokens) { return full_.swap_in(id, n_computed, n_tokens); }

}  // namespace tessera
