#include "core/sched/scheduler.h"

#include <algorithm>
#include <span>

namespace tessera {

Scheduler::Scheduler(const SchedulerConfig& cfg, BlockPool& pool)
    : cfg_(cfg), pool_(pool), cost_(cfg.cost_prior, cfg.cost_forgetting) {
  if (cfg_.swap)
    for (int32_t h = cfg_.swap_blocks - 1; h >= 0; --h) host_free_.push_back(h);
}

namespace {
// Priority first, then arrival: the order in which sequences are served.
bool before(const Sequence& a, const Sequence& b) {
  return a.priority != b.priority ? a.priority > b.priority : a.arrival < b.arrival;
}
}  // namespace

void Scheduler::add(std::unique_ptr<Sequence> seq) {
  auto it = std::find_if(waiting_.begin(), waiting_.end(), [&](const auto& w) { return before(*seq, *w); });
  waiting_.insert(it, std::move(seq));
}

Sequence* Scheduler::find(RequestId id) {
  for (auto& s : running_)
    if (s->id == id) return s.get();
  for (auto& s : waiting_)
    if (s->id == id) return s.get();
  return nullptr;
}

bool Scheduler::fork(RequestId parent, std::unique_ptr<Sequence> child) {
  auto it = std::find_if(running_.begin(), running_.end(), [&](const auto& r) { return r->id == parent; });
  if (it == running_.end()) return false;
  const Sequence& p = **it;
  child->tokens = p.tokens;
  child->n_prompt = p.n_prompt;
  child->n_computed = p.n_computed;
  child->blocks = p.blocks;
  child->block_hashes = p.block_hashes;
  child->n_cached = p.n_cached;
  child->admitted = true;
  for (BlockId b : child->blocks) pool_.retain(b);
  running_.push_back(std::move(child));
  return true;
}

RequestId Scheduler::blocked() const {
  if (!running_.empty()) return running_.front()->id;
  return waiting_.empty() ? 0 : waiting_.front()->id;
}

KvUsage Scheduler::kv_usage() const {
  KvUsage u;
  u.blocks_used = pool_.n_used();
  u.blocks_cached = pool_.n_cached_free();
  u.slots_allocated = int64_t(u.blocks_used) * cfg_.block_size;
  // Slots holding a token: each sequence's computed tokens, counting a shared block once. Shared
  // blocks (forks, prefix hits) are full except a fork's partial last block, so the sharers of a
  // block beyond the first add nothing.
  std::vector<int32_t> filled(size_t(pool_.n_blocks()), 0);
  for (const auto& s : running_)
    for (size_t i = 0; i < s->blocks.size(); ++i) {
      const int32_t in_block = std::clamp(s->n_computed - int32_t(i) * cfg_.block_size, 0, cfg_.block_size);
      filled[size_t(s->blocks[i])] = std::max(filled[size_t(s->blocks[i])], in_block);
    }
  int64_t used = 0;
  for (int32_t f : filled) used += f;
  u.slots_waste = u.slots_allocated - used;
  return u;
}

bool Scheduler::copy_on_write(Sequence& s) {
  // Only the block holding position n_computed can be shared and still written: full blocks are
  // never written again, and blocks past it are this sequence's own fresh ones.
  const size_t i = size_t(s.n_computed / cfg_.block_size);
  if (s.n_computed % cfg_.block_size == 0 || i >= s.blocks.size() || pool_.refcount(s.blocks[i]) <= 1) return true;
  auto fresh = pool_.allocate();
  if (!fresh) return false;
  copies_.push_back({s.blocks[i], *fresh});
  pool_.release(s.blocks[i]);
  s.blocks[i] = *fresh;
  ++stats_.cow_copies;
  return true;
}

bool Scheduler::ensure_blocks(Sequence& s, int32_t n_tokens) {
  if (!copy_on_write(s)) return false;
  const size_t need = size_t((n_tokens + cfg_.block_size - 1) / cfg_.block_size);
  while (s.blocks.size() < need) {
    auto b = pool_.allocate();
    if (!b) return false;
    s.blocks.push_back(*b);
  }
  return true;
}

void Scheduler::free_blocks(Sequence& s) {
  for (BlockId b : s.blocks) pool_.release(b);
  s.blocks.clear();
  s.block_hashes.clear();
  for (int32_t h : s.host_slots) host_free_.push_back(h);
  s.host_slots.clear();
}

bool Scheduler::swap_out(Sequence& s) {
  // Only blocks holding computed tokens have content worth keeping.
  const size_t n = size_t((s.n_computed + cfg_.block_size - 1) / cfg_.block_size);
  if (!cfg_.swap || n == 0 || host_free_.size() < n) return false;
  for (size_t i = 0; i < n; ++i) {
    s.host_slots.push_back(host_free_.back());
    host_free_.pop_back();
    // A copy-on-write planned this step into this block has not run yet (copies run after
    // swaps): take the content from the copy's source, which the other sharer still holds.
    BlockId from = s.blocks[i];
    auto cow = std::find_if(copies_.begin(), copies_.end(), [&](const auto& c) { return c.second == from; });
    if (cow != copies_.end()) {
      from = cow->first;
      copies_.erase(cow);
    }
    swap_out_.push_back({from, s.host_slots.back()});
  }
  // Released blocks keep their content until the engine has copied it out (swaps run first).
  for (BlockId b : s.blocks) pool_.release(b);
  s.blocks.clear();
  s.block_hashes.clear();  // the fresh blocks it gets back re-register their hashes at commit
  ++stats_.swap_outs;
  stats_.blocks_swapped_out += int64_t(n);
  return true;
}

bool Scheduler::swap_in(Sequence& s, int32_t n_new) {
  const size_t n = s.host_slots.size();
  for (size_t i = 0; i < n; ++i) {
    auto b = pool_.allocate();
    if (!b) break;
    s.blocks.push_back(*b);
  }
  if (s.blocks.size() < n || !ensure_blocks(s, s.n_computed + n_new)) {
    for (BlockId b : s.blocks) pool_.release(b);  // all or nothing: wait for blocks
    s.blocks.clear();
    return false;
  }
  for (size_t i = 0; i < n; ++i) {
    swap_in_.push_back({s.host_slots[i], s.blocks[i]});
    host_free_.push_back(s.host_slots[i]);
  }
  s.host_slots.clear();
  ++stats_.swap_ins;
  stats_.blocks_swapped_in += int64_t(n);
  return true;
}

void Scheduler::match_prefix(Sequence& s) {
  if (!cfg_.prefix_caching || !s.blocks.empty()) return;
  // The last token is always computed, so the step has logits to sample from.
  const int32_t bs = cfg_.block_size;
  const int32_t max_blocks = (int32_t(s.tokens.size()) - 1) / bs;
  BlockHash parent = 0;
  for (int32_t i = 0; i < max_blocks; ++i) {
    const std::span<const int32_t> toks(s.tokens.data() + size_t(i) * size_t(bs), size_t(bs));
    const BlockHash h = hash_block(parent, toks);
    auto b = pool_.lookup(h, parent, toks);
    if (!b) break;
    s.blocks.push_back(*b);
    s.block_hashes.push_back(h);
    parent = h;
  }
  s.n_computed = int32_t(s.blocks.size()) * bs;
}

void Scheduler::register_full_blocks(Sequence& s) {
  if (!cfg_.prefix_caching) return;
  const int32_t bs = cfg_.block_size;
  for (size_t k = s.block_hashes.size(); int32_t(k + 1) * bs <= s.n_computed && k < s.blocks.size(); ++k) {
    const BlockHash parent = k == 0 ? 0 : s.block_hashes[k - 1];
    const std::span<const int32_t> toks(s.tokens.data() + k * size_t(bs), size_t(bs));
    const BlockHash h = hash_block(parent, toks);
    pool_.register_full(s.blocks[k], h, parent, toks);
    s.block_hashes.push_back(h);
  }
}

void Scheduler::preempt(Sequence& s) {
  // Swap keeps n_computed (its K/V wait in host memory). Recompute drops the cache and keeps the
  // tokens (prompt + generated) to re-prefill; its full blocks stay in the prefix cache, so the
  // re-prefill often finds them again.
  if (!swap_out(s)) {
    free_blocks(s);
    s.n_computed = 0;
  }
  ++s.n_preemptions;
  ++stats_.preemptions;
  auto it = std::find_if(running_.begin(), running_.end(), [&](const auto& r) { return r.get() == &s; });
  std::unique_ptr<Sequence> owned = std::move(*it);
  running_.erase(it);
  add(std::move(owned));
}

Sequence* Scheduler::pick_victim(const Sequence* keep) {
  Sequence* victim = nullptr;
  for (auto& r : running_)
    if (r.get() != keep && (!victim || before(*victim, *r))) victim = r.get();
  return victim;
}

void Scheduler::schedule_running(std::vector<ScheduledSeq>* out, int32_t* budget) {
  std::sort(running_.begin(), running_.end(), [](const auto& a, const auto& b) { return before(*a, *b); });
  for (size_t i = 0; i < running_.size() && *budget > 0 && int32_t(out->size()) < cfg_.max_seqs; ++i) {
    Sequence& s = *running_[i];
    const int32_t n = chunk_size(s, *budget);
    if (n <= 0) continue;
    bool ok = ensure_blocks(s, s.n_computed + n);
    while (!ok) {
      Sequence* victim = pick_victim(&s);
      if (!victim || before(*victim, s)) break;  // never preempt someone more important
      // Remove the victim from this step if it was already scheduled.
      for (auto it = out->begin(); it != out->end(); ++it)
        if (it->seq == victim) { *budget += it->n_new; out->erase(it); break; }
      const size_t vi = size_t(std::find_if(running_.begin(), running_.end(), [&](auto& r) { return r.get() == victim; }) - running_.begin());
      preempt(*victim);
      if (vi < i) --i;
      ok = ensure_blocks(s, s.n_computed + n);
    }
    if (!ok) {  // nobody to take blocks from: s itself waits (recompute) unless it is alone
      if (running_.size() > 1) { preempt(s); --i; }
      continue;
    }
    take(out, budget, s, n);
  }
}

void Scheduler::admit_waiting(std::vector<ScheduledSeq>* out, int32_t* budget) {
  while (!waiting_.empty() && *budget > 0 && int32_t(out->size()) < cfg_.max_seqs) {
    Sequence& s = *waiting_.front();
    // The step is already at its cost limit: no room for another prefill chunk.
    if (prefill_in_step_ && limit_ms_ > 0 && cost_.max_chunk(limit_shape_, 0, limit_ms_, 1) == 0) break;
    if (!s.host_slots.empty()) {  // swapped out: its blocks come back from host memory
      const int32_t n = chunk_size(s, *budget);
      if (n <= 0 || !swap_in(s, n)) break;
      running_.push_back(std::move(waiting_.front()));
      waiting_.pop_front();
      take(out, budget, s, n);
      continue;
    }
    match_prefix(s);
    const int32_t n = chunk_size(s, *budget);
    if (n <= 0 || !ensure_blocks(s, s.n_computed + n)) {
      free_blocks(s);  // no partial admission: wait for blocks
      s.n_computed = 0;
      break;
    }
    if (!s.admitted) {
      s.admitted = true;
      s.n_cached = s.n_computed;
    }
    stats_.admitted_tokens += int64_t(s.tokens.size());
    stats_.cached_tokens += s.n_computed;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    take(out, budget, s, n);
  }
}

void Scheduler::take(std::vector<ScheduledSeq>* out, int32_t* budget, Sequence& s, int32_t n) {
  const bool samples = s.n_computed + n == int32_t(s.tokens.size());
  out->push_back({&s, n, samples});
  *budget -= n;
  if (s.n_pending() > 1) {  // a prefill chunk (decodes are in limit_shape_ already)
    limit_shape_.add(s.n_computed, n, samples);
    prefill_in_step_ = true;
  }
}

void Scheduler::start_cost_limit() {
  limit_ms_ = 0;
  limit_shape_ = StepShape{};
  prefill_in_step_ = false;
  probe_ = false;
  if (cfg_.itl_factor <= 0 && cfg_.max_step_ms <= 0) return;
  // The decodes this step will carry (running sequences with one pending token).
  int32_t n = 0;
  for (const auto& r : running_)
    if (r->n_pending() == 1 && n < cfg_.max_seqs) {
      limit_shape_.add(r->n_computed, 1, true);
      ++n;
    }
  if (n == 0) return;  // nobody waits on tokens: prefill may use the whole budget
  limit_ms_ = cfg_.itl_factor > 0 ? cfg_.itl_factor * cost_.predict_ms(limit_shape_) : cfg_.max_step_ms;
  if (cfg_.max_step_ms > 0) limit_ms_ = std::min(limit_ms_, cfg_.max_step_ms);
  probe_ = cfg_.cost_probe_every > 0 && ++steps_since_decode_only_ >= cfg_.cost_probe_every;
}

int32_t Scheduler::chunk_size(const Sequence& s, int32_t budget) {
  const int32_t want = std::min(s.n_pending(), budget);
  if (want <= 1 || limit_ms_ <= 0) return want;
  if (probe_) return 0;
  // The fit is trusted up to twice the largest step it has seen (on a fast device the chunk
  // doubles each step until the limit or the budget holds it, never a blind jump to the budget).
  // Likewise a chunk at most doubles the previous step's prefill tokens: a step whose chunk
  // leaps far beyond recent ones rests on extrapolation the recent fit has not checked.
  const int32_t grow = 2 * std::max(prev_prefill_tokens_, cfg_.min_prefill_chunk);
  const int32_t trusted = std::min(std::max(2 * cost_.max_tokens_observed() - limit_shape_.n_tokens, 0), grow);
  int32_t n = cost_.max_chunk(limit_shape_, s.n_computed, limit_ms_, std::min(want, trusted));
  if (n < want) ++stats_.cost_limited_chunks;
  // The floor keeps a prefill progressing however slow a step is (one chunk per step).
  if (n < cfg_.min_prefill_chunk && !prefill_in_step_) n = std::min(want, std::max(cfg_.min_prefill_chunk, 1));
  return n;
}

void Scheduler::observe(double ms) {
  if (planned_.n_tokens == 0) return;
  cost_.observe(planned_, ms);
  stats_.last_step_ms = ms;
  stats_.cost = cost_.coefficients();
}

std::vector<ScheduledSeq> Scheduler::plan(StepPlan* plan) {
  std::vector<ScheduledSeq> out;
  int32_t budget = cfg_.max_batch_tokens;
  copies_.clear();
  swap_out_.clear();
  swap_in_.clear();
  if (stats_.last_prefill_tokens > 0) prev_prefill_tokens_ = stats_.last_prefill_tokens;
  start_cost_limit();
  const int64_t preemptions_before = stats_.preemptions;
  schedule_running(&out, &budget);  // decodes (and unfinished prefill chunks) first
  // Then prefill chunks of waiting sequences, unless this step had to preempt: the pool is short,
  // and admitting (often the sequence just preempted, into its own freed blocks) only to
  // preempt again next step is the recompute thrash (as vLLM's scheduler, admit nothing then).
  if (stats_.preemptions == preemptions_before) admit_waiting(&out, &budget);
  fill(plan, out);
  plan->block_copies = std::move(copies_);
  copies_.clear();
  plan->swap_out = std::move(swap_out_);
  plan->swap_in = std::move(swap_in_);
  swap_out_.clear();
  swap_in_.clear();
  if (!out.empty()) ++stats_.steps;
  if (out.empty()) return out;  // an idle plan keeps the latest step's figures
  planned_ = StepShape{};
  stats_.last_prefill_tokens = 0;
  for (const auto& sc : out) {
    planned_.add(sc.seq->n_computed, sc.n_new, sc.samples);
    if (sc.seq->n_pending() > 1) stats_.last_prefill_tokens += sc.n_new;
  }
  if (limit_ms_ > 0 && stats_.last_prefill_tokens == 0) steps_since_decode_only_ = 0;
  stats_.last_step_tokens = planned_.n_tokens;
  stats_.last_limit_ms = limit_ms_;
  stats_.last_predicted_ms = cost_.predict_ms(planned_);
  stats_.cost = cost_.coefficients();
  return out;
}

void Scheduler::fill(StepPlan* plan, const std::vector<ScheduledSeq>& scheduled) const {
  *plan = StepPlan{};
  plan->query_start.push_back(0);
  int32_t max_blocks = 1;
  for (const auto& sc : scheduled) max_blocks = std::max(max_blocks, int32_t(sc.seq->blocks.size()));
  plan->max_blocks = max_blocks;
  for (const auto& sc : scheduled) {
    const Sequence& s = *sc.seq;
    for (int32_t i = 0; i < sc.n_new; ++i) {
      const int32_t pos = s.n_computed + i;
      plan->tokens.push_back(s.tokens[size_t(pos)]);
      plan->positions.push_back(pos);
      plan->slot_mapping.push_back(s.blocks[size_t(pos / cfg_.block_size)] * cfg_.block_size + pos % cfg_.block_size);
    }
    plan->query_start.push_back(plan->query_start.back() + sc.n_new);
    plan->seq_lens.push_back(s.n_computed + sc.n_new);
    for (int32_t b = 0; b < max_blocks; ++b)
      plan->block_tables.push_back(b < int32_t(s.blocks.size()) ? s.blocks[size_t(b)] : 0);
    if (sc.samples) plan->logit_rows.push_back(plan->query_start.back() - 1);
  }
}

void Scheduler::commit(const std::vector<ScheduledSeq>& scheduled) {
  for (const auto& sc : scheduled) {
    sc.seq->n_computed += sc.n_new;
    register_full_blocks(*sc.seq);
  }
}

void Scheduler::finish(RequestId id) {
  for (auto it = running_.begin(); it != running_.end(); ++it)
    if ((*it)->id == id) { free_blocks(**it); running_.erase(it); return; }
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it)
    if ((*it)->id == id) { free_blocks(**it); waiting_.erase(it); return; }
}

}  // namespace tessera
