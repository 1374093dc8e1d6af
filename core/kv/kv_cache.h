// KvCache: the device memory of the paged KV cache (per layer K and V tensors of shape
// [n_blocks, block_size, n_kv_heads, head_dim]) and the BlockPool that hands out its blocks.
// Hybrid memory: when the config names sliding-window layers, those layers' tensors have
// n_window_blocks blocks of their own, handed out by a second pool (window_pool) whose sequences
// keep only the blocks their window still covers (core/kv/hybrid_kv.h), so a window layer holds
// about window + one step's tokens per sequence instead of the whole context.
// Layers may differ in K/V shape (Gemma 4's global layers have wider heads than its window
// layers: layer_kv_heads / layer_head_dim), and a layer may read another's K/V instead of keeping
// its own (Gemma 4's KV-sharing layers: kv_source), so k(l) and v(l) are the source layer's tensors.
// Recurrent layers (hybrid models: Gated DeltaNet, Mamba, short convolutions) keep no K/V here:
// the config's |recurrent| lists them, and the cache owns a RecurrentStatePool
// (core/kv/state_pool.h) of fixed-size per-sequence states for them instead.
// Block copies (copy-on-write of forks, swap-out to host slots, swap-in) are each one batched
// Device::copy over every layer, queued on the device before the step that needs them: no host
// round trip, no per-layer calls.
#pragma once
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/kv/block_pool.h"
#include "core/kv/state_pool.h"

namespace tessera {

struct KvCacheConfig {
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int block_size = 16;
  int n_blocks = 0;
  DType dtype = DType::kF16;
  // Sliding-window layers in a pool of their own: window > 0, window_layers[l] = 1 for each such
  // layer (their attention sees |window| keys), n_window_blocks blocks in their tensors.
  int window = 0;
  int n_window_blocks = 0;
  std::vector<uint8_t> window_layers;  // [n_layers]; empty: none
  // Recurrent layers: their per-sequence states (layers empty: none). These layers get no K/V
  // tensors (k() and v() of them are empty tensors).
  RecurrentStateConfig recurrent;
  // Per-layer K/V shapes, [n_layers] each (empty: every layer n_kv_heads x head_dim).
  std::vector<int> layer_kv_heads, layer_head_dim;
  // [n_layers]: the layer whose K/V layer l reads: l itself, or an earlier layer of the same
  // window group (a KV-sharing layer, which gets no tensors of its own). Empty: each its own.
  std::vector<int> kv_source;
  // [n_layers]: the device that holds layer l's K/V when a model is placed across devices
  // (docs/multi-device.md); empty or null entries: the cache's own device. Block copies and
  // swaps issue one batched copy per device, and each device gets swap space for its layers.
  std::vector<Device*> layer_devices;

  int kv_heads(int layer) const { return layer_kv_heads.empty() ? n_kv_heads : layer_kv_heads[size_t(layer)]; }
  int head_dim_of(int layer) const { return layer_head_dim.empty() ? head_dim : layer_head_dim[size_t(layer)]; }
  int source(int layer) const { return kv_source.empty() ? layer : kv_source[size_t(layer)]; }
};

class KvCache {
 public:
  static Result<std::unique_ptr<KvCache>> create(Device& device, const KvCacheConfig& cfg);

  const KvCacheConfig& config() const { return cfg_; }
  // Layer |layer|'s K/V tensors (a KV-sharing layer's are its source layer's).
  const Tensor& k(int layer) const { return k_[size_t(cfg_.source(layer))]; }
  const Tensor& v(int layer) const { return v_[size_t(cfg_.source(layer))]; }
  BlockPool& pool() { return pool_; }
  const BlockPool& pool() const { return pool_; }
  // The window layers' pool, or nullptr when the cache has no window group.
  BlockPool* window_pool() { return has_window() ? &window_pool_ : nullptr; }
  const BlockPool* window_pool() const { return has_window() ? &window_pool_ : nullptr; }
  bool has_window() const { return cfg_.window > 0 && n_window_layers_ > 0; }
  bool in_window(int layer) const { return has_window() && cfg_.window_layers[size_t(layer)] != 0; }
  int n_window_layers() const { return n_window_layers_; }
  // Whether layer |layer| keeps K/V of its own here (false for a recurrent or a KV-sharing layer).
  bool has_kv(int layer) const { return k_[size_t(layer)].buffer != nullptr; }
  int n_kv_layers() const { return n_kv_layers_; }
  // The recurrent layers' state pool, or nullptr when the model has none.
  RecurrentStatePool* states() { return states_.get(); }
  const RecurrentStatePool* states() const { return states_.get(); }
  int64_t bytes() const;
  // Bytes of one block over every layer of the full-attention (|window| false) or the window
  // group that keeps K/V of its own, K and V together.
  int64_t group_block_bytes(bool window) const;
  // Copies the K/V of each (src, dst) block pair in every layer (copy-on-write of shared partial
  // blocks). Destinations must be distinct and no source may be another pair's destination.
  Status copy_blocks(std::span<const std::pair<BlockId, BlockId>> pairs);
  // The same for the window layers' blocks (their own pool's ids).
  Status copy_window_blocks(std::span<const std::pair<BlockId, BlockId>> pairs);

  // Host memory for swapped-out blocks (swap preemption): |n_slots| slots, each holding one
  // block of every layer's K and V, in host-pinned memory of the device. Replaces any earlier
  // reservation (and its contents).
  Status reserve_swap(int32_t n_slots);
  int32_t swap_slots() const { return swap_slots_; }
  int64_t swap_bytes() const;
  // The device that holds layer |layer|'s K/V (KvCacheConfig::layer_devices, else the cache's).
  Device& layer_device(int layer) const {
    Device* d = cfg_.layer_devices.empty() ? nullptr : cfg_.layer_devices[size_t(layer)];
    return d ? *d : device_;
  }
  // Copies each (block, host slot) pair's block of every full-attention layer into the slot, and
  // back with (host slot, block) pairs (window groups recompute instead of swapping).
  Status swap_out(std::span<const std::pair<BlockId, int32_t>> pairs);
  Status swap_in(std::span<const std::pair<int32_t, BlockId>> pairs);

 private:
  Status check_block(const char* what, BlockId b, int n_blocks) const;
  Status copy_group(std::span<const std::pair<BlockId, BlockId>> pairs, bool window);
  Status check_slot(const char* what, int32_t slot) const;
  int64_t block_bytes(int layer) const;  // one block of layer |layer|'s K (or V)
  // Appends the regions copying block |b| of every layer's K and V to (or from, when
  // |to_host| is false) host slot |slot|.
  // Appends each region's device (the layer's, KvCacheConfig::layer_devices) to |devices|.
  void add_swap_regions(BlockId b, int32_t slot, bool to_host, std::vector<CopyRegion>* out,
                        std::vector<Device*>* devices) const;
  // Queues |regions| as one batched copy per device (|devices|[i] is region i's).
  Status copy_per_device(const std::vector<CopyRegion>& regions, const std::vector<Device*>& devices);
  KvCache(Device& device, const KvCacheConfig& cfg)
      : device_(device), cfg_(cfg), pool_(cfg.n_blocks), window_pool_(cfg.window > 0 ? cfg.n_window_blocks : 0) {}
  Device& device_;
  KvCacheConfig cfg_;
  std::vector<Tensor> k_, v_;
  BlockPool pool_;
  BlockPool window_pool_;
  int n_window_layers_ = 0;
  int n_kv_layers_ = 0;
  std::unique_ptr<RecurrentStatePool> states_;
  int32_t swap_slots_ = 0;
  // Per device holding K/V: [swap_slots][its layers][k, v][block bytes], MemoryKind::kHostPinned.
  struct SwapSpace {
    Device* device = nullptr;
    BufferPtr buffer;
    size_t slot_bytes = 0;
  };
  std::vector<SwapSpace> swap_;
};

}  // namespace tessera
