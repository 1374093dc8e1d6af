#include "core/kv/block_pool.h"

#include <cassert>

namespace tessera {

BlockPool::BlockPool(int32_t n_blocks) : ref_(size_t(n_blocks), 0) {
  free_.reserve(size_t(n_blocks));
  for (int32_t b = n_blocks - 1; b >= 0; --b) free_.push_back(b);
}

std::optional<BlockId> BlockPool::allocate() {
  if (free_.empty()) return std::nullopt;
  const BlockId b = free_.back();
  free_.pop_back();
  ref_[size_t(b)] = 1;
  return b;
}

void BlockPool::retain(BlockId b) {
  assert(ref_[size_t(b)] > 0);
  ++ref_[size_t(b)];
}

void BlockPool::release(BlockId b) {
  assert(ref_[size_t(b)] > 0);
  if (--ref_[size_t(b)] == 0) free_.push_back(b);
}

}  // namespace tessera
