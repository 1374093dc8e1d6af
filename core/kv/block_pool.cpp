#include "core/kv/block_pool.h"

#include <algorithm>
#include <cassert>

namespace tessera {

namespace {
uint64_t mix(uint64_t h, uint64_t v) {
  // splitmix64 finaliser over (h ^ v): cheap and well distributed for sequential token ids.
  uint64_t x = h ^ (v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2));
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
}  // namespace

BlockHash hash_block(BlockHash parent, std::span<const int32_t> tokens, int32_t lora_id) {
  uint64_t h = mix(0x7E55E7A000000001ull, parent);
  if (lora_id != 0) h = mix(h, 0x10BA000000000000ull | uint64_t(uint32_t(lora_id)));
  for (int32_t t : tokens) h = mix(h, uint64_t(uint32_t(t)));
  return h == 0 ? 1 : h;  // 0 is reserved for "no parent"
}

BlockPool::BlockPool(int32_t n_blocks) : ref_(size_t(n_blocks), 0), meta_(size_t(n_blocks)) {
  free_.reserve(size_t(n_blocks));
  for (int32_t b = n_blocks - 1; b >= 0; --b) free_.push_back(b);
}

void BlockPool::forget_hash(BlockId b) {
  Meta& m = meta_[size_t(b)];
  if (!m.hashed) return;
  auto it = by_hash_.find(m.hash);
  if (it != by_hash_.end() && it->second == b) by_hash_.erase(it);
  if (sink_) sink_->on_block_removed(m.hash);
  m.hashed = false;
  m.tokens.clear();
}

std::optional<BlockId> BlockPool::allocate() {
  BlockId b;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else if (!lru_.empty()) {
    b = lru_.front();
    lru_.pop_front();
    forget_hash(b);
    ++stats_.evictions;
  } else {
    return std::nullopt;
  }
  ref_[size_t(b)] = 1;
  return b;
}

void BlockPool::retain(BlockId b) {
  assert(ref_[size_t(b)] > 0);
  ++ref_[size_t(b)];
}

void BlockPool::release(BlockId b) {
  assert(ref_[size_t(b)] > 0);
  if (--ref_[size_t(b)] > 0) return;
  Meta& m = meta_[size_t(b)];
  if (m.hashed) {
    lru_.push_back(b);
    m.lru_pos = std::prev(lru_.end());
  } else {
    free_.push_back(b);
  }
}

bool BlockPool::has(BlockHash hash, BlockHash parent, std::span<const int32_t> tokens, int32_t lora_id) const {
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return false;
  const Meta& m = meta_[size_t(it->second)];
  return m.parent == parent && m.lora_id == lora_id &&
         std::equal(tokens.begin(), tokens.end(), m.tokens.begin(), m.tokens.end());
}

std::optional<BlockId> BlockPool::lookup(BlockHash hash, BlockHash parent, std::span<const int32_t> tokens,
                                         int32_t lora_id) {
  ++stats_.lookups;
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return std::nullopt;
  const BlockId b = it->second;
  const Meta& m = meta_[size_t(b)];
  if (m.parent != parent || m.lora_id != lora_id ||
      !std::equal(tokens.begin(), tokens.end(), m.tokens.begin(), m.tokens.end()))
    return std::nullopt;
  if (ref_[size_t(b)] == 0) lru_.erase(m.lru_pos);
  ++ref_[size_t(b)];
  ++stats_.hits;
  return b;
}

void BlockPool::register_full(BlockId b, BlockHash hash, BlockHash parent, std::span<const int32_t> tokens,
                              int32_t lora_id) {
  assert(ref_[size_t(b)] > 0);
  Meta& m = meta_[size_t(b)];
  if (m.hashed || by_hash_.count(hash)) return;
  m.hashed = true;
  m.hash = hash;
  m.parent = parent;
  m.lora_id = lora_id;
  m.tokens.assign(tokens.begin(), tokens.end());
  by_hash_[hash] = b;
  if (sink_) sink_->on_block_stored(hash, parent, tokens, lora_id);
}

}  // namespace tessera
