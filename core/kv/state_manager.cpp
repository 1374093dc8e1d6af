#include "core/kv/state_manager.h"

#include <algorithm>
#include <numeric>

namespace tessera {

StateManager::StateManager(const StateManagerConfig& cfg, RecurrentStatePool& pool)
    : cfg_(cfg), unit_(std::lcm(std::max(1, cfg.block_size), std::max(1, cfg.align))), pool_(pool) {
  cfg_.block_size = std::max(1, cfg_.block_size);
  if (cfg_.checkpoint_every > 0)  // round up to whole units: a checkpoint's key is a block hash
    cfg_.checkpoint_every = (cfg_.checkpoint_every + unit_ - 1) / unit_ * unit_;
}

void StateManager::check(Status s) {
  if (!s.ok() && status_.ok()) status_ = std::move(s);
}

bool StateManager::is_boundary(SeqId id, int32_t n, int32_t n_prompt) const {
  if (n <= 0 || n % unit_ != 0) return false;
  if (cfg_.checkpoint_every > 0 && n % cfg_.checkpoint_every == 0) return true;
  const auto b = branch_.find(id);
  if (b != branch_.end() && b->second == n) return true;
  return n == (n_prompt - 1) / unit_ * unit_;
}

int32_t StateManager::next_boundary(SeqId id, int32_t n_computed, int32_t n_prompt) const {
  if (!cfg_.prefix_caching) return std::numeric_limits<int32_t>::max();
  int32_t next = std::numeric_limits<int32_t>::max();
  if (cfg_.checkpoint_every > 0) next = (n_computed / cfg_.checkpoint_every + 1) * cfg_.checkpoint_every;
  const int32_t prompt_end = (n_prompt - 1) / unit_ * unit_;
  if (prompt_end > n_computed) next = std::min(next, prompt_end);
  const auto b = branch_.find(id);
  if (b != branch_.end() && b->second > n_computed) next = std::min(next, b->second);
  return next;
}

int32_t StateManager::match(std::span<const BlockHash> chain) const {
  if (!cfg_.prefix_caching) return 0;
  for (size_t i = chain.size(); i > 0; --i)
    if (pool_.contains(chain[i - 1])) return int32_t(i) * cfg_.block_size;
  return 0;
}

void StateManager::note_match(SeqId id, int32_t matched, int32_t kv_match) {
  const int32_t branch = kv_match / unit_ * unit_;
  if (cfg_.prefix_caching && branch > matched) branch_[id] = branch;
  else branch_.erase(id);
}

void StateManager::admit(SeqId id, std::span<const BlockHash> chain) {
  const std::optional<StateSlot> slot = pool_.allocate();
  if (!slot) return check(Internal("recurrent state: admit without a free slot"));
  slots_[id] = *slot;
  std::optional<CheckpointId> cp;
  if (!chain.empty()) cp = pool_.lookup(chain.back());
  if (cp) {
    const std::pair<CheckpointId, StateSlot> pair{*cp, *slot};
    check(pool_.restore({&pair, 1}));
    stats_.restored_tokens += int64_t(chain.size()) * cfg_.block_size;
  } else {
    if (!chain.empty()) check(Internal("recurrent state: the checkpoint matched at admission is gone"));
    check(pool_.zero({&*slot, 1}));
  }
}

void StateManager::computed(SeqId id, std::span<const BlockHash> chain, int32_t n_computed, int32_t n_prompt) {
  if (!cfg_.prefix_caching || !is_boundary(id, n_computed, n_prompt)) return;
  auto it = slots_.find(id);
  const size_t block = size_t(n_computed / cfg_.block_size);
  if (it == slots_.end() || chain.size() < block) return;
  check(pool_.checkpoint(it->second, chain[block - 1]));
}

bool StateManager::snapshot(SeqId id) {
  auto it = slots_.find(id);
  if (it == slots_.end() || snapshots_.count(id)) return false;
  auto snap = pool_.snapshot({&it->second, 1});
  if (!snap.ok()) {
    check(snap.status());
    return false;
  }
  if (!snap->has_value()) return false;
  snapshots_[id] = (**snap)[0];
  return true;
}

bool StateManager::has_snapshot(SeqId id) const { return snapshots_.count(id) != 0; }

void StateManager::release_snapshot(SeqId id) {
  auto it = snapshots_.find(id);
  if (it == snapshots_.end()) return;
  check(pool_.unpin(it->second));  // a snapshot's only pin: its row is released
  snapshots_.erase(it);
}

void StateManager::rollback(SeqId id) {
  auto it = snapshots_.find(id);
  auto slot = slots_.find(id);
  if (it == snapshots_.end() || slot == slots_.end()) return;
  check(pool_.rollback(it->second, slot->second));
  snapshots_.erase(it);
  ++stats_.rollbacks;
}

bool StateManager::fork(SeqId parent, SeqId child) {
  auto it = slots_.find(parent);
  if (it == slots_.end()) return false;
  auto slots = pool_.fork(it->second, 1);
  if (!slots.ok()) {
    check(slots.status());
    return false;
  }
  if (!slots->has_value()) {
    ++stats_.fork_waits;
    return false;
  }
  slots_[child] = (**slots)[0];
  ++stats_.forks;
  return true;
}

bool StateManager::can_swap_out() {
  host_used_.resize(size_t(pool_.swap_slots()), false);
  return std::find(host_used_.begin(), host_used_.end(), false) != host_used_.end();
}

void StateManager::swap_out(SeqId id) {
  auto it = slots_.find(id);
  if (it == slots_.end() || !can_swap_out()) return check(Internal("recurrent state: swap_out without a slot or a host slot"));
  release_snapshot(id);
  const int32_t host = int32_t(std::find(host_used_.begin(), host_used_.end(), false) - host_used_.begin());
  const std::pair<StateSlot, int32_t> pair{it->second, host};
  check(pool_.swap_out({&pair, 1}));
  check(pool_.free(it->second));
  slots_.erase(it);
  host_used_[size_t(host)] = true;
  host_[id] = host;
  ++stats_.swapped_out;
}

void StateManager::swap_in(SeqId id) {
  auto it = host_.find(id);
  const std::optional<StateSlot> slot = it == host_.end() ? std::nullopt : pool_.allocate();
  if (!slot) return check(Internal("recurrent state: swap_in without a swapped state or a free slot"));
  const std::pair<int32_t, StateSlot> pair{it->second, *slot};
  check(pool_.swap_in({&pair, 1}));
  host_used_[size_t(it->second)] = false;
  host_.erase(it);
  slots_[id] = *slot;
  ++stats_.swapped_in;
}

void StateManager::free(SeqId id) {
  release_snapshot(id);
  branch_.erase(id);
  if (auto it = slots_.find(id); it != slots_.end()) {
    check(pool_.free(it->second));
    slots_.erase(it);
  }
  if (auto it = host_.find(id); it != host_.end()) {
    host_used_[size_t(it->second)] = false;
    host_.erase(it);
  }
}

StateSlot StateManager::slot(SeqId id) const {
  auto it = slots_.find(id);
  return it == slots_.end() ? -1 : it->second;
}

StateManagerStats StateManager::stats() const {
  StateManagerStats s = stats_;
  s.pool = pool_.stats();
  s.swapped = int32_t(host_.size());
  return s;
}

}  // namespace tessera
