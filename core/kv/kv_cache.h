// KvCache: the device memory of the paged KV cache (per layer K and V tensors of shape
// [n_blocks, block_size, n_kv_heads, head_dim]) and the BlockPool that hands out its blocks.
#pragma once
#include <vector>

#include "core/device.h"
#include "core/kv/block_pool.h"

namespace tessera {

struct KvCacheConfig {
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int block_size = 16;
  int n_blocks = 0;
  DType dtype = DType::kF16;
};

class KvCache {
 public:
  static Result<std::unique_ptr<KvCache>> create(Device& device, const KvCacheConfig& cfg);

  const KvCacheConfig& config() const { return cfg_; }
  const Tensor& k(int layer) const { return k_[size_t(layer)]; }
  const Tensor& v(int layer) const { return v_[size_t(layer)]; }
  BlockPool& pool() { return pool_; }
  const BlockPool& pool() const { return pool_; }
  int64_t bytes() const;
  // Copies the K/V of block |src| into block |dst| in every layer (copy-on-write of a shared
  // partial block). Goes through host memory with the HAL's download/upload, so it works on
  // every device; it is rare (once per fork) and one block small.
  Status copy_block(BlockId src, BlockId dst);

  // Host memory for swapped-out blocks (swap preemption): |n_slots| slots, each holding one
  // block of every layer's K and V. Replaces any earlier reservation (and its contents).
  void reserve_swap(int32_t n_slots);
  int32_t swap_slots() const { return swap_slots_; }
  int64_t swap_bytes() const { return int64_t(host_.size()); }
  // Copies block |src| of every layer into host slot |slot| (device -> host), and back.
  Status swap_out(BlockId src, int32_t slot);
  Status swap_in(int32_t slot, BlockId dst);

 private:
  Status check_block(const char* what, BlockId b) const;
  Status check_slot(const char* what, int32_t slot) const;
  // One block of |t| as a [1, block_size, kv_heads, head_dim] view.
  Tensor block_view(const Tensor& t, BlockId b) const;
  int64_t block_bytes() const;
  KvCache(Device& device, const KvCacheConfig& cfg) : device_(device), cfg_(cfg), pool_(cfg.n_blocks) {}
  Device& device_;
  KvCacheConfig cfg_;
  std::vector<Tensor> k_, v_;
  BlockPool pool_;
  int32_t swap_slots_ = 0;
  std::vector<char> host_;  // [swap_slots][layer][k, v][block bytes]
};

}  // namespace tessera
