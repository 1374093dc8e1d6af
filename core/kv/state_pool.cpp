#include "core/kv/state_pool.h"

#include <algorithm>
#include <cassert>
#include <set>

namespace tessera {

namespace {

using SlotList = std::optional<std::vector<StateSlot>>;
using CheckpointList = std::optional<std::vector<CheckpointId>>;

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

Status check_state(const RecurrentLayerSpec& layer, const StateTensorSpec& st) {
  const std::string where = "recurrent state: layer " + std::to_string(layer.layer) + " state '" + st.name + "': ";
  if (st.name.empty()) return InvalidArgument("recurrent state: layer " + std::to_string(layer.layer) + ": a state has no name");
  if (st.dtype != DType::kF32 && st.dtype != DType::kF16 && st.dtype != DType::kBF16)
    return InvalidArgument(where + "dtype must be f32, f16 or bf16, got " + dtype_name(st.dtype));
  if (st.shape.empty() || int(st.shape.size()) >= kMaxDims)
    return InvalidArgument(where + "shape " + shape_text(st.shape) + " must have 1 to " + std::to_string(kMaxDims - 1) +
                           " dims (the slot dimension comes first)");
  for (int64_t d : st.shape)
    if (d <= 0) return InvalidArgument(where + "shape " + shape_text(st.shape) + " has a dim <= 0");
  if (const std::string bad = dtype_row_check(st.dtype, st.shape.back()); !bad.empty())
    return InvalidArgument(where + bad);
  return OkStatus();
}

Status check_config(const RecurrentStateConfig& cfg) {
  if (cfg.n_slots <= 0 || cfg.n_checkpoints < 0)
    return InvalidArgument("recurrent state: need n_slots > 0 and n_checkpoints >= 0, got " + std::to_string(cfg.n_slots) +
                           " and " + std::to_string(cfg.n_checkpoints));
  if (cfg.layers.empty()) return InvalidArgument("recurrent state: no recurrent layers");
  std::set<int32_t> layers;
  for (const auto& layer : cfg.layers) {
    if (layer.layer < 0 || !layers.insert(layer.layer).second)
      return InvalidArgument("recurrent state: layer " + std::to_string(layer.layer) + " is negative or listed twice");
    if (layer.states.empty())
      return InvalidArgument("recurrent state: layer " + std::to_string(layer.layer) + " has no states");
    std::set<std::string> names;
    for (const auto& st : layer.states) {
      TS_RETURN_IF_ERROR(check_state(layer, st));
      if (!names.insert(st.name).second)
        return InvalidArgument("recurrent state: layer " + std::to_string(layer.layer) + ": state '" + st.name +
                               "' is listed twice");
    }
  }
  return OkStatus();
}

// Whether |ids| holds a value twice; |bound| is one past the largest value (all in range).
template <class T>
bool has_duplicate(const std::vector<T>& ids, T bound) {
  std::vector<bool> seen(size_t(bound), false);
  for (T v : ids) {
    if (seen[size_t(v)]) return true;
    seen[size_t(v)] = true;
  }
  return false;
}

}  // namespace

BlockHash partial_prefix_key(BlockHash parent, std::span<const int32_t> tail) {
  // Token ids are never negative, so a tail ending in -1 hashes differently from any block.
  std::vector<int32_t> t(tail.begin(), tail.end());
  t.push_back(-1);
  return hash_block(parent, t);
}

Result<std::unique_ptr<RecurrentStatePool>> RecurrentStatePool::create(Device& device, const RecurrentStateConfig& cfg) {
  TS_RETURN_IF_ERROR(check_config(cfg));
  std::unique_ptr<RecurrentStatePool> p(new RecurrentStatePool(device, cfg));
  const int64_t rows = int64_t(cfg.n_slots) + cfg.n_checkpoints;
  int64_t max_row = 0;
  for (const auto& layer : cfg.layers) {
    for (const auto& st : layer.states) {
      std::vector<int64_t> shape = {rows};
      shape.insert(shape.end(), st.shape.begin(), st.shape.end());
      Tensor full = Tensor::make(st.dtype, int(shape.size()), shape.data(), st.name + "." + std::to_string(layer.layer));
      auto buf = device.alloc(size_t(full.nbytes()));
      if (!buf.ok())
        return Status(buf.status().code(), "recurrent state: tensor " + full.name + " " + full.shape_string() + " (" +
                                               std::to_string(full.nbytes()) + " bytes): " + buf.status().message());
      full.buffer = *buf;
      shape[0] = cfg.n_slots;
      Tensor live = Tensor::make(st.dtype, int(shape.size()), shape.data(), full.name);
      live.buffer = full.buffer;
      const int64_t row = full.nbytes() / rows;
      p->row_bytes_.push_back(row);
      p->bytes_per_slot_ += row;
      max_row = std::max(max_row, row);
      p->full_.push_back(std::move(full));
      p->live_.push_back(std::move(live));
    }
  }
  // The source of zero(): one row of the largest state, read by every region of the copy.
  auto zeros = device.alloc(size_t(max_row));
  if (!zeros.ok())
    return Status(zeros.status().code(), "recurrent state: zero region: " + zeros.status().message());
  Tensor z = Tensor::make(DType::kI8, {max_row});
  z.buffer = *zeros;
  const std::vector<uint8_t> host_zeros(size_t(max_row), 0);
  TS_RETURN_IF_ERROR(device.upload(z, host_zeros.data(), host_zeros.size()));
  p->zeros_ = *zeros;

  p->live_slot_.assign(size_t(cfg.n_slots), false);
  for (StateSlot s = cfg.n_slots - 1; s >= 0; --s) p->free_.push_back(s);
  p->rows_.resize(size_t(cfg.n_checkpoints));
  for (int32_t r = cfg.n_checkpoints - 1; r >= 0; --r) p->free_rows_.push_back(r);
  return p;
}

RecurrentStatePool::~RecurrentStatePool() {
  // NOTE: nothing to report to from a destructor; a device error here also fails the caller's
  // next wait.
  (void)device_.synchronize();
}

const Tensor* RecurrentStatePool::find(int32_t layer, std::string_view name) const {
  size_t i = 0;
  for (const auto& l : cfg_.layers)
    for (const auto& st : l.states) {
      if (l.layer == layer && st.name == name) return &live_[i];
      ++i;
    }
  return nullptr;
}

// ---- Live slots ----

std::optional<StateSlot> RecurrentStatePool::allocate() {
  if (free_.empty()) return std::nullopt;
  const StateSlot s = free_.back();
  free_.pop_back();
  live_slot_[size_t(s)] = true;
  return s;
}

bool RecurrentStatePool::is_live(StateSlot slot) const {
  return slot >= 0 && slot < cfg_.n_slots && live_slot_[size_t(slot)];
}

Status RecurrentStatePool::check_live(const char* what, StateSlot slot) const {
  if (slot < 0 || slot >= cfg_.n_slots)
    return InvalidArgument(std::string("recurrent state: ") + what + ": slot " + std::to_string(slot) + " outside [0, " +
                           std::to_string(cfg_.n_slots) + ")");
  if (!live_slot_[size_t(slot)])
    return InvalidArgument(std::string("recurrent state: ") + what + ": slot " + std::to_string(slot) +
                           " is not live (free, or never allocated)");
  return OkStatus();
}

Status RecurrentStatePool::free(StateSlot slot) {
  if (slot >= 0 && slot < cfg_.n_slots && !live_slot_[size_t(slot)])
    return InvalidArgument("recurrent state: free: slot " + std::to_string(slot) + " is already free (a double free)");
  TS_RETURN_IF_ERROR(check_live("free", slot));
  live_slot_[size_t(slot)] = false;
  free_.push_back(slot);
  return OkStatus();
}

// ---- Copies ----

void RecurrentStatePool::add_row_regions(int64_t src_row, int64_t dst_row, std::vector<CopyRegion>* out) const {
  for (size_t i = 0; i < full_.size(); ++i) {
    const Tensor& t = full_[i];
    const size_t rb = size_t(row_bytes_[i]);
    out->push_back({t.buffer.get(), t.offset + size_t(src_row) * rb, t.buffer.get(), t.offset + size_t(dst_row) * rb, rb});
  }
}

Status RecurrentStatePool::queue(const std::vector<CopyRegion>& regions) {
  if (regions.empty()) return OkStatus();
  auto e = device_.copy(regions);
  return e.ok() ? OkStatus() : e.status().with_context("recurrent state: ");
}

Status RecurrentStatePool::zero(std::span<const StateSlot> slots) {
  std::vector<StateSlot> dst(slots.begin(), slots.end());
  for (StateSlot s : dst) TS_RETURN_IF_ERROR(check_live("zero", s));
  if (has_duplicate(dst, cfg_.n_slots)) return InvalidArgument("recurrent state: zero: a slot is named twice");
  std::vector<CopyRegion> regions;
  regions.reserve(dst.size() * full_.size());
  for (StateSlot s : dst)
    for (size_t i = 0; i < full_.size(); ++i) {
      const Tensor& t = full_[i];
      const size_t rb = size_t(row_bytes_[i]);
      regions.push_back({zeros_.get(), 0, t.buffer.get(), t.offset + size_t(s) * rb, rb});
    }
  return queue(regions);
}

Result<SlotList> RecurrentStatePool::fork(StateSlot src, int32_t n) {
  TS_RETURN_IF_ERROR(check_live("fork", src));
  if (n < 1) return InvalidArgument("recurrent state: fork: n must be >= 1, got " + std::to_string(n));
  if (int32_t(free_.size()) < n) return SlotList{};
  std::vector<StateSlot> children;
  std::vector<CopyRegion> regions;
  for (int32_t i = 0; i < n; ++i) {
    children.push_back(*allocate());
    add_row_regions(src, children.back(), &regions);
  }
  if (Status s = queue(regions); !s.ok()) {
    for (StateSlot c : children) (void)free(c);
    return s;
  }
  return SlotList(std::move(children));
}

// ---- Checkpoints ----

Status RecurrentStatePool::check_checkpoint(const char* what, CheckpointId id) const {
  const std::string head = std::string("recurrent state: ") + what + ": checkpoint row " + std::to_string(id.row);
  if (id.row < 0 || id.row >= cfg_.n_checkpoints)
    return InvalidArgument(head + " outside [0, " + std::to_string(cfg_.n_checkpoints) + ")");
  const Row& r = rows_[size_t(id.row)];
  if (r.held && r.generation == id.generation) return OkStatus();
  return InvalidArgument(head + " generation " + std::to_string(id.generation) +
                         " is no longer held: it was evicted or released (" +
                         (r.held ? "the row now holds generation " + std::to_string(r.generation) : std::string("the row is free")) +
                         ")");
}

int32_t RecurrentStatePool::take_row() {
  if (!free_rows_.empty()) {
    const int32_t row = free_rows_.back();
    free_rows_.pop_back();
    return row;
  }
  if (lru_.empty()) return -1;
  const int32_t row = lru_.front();
  Row& r = rows_[size_t(row)];
  lru_.pop_front();
  by_key_.erase(r.key);
  r.held = r.keyed = false;
  ++stats_.evictions;
  return row;
}

void RecurrentStatePool::drop_row(int32_t row) {
  Row& r = rows_[size_t(row)];
  assert(r.held);
  if (r.keyed) {
    by_key_.erase(r.key);
    if (r.pins == 0) lru_.erase(r.lru_pos);
  }
  r.held = r.keyed = false;
  r.pins = 0;
  free_rows_.push_back(row);
}

CheckpointId RecurrentStatePool::hold_row(int32_t row, bool keyed, BlockHash key, int32_t pins) {
  Row& r = rows_[size_t(row)];
  ++r.generation;  // every holding is new: ids of earlier ones are stale
  r.held = true;
  r.keyed = keyed;
  r.key = key;
  r.pins = pins;
  if (keyed) {
    by_key_[key] = row;
    if (pins == 0) r.lru_pos = lru_.insert(lru_.end(), row);
  }
  ++stats_.checkpoints_taken;
  return {row, r.generation};
}

Status RecurrentStatePool::checkpoint(std::span<const std::pair<StateSlot, BlockHash>> pairs) {
  for (const auto& [slot, key] : pairs) TS_RETURN_IF_ERROR(check_live("checkpoint", slot));
  std::vector<CopyRegion> regions;
  // Rows taken by this call stay pinned until it ends, so a later pair cannot evict one (two
  // regions of one copy writing the same row).
  std::vector<int32_t> taken;
  for (const auto& [slot, key] : pairs) {
    if (auto it = by_key_.find(key); it != by_key_.end()) {
      Row& r = rows_[size_t(it->second)];
      if (r.pins == 0) lru_.splice(lru_.end(), lru_, r.lru_pos);
      continue;
    }
    const int32_t row = take_row();
    if (row < 0) {
      ++stats_.checkpoints_skipped;
      continue;
    }
    hold_row(row, true, key, 1);
    taken.push_back(row);
    add_row_regions(slot, int64_t(cfg_.n_slots) + row, &regions);
  }
  const Status s = queue(regions);
  for (int32_t row : taken) {
    if (!s.ok()) {  // nothing was queued: the rows hold nothing
      drop_row(row);
      --stats_.checkpoints_taken;
      continue;
    }
    Row& r = rows_[size_t(row)];
    r.pins = 0;
    r.lru_pos = lru_.insert(lru_.end(), row);
  }
  return s;
}

Status RecurrentStatePool::checkpoint(StateSlot slot, BlockHash key) {
  const std::pair<StateSlot, BlockHash> one[] = {{slot, key}};
  return checkpoint(one);
}

std::optional<CheckpointId> RecurrentStatePool::lookup(BlockHash key) {
  ++stats_.lookups;
  auto it = by_key_.find(key);
  if (it == by_key_.end()) {
    ++stats_.misses;
    return std::nullopt;
  }
  ++stats_.hits;
  Row& r = rows_[size_t(it->second)];
  if (r.pins == 0) lru_.splice(lru_.end(), lru_, r.lru_pos);
  return CheckpointId{it->second, r.generation};
}

bool RecurrentStatePool::contains(BlockHash key) const { return by_key_.count(key) != 0; }

Status RecurrentStatePool::pin(CheckpointId id) {
  TS_RETURN_IF_ERROR(check_checkpoint("pin", id));
  Row& r = rows_[size_t(id.row)];
  if (r.keyed && r.pins == 0) lru_.erase(r.lru_pos);
  ++r.pins;
  return OkStatus();
}

Status RecurrentStatePool::unpin(CheckpointId id) {
  TS_RETURN_IF_ERROR(check_checkpoint("unpin", id));
  Row& r = rows_[size_t(id.row)];
  if (r.pins == 0)
    return InvalidArgument("recurrent state: unpin: checkpoint row " + std::to_string(id.row) + " is not pinned");
  if (--r.pins > 0) return OkStatus();
  if (r.keyed) r.lru_pos = lru_.insert(lru_.end(), id.row);
  else drop_row(id.row);  // a snapshot nobody holds
  return OkStatus();
}

Status RecurrentStatePool::restore(std::span<const std::pair<CheckpointId, StateSlot>> pairs) {
  std::vector<StateSlot> dst;
  for (const auto& [id, slot] : pairs) {
    TS_RETURN_IF_ERROR(check_checkpoint("restore", id));
    TS_RETURN_IF_ERROR(check_live("restore", slot));
    dst.push_back(slot);
  }
  if (has_duplicate(dst, cfg_.n_slots)) return InvalidArgument("recurrent state: restore: a slot is named twice");
  std::vector<CopyRegion> regions;
  for (const auto& [id, slot] : pairs) {
    add_row_regions(int64_t(cfg_.n_slots) + id.row, slot, &regions);
    Row& r = rows_[size_t(id.row)];
    if (r.keyed && r.pins == 0) lru_.splice(lru_.end(), lru_, r.lru_pos);
  }
  TS_RETURN_IF_ERROR(queue(regions));
  stats_.restores += int64_t(pairs.size());
  return OkStatus();
}

Result<CheckpointList> RecurrentStatePool::snapshot(std::span<const StateSlot> slots) {
  std::vector<StateSlot> src(slots.begin(), slots.end());
  for (StateSlot s : src) TS_RETURN_IF_ERROR(check_live("snapshot", s));
  if (has_duplicate(src, cfg_.n_slots)) return InvalidArgument("recurrent state: snapshot: a slot is named twice");
  if (free_rows_.size() + lru_.size() < src.size()) return CheckpointList{};
  std::vector<CheckpointId> ids;
  std::vector<CopyRegion> regions;
  for (StateSlot s : src) {
    const int32_t row = take_row();
    assert(row >= 0);
    ids.push_back(hold_row(row, false, 0, 1));
    add_row_regions(s, int64_t(cfg_.n_slots) + row, &regions);
  }
  if (Status st = queue(regions); !st.ok()) {
    for (const CheckpointId& id : ids) drop_row(id.row);
    stats_.checkpoints_taken -= int64_t(ids.size());
    return st;
  }
  return CheckpointList(std::move(ids));
}

Status RecurrentStatePool::rollback(std::span<const std::pair<CheckpointId, StateSlot>> pairs) {
  std::vector<int32_t> snaps;
  for (const auto& [id, slot] : pairs) {
    TS_RETURN_IF_ERROR(check_checkpoint("rollback", id));
    if (rows_[size_t(id.row)].keyed)
      return InvalidArgument("recurrent state: rollback: checkpoint row " + std::to_string(id.row) +
                             " is a prefix-cache entry, not a snapshot (restore it instead)");
    snaps.push_back(id.row);
  }
  if (has_duplicate(snaps, cfg_.n_checkpoints))
    return InvalidArgument("recurrent state: rollback: a snapshot is named twice");
  TS_RETURN_IF_ERROR(restore(pairs));
  for (int32_t row : snaps) drop_row(row);
  return OkStatus();
}

Status RecurrentStatePool::rollback(CheckpointId snap, StateSlot slot) {
  const std::pair<CheckpointId, StateSlot> one[] = {{snap, slot}};
  return rollback(one);
}

// ---- Swap ----

Status RecurrentStatePool::reserve_swap(int32_t n_host_slots) {
  swap_.reset();
  swap_slots_ = 0;
  if (n_host_slots <= 0) return OkStatus();
  const size_t bytes = size_t(n_host_slots) * size_t(bytes_per_slot_);
  auto buf = device_.alloc(bytes, MemoryKind::kHostPinned);
  if (!buf.ok())
    return Status(buf.status().code(), "recurrent state: swap space of " + std::to_string(n_host_slots) + " slots (" +
                                           std::to_string(bytes) + " bytes): " + buf.status().message());
  swap_ = *buf;
  swap_slots_ = n_host_slots;
  return OkStatus();
}

namespace {
Status check_host_slot(const char* what, int32_t h, int32_t n) {
  if (h >= 0 && h < n) return OkStatus();
  return InvalidArgument(std::string("recurrent state: ") + what + ": host slot " + std::to_string(h) + " outside [0, " +
                         std::to_string(n) + ")");
}
}  // namespace

Status RecurrentStatePool::swap_out(std::span<const std::pair<StateSlot, int32_t>> pairs) {
  std::vector<int32_t> hosts;
  for (const auto& [slot, host] : pairs) {
    TS_RETURN_IF_ERROR(check_live("swap_out", slot));
    TS_RETURN_IF_ERROR(check_host_slot("swap_out", host, swap_slots_));
    hosts.push_back(host);
  }
  if (has_duplicate(hosts, swap_slots_)) return InvalidArgument("recurrent state: swap_out: a host slot is named twice");
  std::vector<CopyRegion> regions;
  for (const auto& [slot, host] : pairs) {
    size_t h = size_t(host) * size_t(bytes_per_slot_);
    for (size_t i = 0; i < full_.size(); ++i) {
      const size_t rb = size_t(row_bytes_[i]);
      regions.push_back({full_[i].buffer.get(), full_[i].offset + size_t(slot) * rb, swap_.get(), h, rb});
      h += rb;
    }
  }
  return queue(regions);
}

Status RecurrentStatePool::swap_in(std::span<const std::pair<int32_t, StateSlot>> pairs) {
  std::vector<StateSlot> dst;
  for (const auto& [host, slot] : pairs) {
    TS_RETURN_IF_ERROR(check_host_slot("swap_in", host, swap_slots_));
    TS_RETURN_IF_ERROR(check_live("swap_in", slot));
    dst.push_back(slot);
  }
  if (has_duplicate(dst, cfg_.n_slots)) return InvalidArgument("recurrent state: swap_in: a slot is named twice");
  std::vector<CopyRegion> regions;
  for (const auto& [host, slot] : pairs) {
    size_t h = size_t(host) * size_t(bytes_per_slot_);
    for (size_t i = 0; i < full_.size(); ++i) {
      const size_t rb = size_t(row_bytes_[i]);
      regions.push_back({swap_.get(), h, full_[i].buffer.get(), full_[i].offset + size_t(slot) * rb, rb});
      h += rb;
    }
  }
  return queue(regions);
}

RecurrentStateStats RecurrentStatePool::stats() const {
  RecurrentStateStats s = stats_;
  s.slots_total = cfg_.n_slots;
  s.slots_used = cfg_.n_slots - int32_t(free_.size());
  s.checkpoints_total = cfg_.n_checkpoints;
  s.checkpoints_held = cfg_.n_checkpoints - int32_t(free_rows_.size());
  s.checkpoints_pinned = s.checkpoints_held - int32_t(lru_.size());
  s.bytes_per_slot = bytes_per_slot_;
  s.device_bytes = device_bytes();
  s.swap_bytes = swap_bytes();
  return s;
}

}  // namespace tessera
