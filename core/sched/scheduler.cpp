#include "core/sched/scheduler.h"

#include <algorithm>
#include <limits>

namespace tessera {

namespace {
KvManagerConfig kv_config(const SchedulerConfig& cfg) {
  KvManagerConfig k;
  k.block_size = cfg.block_size;
  k.prefix_caching = cfg.prefix_caching;
  k.host_slots = cfg.swap ? cfg.swap_blocks : 0;
  return k;
}

StepCostPolicyConfig cost_config(const SchedulerConfig& cfg) {
  StepCostPolicyConfig c;
  c.itl_factor = cfg.itl_factor;
  c.max_step_ms = cfg.max_step_ms;
  c.min_prefill_chunk = cfg.min_prefill_chunk;
  c.prior = cfg.cost_prior;
  c.forgetting = cfg.cost_forgetting;
  c.probe_every = cfg.cost_probe_every;
  return c;
}

// Priority first, then arrival: the order in which sequences are served.
bool before(const Sequence& a, const Sequence& b) {
  return a.priority != b.priority ? a.priority > b.priority : a.arrival < b.arrival;
}
}  // namespace

Scheduler::Scheduler(const SchedulerConfig& cfg, BlockPool& pool, BlockPool* window_pool, int32_t window,
                     RecurrentStatePool* states)
    : cfg_(cfg), kv_(kv_config(cfg), pool, window_pool, window), cost_(cost_config(cfg)) {
  if (states) {
    StateManagerConfig sc;
    sc.block_size = cfg.block_size;
    sc.checkpoint_every = cfg.state_checkpoint_every;
    sc.align = cfg.state_align;
    sc.prefix_caching = cfg.prefix_caching;
    states_.emplace(sc, *states);
  }
}

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
  child->lora = p.lora;
  child->n_computed = p.n_computed;
  child->n_cached = p.n_cached;
  child->admitted = true;
  if (states_ && !states_->fork(p.id, child->id)) {
    // No state slot is free: the child waits for one and recomputes its prompt (usually from the
    // checkpoint at the prompt's last block boundary, through the prefix cache).
    child->n_computed = 0;
    child->n_cached = 0;
    child->admitted = false;
    add(std::move(child));
    return true;
  }
  kv_.fork(p.id, child->id);
  running_.push_back(std::move(child));
  return true;
}

void Scheduler::count_loras(int32_t n_slots, std::vector<int32_t>* running, std::vector<int32_t>* waiting) const {
  running->assign(size_t(std::max(n_slots, 0)), 0);
  waiting->assign(size_t(std::max(n_slots, 0)), 0);
  if (n_slots <= 0) return;  // no adapters: nothing to count (stats() runs after every step)
  for (const auto& s : running_)
    if (s->lora.slot >= 0 && s->lora.slot < n_slots) ++(*running)[size_t(s->lora.slot)];
  for (const auto& s : waiting_)
    if (s->lora.slot >= 0 && s->lora.slot < n_slots) ++(*waiting)[size_t(s->lora.slot)];
}

RequestId Scheduler::blocked() const {
  if (!running_.empty()) return running_.front()->id;
  return waiting_.empty() ? 0 : waiting_.front()->id;
}

SchedulerStats Scheduler::stats() const {
  SchedulerStats s = stats_;
  s.step = cost_.stats();
  return s;
}

void Scheduler::preempt(Sequence& s) {
  // Swap keeps n_computed (its K/V wait in host memory). Recompute drops the cache and keeps the
  // tokens (prompt + generated) to re-prefill; its full blocks stay in the prefix cache, so the
  // re-prefill often finds them again.
  // A recurrent state swaps with the blocks, or both are recomputed.
  if ((!states_ || states_->can_swap_out()) && kv_.swap_out(s.id, s.n_computed)) {
    if (states_) states_->swap_out(s.id);
  } else {
    kv_.free(s.id);
    if (states_) states_->free(s.id);
    s.n_computed = 0;
  }
  s.draft.clear();
  s.draft_q.clear();
  ++s.n_preemptions;
  ++stats_.preemptions;
  preempted_.push_back(s.id);
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
    // A decode's draft rides along when the budget and the pool allow; it never preempts anyone.
    int32_t d = n == 1 && s.n_pending() == 1 ? std::min(int32_t(s.draft.size()), *budget - 1) : 0;
    // A recurrent state cannot drop rejected tokens: it is snapshotted first (no row: no drafts).
    if (d > 0 && states_ && !states_->snapshot(s.id)) d = 0;
    bool ok = kv_.allocate(s.id, s.n_computed, s.n_computed + n + d);
    if (!ok && d > 0) {
      d = 0;
      if (states_) states_->release_snapshot(s.id);
      ok = kv_.allocate(s.id, s.n_computed, s.n_computed + n);
    }
    trim_draft(s, d);
    while (!ok) {
      Sequence* victim = pick_victim(&s);
      if (!victim || before(*victim, s)) break;  // never preempt someone more important
      // Remove the victim from this step if it was already scheduled.
      for (auto it = out->begin(); it != out->end(); ++it)
        if (it->seq == victim) { *budget += it->n_new; out->erase(it); break; }
      const size_t vi = size_t(std::find_if(running_.begin(), running_.end(), [&](auto& r) { return r.get() == victim; }) - running_.begin());
      preempt(*victim);
      if (vi < i) --i;
      ok = kv_.allocate(s.id, s.n_computed, s.n_computed + n);
    }
    if (!ok) {  // nobody to take blocks from: s itself waits (recompute) unless it is alone
      if (running_.size() > 1) { preempt(s); --i; }
      continue;
    }
    take(out, budget, s, n + d, d);
  }
}

void Scheduler::trim_draft(Sequence& s, int32_t d) {
  if (int32_t(s.draft.size()) <= d) return;
  if (!s.draft_q.empty()) s.draft_q.resize(s.draft_q.size() / s.draft.size() * size_t(d));  // rows of q
  s.draft.resize(size_t(d));
}

std::vector<LoraRef> Scheduler::running_loras() const {
  std::vector<LoraRef> in_use;  // by (slot, scale): each scale is a variant with a slot of its own
  if (cfg_.max_loras <= 0) return in_use;
  for (const auto& r : running_)
    if (r->lora.slot >= 0 && std::none_of(in_use.begin(), in_use.end(), [&](const LoraRef& u) {
          return u.slot == r->lora.slot && u.scale == r->lora.scale;
        }))
      in_use.push_back(r->lora);
  return in_use;
}

bool Scheduler::lora_fits(const Sequence& s, std::vector<LoraRef>* in_use) const {
  if (cfg_.max_loras <= 0 || s.lora.slot < 0) return true;
  for (const LoraRef& u : *in_use)
    if (u.slot == s.lora.slot && u.scale == s.lora.scale) return true;
  if (int32_t(in_use->size()) >= cfg_.max_loras) return false;
  in_use->push_back(s.lora);  // it holds a slot once admitted (a failed admission ends the loop)
  return true;
}

void Scheduler::admit_waiting(std::vector<ScheduledSeq>* out, int32_t* budget) {
  // In queue order; a sequence whose adapter would need a device slot that the running ones hold
  // all of waits in its place and the ones behind it are considered (as vLLM's scheduler).
  std::vector<LoraRef> in_use = running_loras();  // the device slots the running sequences hold
  for (size_t i = 0; i < waiting_.size() && *budget > 0 && int32_t(out->size()) < cfg_.max_seqs;) {
    Sequence& s = *waiting_[i];
    if (cost_.full()) break;  // the step is at its cost limit: no room for another prefill chunk
    if (states_ && !states_->can_admit()) break;  // every sequence needs a state slot: wait for one
    if (!lora_fits(s, &in_use)) {
      ++i;
      continue;
    }
    const auto admit = [&] {
      running_.push_back(std::move(waiting_[i]));
      waiting_.erase(waiting_.begin() + std::ptrdiff_t(i));
    };
    if (kv_.swapped(s.id)) {  // its blocks come back from host memory
      const int32_t n = chunk_size(s, *budget);
      if (n <= 0 || !kv_.swap_in(s.id, s.n_computed, s.n_computed + n)) break;
      if (states_) states_->swap_in(s.id);
      admit();
      take(out, budget, s, n);
      continue;
    }
    // An embedding computes every token itself: pooling reads each one's hidden state.
    int32_t kv_match = 0;
    s.n_computed = s.embed ? 0 : match_prefix(s, &kv_match);
    if (states_) states_->note_match(s.id, s.n_computed, kv_match);
    const int32_t n = chunk_size(s, *budget);
    if (n <= 0 || !kv_.allocate(s.id, s.n_computed, s.n_computed + n)) {
      kv_.free(s.id);  // no partial admission: wait for blocks
      s.n_computed = 0;
      break;
    }
    if (states_) states_->admit(s.id, kv_.hashes(s.id));  // the blocks matched: n_computed tokens
    if (!s.admitted) {
      s.admitted = true;
      s.n_cached = s.n_computed;
    }
    stats_.admitted_tokens += int64_t(s.tokens.size());
    stats_.cached_tokens += s.n_computed;
    admit();
    take(out, budget, s, n);
  }
}

int32_t Scheduler::match_prefix(Sequence& s, int32_t* kv_match) {
  // With recurrent layers the match is the longest prefix whose KV blocks AND whose state are
  // cached: cut back to the longest checkpoint within the KV match, and match the KV again up to
  // it (a window group's blocks depend on where the match ends). Each round is shorter.
  int32_t limit = std::numeric_limits<int32_t>::max();
  for (;;) {
    const int32_t m = kv_.match_prefix(s.id, s.tokens, limit, s.lora.id);
    if (kv_match && limit == std::numeric_limits<int32_t>::max()) *kv_match = m;
    if (!states_) return m;
    const int32_t b = states_->match(kv_.hashes(s.id));  // the chain of the m matched tokens
    if (b == m) return m;
    kv_.free(s.id);
    limit = b;
  }
}

void Scheduler::take(std::vector<ScheduledSeq>* out, int32_t* budget, Sequence& s, int32_t n, int32_t n_draft) {
  const bool done = s.n_computed + n - n_draft == int32_t(s.tokens.size());
  out->push_back({&s, n, done && !s.embed, done && s.embed, n_draft});
  const bool samples = done && !s.embed;
  *budget -= n;
  // A prefill chunk counts against the step's cost limit (the decodes are in it already).
  if (s.n_pending() > 1) cost_.take_prefill(s.n_computed, n, samples);
}

StepShape Scheduler::decodes() const {
  // The decodes this step will carry: running sequences with one pending token.
  StepShape shape;
  int32_t n = 0;
  for (const auto& r : running_)
    if (r->n_pending() == 1 && n < cfg_.max_seqs) {
      const int32_t d = int32_t(r->draft.size());
      shape.add(r->n_computed, 1 + d, true);
      shape.n_logits += d;  // every draft position is scored
      ++n;
    }
  return shape;
}

int32_t Scheduler::chunk_size(const Sequence& s, int32_t budget) {
  // An embedding runs whole or waits (bidirectional attention and pooling see every token).
  if (s.embed) return s.n_pending() <= budget ? s.n_pending() : 0;
  // A recurrent state is checkpointed only where a step ends: a prefill chunk ends at the next
  // checkpoint boundary.
  if (states_ && s.n_pending() > 1) budget = std::min(budget, states_->next_boundary(s.id, s.n_computed, s.n_prompt) - s.n_computed);
  int32_t n = cost_.chunk(s.n_computed, std::min(s.n_pending(), budget));
  // ... and, short of the prompt's end, on the state's alignment (when that leaves any tokens).
  if (states_ && n > 0 && n < s.n_pending()) {
    const int32_t unit = states_->unit(), end = (s.n_computed + n) / unit * unit;
    if (end > s.n_computed) n = end - s.n_computed;
  }
  return n;
}

void Scheduler::observe(double ms) { cost_.observe(ms); }

std::vector<ScheduledSeq> Scheduler::plan(StepPlan* plan) {
  std::vector<ScheduledSeq> out;
  int32_t budget = cfg_.max_batch_tokens;
  // Sequences waiting on prefill that this step could serve: running ones mid-prompt, and queued
  // prompts (not swapped-out decodes, which wait with one pending token) up to the seats that
  // max_seqs leaves (a queue that cannot be admitted gains nothing from a step without a limit).
  int32_t n_decoding = 0, n_awaiting = 0, n_queued = 0;
  for (const auto& w : waiting_) n_queued += w->n_pending() > 1;
  for (const auto& r : running_) {
    if (r->n_pending() == 1) ++n_decoding;
    else if (r->n_pending() > 1) ++n_awaiting;
  }
  n_awaiting += std::min(n_queued, std::max(0, cfg_.max_seqs - int32_t(running_.size())));
  cost_.begin_step(decodes(), std::min(n_decoding, cfg_.max_seqs), n_awaiting);
  const int64_t preemptions_before = stats_.preemptions;
  schedule_running(&out, &budget);  // decodes (and unfinished prefill chunks) first
  // Then prefill chunks of waiting sequences, unless this step had to preempt: the pool is short,
  // and admitting (often the sequence just preempted, into its own freed blocks) only to
  // preempt again next step is the recompute thrash (as vLLM's scheduler, admit nothing then).
  if (stats_.preemptions == preemptions_before) admit_waiting(&out, &budget);
  fill(plan, out);
  // The device work of this step's bookkeeping, even when it schedules nothing (a swap-out).
  KvTransfers transfers = kv_.take_transfers();
  plan->swap_out = std::move(transfers.swap_out);
  plan->swap_in = std::move(transfers.swap_in);
  plan->block_copies = std::move(transfers.copies);
  plan->window_block_copies = kv_.take_window_transfers().copies;
  if (!out.empty()) end_step(out);  // an idle plan keeps the latest step's figures
  return out;
}

void Scheduler::end_step(const std::vector<ScheduledSeq>& scheduled) {
  ++stats_.steps;
  StepShape planned;
  int32_t prefill_tokens = 0;
  for (const auto& sc : scheduled) {
    planned.add(sc.seq->n_computed, sc.n_new, sc.samples);
    planned.n_logits += sc.n_draft;
    if (sc.seq->n_pending() > 1) prefill_tokens += sc.n_new;
  }
  cost_.end_step(planned, prefill_tokens);
}

void Scheduler::fill(StepPlan* plan, const std::vector<ScheduledSeq>& scheduled) const {
  *plan = StepPlan{};
  plan->query_start.push_back(0);
  const int32_t bs = cfg_.block_size;
  int32_t max_blocks = 1;
  for (const auto& sc : scheduled) max_blocks = std::max(max_blocks, int32_t(kv_.blocks(sc.seq->id).size()));
  plan->max_blocks = max_blocks;
  int32_t window_max_blocks = 0;
  if (kv_.has_window()) {
    window_max_blocks = 1;
    for (const auto& sc : scheduled) window_max_blocks = std::max(window_max_blocks, int32_t(kv_.window_blocks(sc.seq->id).size()));
  }
  plan->window_max_blocks = window_max_blocks;
  for (const auto& sc : scheduled) {
    const Sequence& s = *sc.seq;
    const std::span<const BlockId> blocks = kv_.blocks(s.id);
    const std::span<const BlockId> window_blocks = kv_.window_blocks(s.id);
    const int32_t n_tokens = int32_t(s.tokens.size());
    for (int32_t i = 0; i < sc.n_new; ++i) {
      const int32_t pos = s.n_computed + i;
      plan->tokens.push_back(pos < n_tokens ? s.tokens[size_t(pos)] : s.draft[size_t(pos - n_tokens)]);
      plan->positions.push_back(pos);
      plan->slot_mapping.push_back(blocks[size_t(pos / bs)] * bs + pos % bs);
      if (window_max_blocks > 0) plan->window_slot_mapping.push_back(window_blocks[size_t(pos / bs)] * bs + pos % bs);
    }
    plan->query_start.push_back(plan->query_start.back() + sc.n_new);
    plan->seq_lens.push_back(s.n_computed + sc.n_new);
    if (states_) plan->state_slots.push_back(states_->slot(s.id));
    plan->lora_slots.push_back(s.lora.slot);
    plan->lora_scales.push_back(s.lora.scale);
    for (int32_t b = 0; b < max_blocks; ++b)
      plan->block_tables.push_back(b < int32_t(blocks.size()) ? blocks[size_t(b)] : 0);
    // Entries the window gave back (KvManager::kReleased) go out as block 0, a valid index that
    // no query of this step reads: each sees only keys within its window.
    for (int32_t b = 0; b < window_max_blocks; ++b)
      plan->window_block_tables.push_back(b < int32_t(window_blocks.size()) ? std::max(window_blocks[size_t(b)], 0) : 0);
    // A speculating sequence is scored at its pending token and at each draft token.
    if (sc.samples)
      for (int32_t r = plan->query_start.back() - 1 - sc.n_draft; r < plan->query_start.back(); ++r)
        plan->logit_rows.push_back(r);
    if (sc.pools) plan->pool_seqs.push_back(plan->n_seqs() - 1);
  }
}

void Scheduler::commit(const std::vector<ScheduledSeq>& scheduled) {
  for (const auto& sc : scheduled) {
    Sequence& s = *sc.seq;
    s.n_computed += sc.n_new - sc.n_draft;
    kv_.commit(s.id, s.tokens, s.n_computed);
    // A drafting sequence's state holds its drafts too: it is settled in accept_draft.
    if (states_ && sc.n_draft == 0 && !s.embed) states_->computed(s.id, kv_.hashes(s.id), s.n_computed, s.n_prompt);
  }
}

std::vector<Sequence*> Scheduler::decoding() {
  std::vector<Sequence*> out;
  for (auto& r : running_)
    if (r->n_pending() == 1 && !r->embed) out.push_back(r.get());
  return out;
}

void Scheduler::accept_draft(RequestId id, int32_t n_accepted) {
  auto it = std::find_if(running_.begin(), running_.end(), [&](const auto& r) { return r->id == id; });
  if (it == running_.end()) return;
  Sequence& s = **it;
  const bool rejected = n_accepted < int32_t(s.draft.size());
  if (states_ && states_->has_snapshot(s.id)) {
    if (rejected) {
      // The state went through every draft token and cannot drop the rejected ones: it goes back
      // to its snapshot (before the step) and the sequence computes the step's pending token and
      // its accepted drafts again, with the token sampled after them (their K/V, already in the
      // cache, is written again with the same tokens at the same positions).
      states_->rollback(s.id);
      s.n_computed -= 1;  // commit() counted the pending token
      kv_.truncate(s.id, int32_t(s.tokens.size()));
      s.draft.clear();
      s.draft_q.clear();
      return;
    }
    states_->release_snapshot(s.id);
  }
  s.n_computed += n_accepted;
  kv_.commit(s.id, s.tokens, s.n_computed);
  kv_.truncate(s.id, int32_t(s.tokens.size()));
  s.draft.clear();
  s.draft_q.clear();
  if (states_) states_->computed(s.id, kv_.hashes(s.id), s.n_computed, s.n_prompt);
}

void Scheduler::finish(RequestId id) {
  for (auto it = running_.begin(); it != running_.end(); ++it)
    if ((*it)->id == id) { release(id); running_.erase(it); return; }
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it)
    if ((*it)->id == id) { release(id); waiting_.erase(it); return; }
}

void Scheduler::release(RequestId id) {
  kv_.free(id);
  if (states_) states_->free(id);
}

}  // namespace tessera
