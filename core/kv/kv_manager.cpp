#include "core/kv/kv_manager.h"

#include <algorithm>
#include <cassert>

namespace tessera {

KvManager::KvManager(const KvManagerConfig& cfg, BlockPool& pool) : cfg_(cfg), pool_(pool) {
  // Slot 0 is handed out first.
  for (int32_t h = cfg_.host_slots - 1; h >= 0; --h) host_free_.push_back(h);
}

std::span<const BlockId> KvManager::blocks(SeqId id) const {
  auto it = tables_.find(id);
  if (it == tables_.end()) return {};
  return it->second.blocks;
}

bool KvManager::swapped(SeqId id) const {
  auto it = tables_.find(id);
  return it != tables_.end() && !it->second.host_slots.empty();
}

int32_t KvManager::match_prefix(SeqId id, std::span<const int32_t> tokens, int32_t max_tokens, int32_t lora_id) {
  Table& t = tables_[id];
  assert(t.blocks.empty() && t.host_slots.empty());
  t.n_computed = 0;
  t.n_released = 0;
  t.lora_id = lora_id;
  if (!cfg_.prefix_caching || tokens.empty()) return 0;
  // The last token is always computed, so the step has logits to sample from.
  const int32_t bs = cfg_.block_size;
  const int32_t max_blocks = std::min((int32_t(tokens.size()) - 1) / bs, std::max(max_tokens, 0) / bs);
  std::vector<BlockHash> hashes;
  BlockHash parent = 0;
  if (cfg_.window <= 0) {
    for (int32_t i = 0; i < max_blocks; ++i) {
      const auto toks = tokens.subspan(size_t(i) * size_t(bs), size_t(bs));
      const BlockHash h = hash_block(parent, toks, lora_id);
      auto b = pool_.lookup(h, parent, toks, lora_id);
      if (!b) break;
      t.blocks.push_back(*b);
      t.hashes.push_back(h);
      parent = h;
    }
    t.n_computed = int32_t(t.blocks.size()) * bs;
    return t.n_computed;
  }
  // A window group: the chain's hashes, then the longest match m whose window blocks are cached.
  for (int32_t i = 0; i < max_blocks; ++i) {
    hashes.push_back(hash_block(parent, tokens.subspan(size_t(i) * size_t(bs), size_t(bs)), lora_id));
    parent = hashes.back();
  }
  auto block_tokens = [&](int32_t i) { return tokens.subspan(size_t(i) * size_t(bs), size_t(bs)); };
  for (int32_t m = max_blocks; m > 0; --m) {
    const int32_t first = std::max(0, m * bs - cfg_.window + 1) / bs;  // the next query's first key's block
    bool all = true;
    for (int32_t i = first; i < m && all; ++i)
      all = pool_.has(hashes[size_t(i)], i ? hashes[size_t(i - 1)] : 0, block_tokens(i), lora_id);
    if (!all) continue;
    for (int32_t i = 0; i < m; ++i) {
      if (i < first) {
        t.blocks.push_back(kReleased);
      } else {
        auto b = pool_.lookup(hashes[size_t(i)], i ? hashes[size_t(i - 1)] : 0, block_tokens(i), lora_id);
        assert(b);
        t.blocks.push_back(*b);
      }
    }
    t.n_released = first;
    t.hashes.assign(hashes.begin(), hashes.begin() + m);
    t.n_computed = m * bs;
    return t.n_computed;
  }
  return 0;
}

void KvManager::shorten_match(SeqId id, int32_t n_tokens) {
  auto it = tables_.find(id);
  if (it == tables_.end()) return;
  Table& t = it->second;
  const size_t keep = size_t(std::max(n_tokens, 0) / cfg_.block_size);
  while (t.blocks.size() > keep) {
    if (t.blocks.back() != kReleased) pool_.release(t.blocks.back());
    t.blocks.pop_back();
  }
  if (t.hashes.size() > keep) t.hashes.resize(keep);
  t.n_released = std::min(t.n_released, int32_t(keep));
  t.n_computed = std::min(t.n_computed, int32_t(keep) * cfg_.block_size);
}

std::span<const BlockHash> KvManager::hashes(SeqId id) const {
  auto it = tables_.find(id);
  return it == tables_.end() ? std::span<const BlockHash>{} : std::span<const BlockHash>(it->second.hashes);
}

int32_t KvManager::released(SeqId id) const {
  auto it = tables_.find(id);
  return it == tables_.end() ? 0 : it->second.n_released;
}

void KvManager::release_outside_window(Table& t, int32_t n_computed) {
  if (cfg_.window <= 0) return;
  const int32_t first_key = std::max(0, n_computed - cfg_.window + 1);
  const int32_t n = std::min(first_key / cfg_.block_size, int32_t(t.blocks.size()));
  for (; t.n_released < n; ++t.n_released) {
    BlockId& b = t.blocks[size_t(t.n_released)];
    if (b != kReleased) pool_.release(b);
    b = kReleased;
  }
}

bool KvManager::copy_on_write(Table& t) {
  // Only the block holding position n_computed can be shared and still written: full blocks are
  // never written again, and blocks past it are this sequence's own fresh ones.
  const size_t i = size_t(t.n_computed / cfg_.block_size);
  if (t.n_computed % cfg_.block_size == 0 || i >= t.blocks.size() || pool_.refcount(t.blocks[i]) <= 1) return true;
  auto fresh = pool_.allocate();
  if (!fresh) return false;
  pending_.copies.push_back({t.blocks[i], *fresh});
  pool_.release(t.blocks[i]);
  t.blocks[i] = *fresh;
  ++stats_.cow_copies;
  return true;
}

bool KvManager::grow(Table& t, int32_t n_tokens) {
  if (!copy_on_write(t)) return false;
  const size_t need = size_t((n_tokens + cfg_.block_size - 1) / cfg_.block_size);
  while (t.blocks.size() < need) {
    auto b = pool_.allocate();
    if (!b) return false;
    t.blocks.push_back(*b);
  }
  return true;
}

bool KvManager::allocate(SeqId id, int32_t n_computed, int32_t n_tokens) {
  Table& t = tables_[id];
  t.n_computed = n_computed;
  release_outside_window(t, n_computed);
  return grow(t, n_tokens);
}

void KvManager::commit(SeqId id, std::span<const int32_t> tokens, int32_t n_computed) {
  Table& t = tables_[id];
  t.n_computed = n_computed;
  if (!cfg_.prefix_caching) return;
  const int32_t bs = cfg_.block_size;
  for (size_t k = t.hashes.size(); int32_t(k + 1) * bs <= n_computed && k < t.blocks.size(); ++k) {
    const BlockHash parent = k == 0 ? 0 : t.hashes[k - 1];
    const auto toks = tokens.subspan(k * size_t(bs), size_t(bs));
    const BlockHash h = hash_block(parent, toks, t.lora_id);
    if (t.blocks[k] != kReleased) pool_.register_full(t.blocks[k], h, parent, toks, t.lora_id);
    t.hashes.push_back(h);
  }
}

void KvManager::truncate(SeqId id, int32_t n_tokens) {
  auto it = tables_.find(id);
  if (it == tables_.end()) return;
  Table& t = it->second;
  const size_t keep = size_t((std::max(n_tokens, 0) + cfg_.block_size - 1) / cfg_.block_size);
  assert(keep >= t.hashes.size());
  while (t.blocks.size() > keep) {
    if (t.blocks.back() != kReleased) pool_.release(t.blocks.back());
    t.blocks.pop_back();
  }
  t.n_released = std::min(t.n_released, int32_t(t.blocks.size()));
}

void KvManager::fork(SeqId parent, SeqId child) {
  assert(parent != child && !tables_.count(child));
  const Table& p = tables_[parent];
  Table c;
  c.blocks = p.blocks;
  c.hashes = p.hashes;
  c.n_computed = p.n_computed;
  c.n_released = p.n_released;
  c.lora_id = p.lora_id;
  for (BlockId b : c.blocks)
    if (b != kReleased) pool_.retain(b);
  tables_[child] = std::move(c);
}

void KvManager::release_blocks(Table& t) {
  for (BlockId b : t.blocks)
    if (b != kReleased) pool_.release(b);
  t.blocks.clear();
  t.hashes.clear();
  t.n_released = 0;
}

void KvManager::free(SeqId id) {
  auto it = tables_.find(id);
  if (it == tables_.end()) return;
  release_blocks(it->second);
  for (int32_t h : it->second.host_slots) host_free_.push_back(h);
  tables_.erase(it);
}

bool KvManager::swap_out(SeqId id, int32_t n_computed) {
  auto it = tables_.find(id);
  if (it == tables_.end()) return false;
  Table& t = it->second;
  // A window group recomputes instead: its table has given leading blocks back.
  if (cfg_.window > 0) return false;
  // Only blocks holding computed tokens have content worth keeping.
  const size_t n = size_t((n_computed + cfg_.block_size - 1) / cfg_.block_size);
  if (n == 0 || host_free_.size() < n || t.blocks.size() < n) return false;
  for (size_t i = 0; i < n; ++i) {
    t.host_slots.push_back(host_free_.back());
    host_free_.pop_back();
    // A copy-on-write recorded this step into this block has not run yet (copies run after
    // swaps): take the content from the copy's source, which the other sharer still holds.
    BlockId from = t.blocks[i];
    auto& copies = pending_.copies;
    auto cow = std::find_if(copies.begin(), copies.end(), [&](const auto& c) { return c.second == from; });
    if (cow != copies.end()) {
      from = cow->first;
      copies.erase(cow);
    }
    pending_.swap_out.push_back({from, t.host_slots.back()});
  }
  // The fresh blocks it gets back re-register their hashes at commit.
  release_blocks(t);
  t.n_computed = n_computed;
  ++stats_.swap_outs;
  stats_.blocks_swapped_out += int64_t(n);
  return true;
}

bool KvManager::swap_in(SeqId id, int32_t n_computed, int32_t n_tokens) {
  auto it = tables_.find(id);
  if (it == tables_.end()) return false;
  Table& t = it->second;
  assert(t.blocks.empty());
  t.n_computed = n_computed;
  const size_t n = t.host_slots.size();
  for (size_t i = 0; i < n; ++i) {
    auto b = pool_.allocate();
    if (!b) break;
    t.blocks.push_back(*b);
  }
  if (t.blocks.size() < n || !grow(t, n_tokens)) {
    release_blocks(t);  // all or nothing: wait for blocks
    return false;
  }
  for (size_t i = 0; i < n; ++i) {
    pending_.swap_in.push_back({t.host_slots[i], t.blocks[i]});
    host_free_.push_back(t.host_slots[i]);
  }
  t.host_slots.clear();
  ++stats_.swap_ins;
  stats_.blocks_swapped_in += int64_t(n);
  return true;
}

KvTransfers KvManager::take_transfers() {
  KvTransfers out = std::move(pending_);
  pending_ = KvTransfers{};
  return out;
}

KvUsage KvManager::usage() const {
  KvUsage u;
  u.blocks_total = pool_.n_blocks();
  u.blocks_used = pool_.n_used();
  u.blocks_cached = pool_.n_cached_free();
  u.slots_allocated = int64_t(u.blocks_used) * cfg_.block_size;
  // Slots holding a token: each sequence's computed tokens, counting a shared block once. Shared
  // blocks (forks, prefix hits) are full except a fork's partial last block, so the sharers of a
  // block beyond the first add nothing.
  std::vector<int32_t> filled(size_t(pool_.n_blocks()), 0);
  for (const auto& [id, t] : tables_)
    for (size_t i = 0; i < t.blocks.size(); ++i) {
      if (t.blocks[i] == kReleased) continue;
      const int32_t in_block = std::clamp(t.n_computed - int32_t(i) * cfg_.block_size, 0, cfg_.block_size);
      filled[size_t(t.blocks[i])] = std::max(filled[size_t(t.blocks[i])], in_block);
    }
  int64_t used = 0;
  for (int32_t f : filled) used += f;
  u.slots_waste = u.slots_allocated - used;
  return u;
}

KvManagerStats KvManager::stats() const {
  KvManagerStats s = stats_;
  s.prefix_lookups = pool_.stats().lookups;
  s.prefix_hits = pool_.stats().hits;
  return s;
}

}  // namespace tessera
