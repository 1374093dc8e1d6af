#include "core/kv/kv_cache.h"

#include <algorithm>
#include <string>

namespace tessera {

namespace {
// Every dimension, dtype and per-layer list of |cfg| (create's errors).
Status check_config(const KvCacheConfig& cfg) {
  if (cfg.n_layers <= 0 || cfg.n_kv_heads <= 0 || cfg.head_dim <= 0 || cfg.block_size <= 0 || cfg.n_blocks <= 0)
    return InvalidArgument("kv cache: every dimension must be positive (layers " + std::to_string(cfg.n_layers) +
                           ", kv heads " + std::to_string(cfg.n_kv_heads) + ", head dim " + std::to_string(cfg.head_dim) +
                           ", block size " + std::to_string(cfg.block_size) + ", blocks " + std::to_string(cfg.n_blocks) + ")");
  // 8-bit caches keep an f32 scale per (token, kv head) row of head_dim values: one row is
  // written at once (a token's K or V for one head), so its scale is known when it is stored and
  // never changes; a coarser (per block) scale would have to be fixed before the block's later
  // tokens exist.
  const bool quant8 = cfg.dtype == DType::kFP8_E4M3 || cfg.dtype == DType::kINT8_PC;
  if (!dtype_traits(cfg.dtype).is_float && !quant8)
    return InvalidArgument(std::string("kv cache: dtype must be f32, f16, bf16, fp8_e4m3 or int8_pc, got ") +
                           dtype_name(cfg.dtype));
  if ((!cfg.layer_kv_heads.empty() && cfg.layer_kv_heads.size() != size_t(cfg.n_layers)) ||
      (!cfg.layer_head_dim.empty() && cfg.layer_head_dim.size() != size_t(cfg.n_layers)) ||
      (!cfg.kv_source.empty() && cfg.kv_source.size() != size_t(cfg.n_layers)))
    return InvalidArgument("kv cache: per-layer kv heads (" + std::to_string(cfg.layer_kv_heads.size()) +
                           "), head dims (" + std::to_string(cfg.layer_head_dim.size()) + ") and kv sources (" +
                           std::to_string(cfg.kv_source.size()) + ") must each be empty or one per layer (" +
                           std::to_string(cfg.n_layers) + ")");
  for (int l = 0; l < cfg.n_layers; ++l) {
    if (cfg.kv_heads(l) <= 0 || cfg.head_dim_of(l) <= 0)
      return InvalidArgument("kv cache: layer " + std::to_string(l) + ": kv heads " + std::to_string(cfg.kv_heads(l)) +
                             " and head dim " + std::to_string(cfg.head_dim_of(l)) + " must be positive");
    if (const std::string bad = dtype_row_check(cfg.dtype, cfg.head_dim_of(l)); !bad.empty())
      return InvalidArgument("kv cache: layer " + std::to_string(l) + ": head dim " +
                             std::to_string(cfg.head_dim_of(l)) + ": " + bad);
    const int src = cfg.source(l);
    // A source is an earlier layer that keeps its own K/V, of the same shape and window group.
    if (src != l && (src < 0 || src > l || cfg.source(src) != src || cfg.kv_heads(src) != cfg.kv_heads(l) ||
                     cfg.head_dim_of(src) != cfg.head_dim_of(l) ||
                     (cfg.window > 0 && cfg.window_layers.size() == size_t(cfg.n_layers) &&
                      cfg.window_layers[size_t(src)] != cfg.window_layers[size_t(l)])))
      return InvalidArgument("kv cache: layer " + std::to_string(l) + " reads the K/V of layer " + std::to_string(src) +
                             ", which must be an earlier layer keeping its own K/V of the same shape and window group");
  }
  if (!cfg.layer_devices.empty() && cfg.layer_devices.size() != size_t(cfg.n_layers))
    return InvalidArgument("kv cache: " + std::to_string(cfg.layer_devices.size()) + " layer devices for " +
                           std::to_string(cfg.n_layers) + " layers");
  if (cfg.window > 0 && (cfg.n_window_blocks <= 0 || cfg.window_layers.size() != size_t(cfg.n_layers)))
    return InvalidArgument("kv cache: a window group needs window blocks (" + std::to_string(cfg.n_window_blocks) +
                           ") and one window flag per layer (" + std::to_string(cfg.window_layers.size()) + " for " +
                           std::to_string(cfg.n_layers) + " layers)");
  return OkStatus();
}
}  // namespace

Result<std::unique_ptr<KvCache>> KvCache::create(Device& device, const KvCacheConfig& cfg) {
  TS_RETURN_IF_ERROR(check_config(cfg));
  std::unique_ptr<KvCache> kv(new KvCache(device, cfg));
  if (cfg.window > 0)
    for (int l = 0; l < cfg.n_layers; ++l)
      kv->n_window_layers_ += cfg.window_layers[size_t(l)] != 0 && cfg.source(l) == l;
  std::vector<bool> recurrent(size_t(cfg.n_layers), false);
  for (const RecurrentLayerSpec& r : cfg.recurrent.layers) {
    if (r.layer < 0 || r.layer >= cfg.n_layers)
      return InvalidArgument("kv cache: recurrent layer " + std::to_string(r.layer) + " outside [0, " +
                             std::to_string(cfg.n_layers) + ")");
    if (cfg.window > 0 && cfg.window_layers[size_t(r.layer)] != 0)
      return InvalidArgument("kv cache: layer " + std::to_string(r.layer) + " is both recurrent and a window layer");
    recurrent[size_t(r.layer)] = true;
  }
  if (!cfg.recurrent.layers.empty()) {
    auto pool = RecurrentStatePool::create(device, cfg.recurrent);
    if (!pool.ok()) return Status(pool.status().code(), "kv cache: " + pool.status().message());
    kv->states_ = std::move(pool).value();
  }
  for (int l = 0; l < cfg.n_layers; ++l) {
    if (recurrent[size_t(l)] || cfg.source(l) != l) {  // no K/V: an empty tensor keeps the layer's index
      kv->k_.emplace_back();
      kv->v_.emplace_back();
      continue;
    }
    ++kv->n_kv_layers_;
    const int64_t blocks = kv->in_window(l) ? cfg.n_window_blocks : cfg.n_blocks;
    for (auto* vec : {&kv->k_, &kv->v_}) {
      Tensor t = Tensor::make(cfg.dtype, {blocks, cfg.block_size, cfg.kv_heads(l), cfg.head_dim_of(l)});
      t.name = std::string(vec == &kv->k_ ? "k_cache." : "v_cache.") + std::to_string(l);
      Device& on = kv->layer_device(l);
      auto buf = on.alloc(size_t(t.nbytes()));
      if (!buf.ok())
        return Status(buf.status().code(),
                      "kv cache: layer " + std::to_string(l) + " (" + on.info().id + "): " + buf.status().message());
      t.buffer = *buf;
      vec->push_back(std::move(t));
    }
  }
  return kv;
}

int64_t KvCache::bytes() const {
  int64_t b = 0;
  for (const auto* ts : {&k_, &v_})
    for (const Tensor& t : *ts)
      if (t.buffer) b += t.nbytes();  // a recurrent layer's are empty
  return b;
}

}  // namespace tessera

namespace tessera {

int64_t KvCache::block_bytes(int layer) const {
  return Tensor::make(cfg_.dtype, {1, cfg_.block_size, cfg_.kv_heads(layer), cfg_.head_dim_of(layer)}).nbytes();
}

int64_t KvCache::group_block_bytes(bool window) const {
  int64_t b = 0;
  for (int l = 0; l < cfg_.n_layers; ++l)
    if (has_kv(l) && in_window(l) == window) b += 2 * block_bytes(l);
  return b;
}

Status KvCache::check_block(const char* what, BlockId b, int n_blocks) const {
  if (b >= 0 && b < n_blocks) return OkStatus();
  return InvalidArgument(std::string("kv cache: ") + what + ": block " + std::to_string(b) + " outside [0, " +
                         std::to_string(n_blocks) + ")");
}

Status KvCache::check_slot(const char* what, int32_t slot) const {
  if (slot >= 0 && slot < swap_slots_) return OkStatus();
  return InvalidArgument(std::string("kv cache: ") + what + ": host slot " + std::to_string(slot) + " outside [0, " +
                         std::to_string(swap_slots_) + ")");
}

Status KvCache::copy_blocks(std::span<const std::pair<BlockId, BlockId>> pairs) { return copy_group(pairs, false); }

Status KvCache::copy_window_blocks(std::span<const std::pair<BlockId, BlockId>> pairs) {
  if (!pairs.empty() && !has_window()) return InvalidArgument("kv cache: window block copies but the cache has no window group");
  return copy_group(pairs, true);
}

Status KvCache::copy_group(std::span<const std::pair<BlockId, BlockId>> pairs, bool window) {
  if (pairs.empty()) return OkStatus();
  const int n_blocks = window ? cfg_.n_window_blocks : cfg_.n_blocks;
  std::vector<CopyRegion> regions;
  std::vector<Device*> devices;  // each region's
  regions.reserve(pairs.size() * 2 * k_.size());
  for (const auto& [src, dst] : pairs) {
    TS_RETURN_IF_ERROR(check_block("copy source", src, n_blocks));
    TS_RETURN_IF_ERROR(check_block("copy destination", dst, n_blocks));
    for (int l = 0; l < cfg_.n_layers; ++l) {
      if (in_window(l) != window || !has_kv(l)) continue;
      const size_t bytes = size_t(block_bytes(l));
      for (const Tensor* t : {&k_[size_t(l)], &v_[size_t(l)]}) {
        regions.push_back({t->buffer.get(), t->offset + size_t(src) * bytes, t->buffer.get(), t->offset + size_t(dst) * bytes, bytes});
        devices.push_back(&layer_device(l));
      }
    }
  }
  return copy_per_device(regions, devices);
}

Status KvCache::copy_per_device(const std::vector<CopyRegion>& regions, const std::vector<Device*>& devices) {
  if (regions.empty()) return OkStatus();
  Device* first = devices.front();
  if (std::all_of(devices.begin(), devices.end(), [first](const Device* d) { return d == first; }))
    return first->copy(regions).status();
  std::vector<Device*> distinct;
  for (Device* d : devices)
    if (std::find(distinct.begin(), distinct.end(), d) == distinct.end()) distinct.push_back(d);
  std::vector<CopyRegion> part;
  for (Device* d : distinct) {
    part.clear();
    for (size_t i = 0; i < regions.size(); ++i)
      if (devices[i] == d) part.push_back(regions[i]);
    TS_RETURN_IF_ERROR(d->copy(part).status());
  }
  return OkStatus();
}

int64_t KvCache::swap_bytes() const {
  int64_t b = 0;
  for (const SwapSpace& s : swap_) b += int64_t(s.buffer->size());
  return b;
}

Status KvCache::reserve_swap(int32_t n_slots) {
  swap_.clear();
  swap_slots_ = 0;
  if (n_slots <= 0) return OkStatus();
  // A slot holds one block of every full-attention layer (window groups recompute instead), in
  // host-pinned memory of the device that holds the layer.
  std::vector<SwapSpace> spaces;
  for (int l = 0; l < cfg_.n_layers; ++l) {
    if (in_window(l) || !has_kv(l)) continue;
    Device* d = &layer_device(l);
    auto it = std::find_if(spaces.begin(), spaces.end(), [d](const SwapSpace& s) { return s.device == d; });
    if (it == spaces.end()) it = spaces.insert(spaces.end(), SwapSpace{d, nullptr, 0});
    it->slot_bytes += size_t(2 * block_bytes(l));
  }
  for (SwapSpace& s : spaces) {
    const size_t bytes = size_t(n_slots) * s.slot_bytes;
    auto buf = s.device->alloc(bytes, MemoryKind::kHostPinned);
    if (!buf.ok())
      return Status(buf.status().code(), "kv cache: swap space of " + std::to_string(n_slots) + " blocks (" +
                                             std::to_string(bytes) + " bytes on " + s.device->info().id +
                                             "): " + buf.status().message());
    s.buffer = *std::move(buf);
  }
  swap_ = std::move(spaces);
  swap_slots_ = n_slots;
  return OkStatus();
}

void KvCache::add_swap_regions(BlockId b, int32_t slot, bool to_host, std::vector<CopyRegion>* out,
                               std::vector<Device*>* devices) const {
  std::vector<size_t> host(swap_.size());
  for (size_t i = 0; i < swap_.size(); ++i) host[i] = size_t(slot) * swap_[i].slot_bytes;
  for (int l = 0; l < cfg_.n_layers; ++l) {
    if (in_window(l) || !has_kv(l)) continue;  // window groups recompute rather than swap (HybridKv)
    size_t i = 0;
    while (swap_[i].device != &layer_device(l)) ++i;  // reserve_swap made one per device
    const Buffer* space = swap_[i].buffer.get();
    const size_t bytes = size_t(block_bytes(l));
    for (const Tensor* t : {&k_[size_t(l)], &v_[size_t(l)]}) {
      const size_t dev = t->offset + size_t(b) * bytes;
      if (to_host) out->push_back({t->buffer.get(), dev, space, host[i], bytes});
      else out->push_back({space, host[i], t->buffer.get(), dev, bytes});
      devices->push_back(swap_[i].device);
      host[i] += bytes;
    }
  }
}

Status KvCache::swap_out(std::span<const std::pair<BlockId, int32_t>> pairs) {
  if (pairs.empty()) return OkStatus();
  std::vector<CopyRegion> regions;
  std::vector<Device*> devices;
  for (const auto& [block, slot] : pairs) {
    TS_RETURN_IF_ERROR(check_block("swap_out", block, cfg_.n_blocks));
    TS_RETURN_IF_ERROR(check_slot("swap_out", slot));
    add_swap_regions(block, slot, true, &regions, &devices);
  }
  return copy_per_device(regions, devices);
}

Status KvCache::swap_in(std::span<const std::pair<int32_t, BlockId>> pairs) {
  if (pairs.empty()) return OkStatus();
  std::vector<CopyRegion> regions;
  std::vector<Device*> devices;
  for (const auto& [slot, block] : pairs) {
    TS_RETURN_IF_ERROR(check_slot("swap_in", slot));
    TS_RETURN_IF_ERROR(check_block("swap_in", block, cfg_.n_blocks));
    add_swap_regions(block, slot, false, &regions, &devices);
  }
  return copy_per_device(regions, devices);
}

}  // namespace tessera
