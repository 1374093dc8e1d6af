#include "core/sched/scheduler.h"

#include <algorithm>

namespace tessera {

Scheduler::Scheduler(const SchedulerConfig& cfg, BlockPool& pool) : cfg_(cfg), pool_(pool) {}

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

bool Scheduler::ensure_blocks(Sequence& s, int32_t n_tokens) {
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
}

void Scheduler::preempt(Sequence& s) {
  // Recompute policy: drop the cache, keep the tokens (prompt + generated) to re-prefill.
  free_blocks(s);
  s.n_computed = 0;
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

std::vector<ScheduledSeq> Scheduler::plan(StepPlan* plan) {
  std::vector<ScheduledSeq> out;
  int32_t budget = cfg_.max_batch_tokens;
  // 1. Running sequences, in service order: decodes (and unfinished prefill chunks) first.
  std::sort(running_.begin(), running_.end(), [](const auto& a, const auto& b) { return before(*a, *b); });
  for (size_t i = 0; i < running_.size() && budget > 0 && int32_t(out.size()) < cfg_.max_seqs; ++i) {
    Sequence& s = *running_[i];
    const int32_t n = std::min(s.n_pending(), budget);
    if (n <= 0) continue;
    bool ok = ensure_blocks(s, s.n_computed + n);
    while (!ok) {
      Sequence* victim = pick_victim(&s);
      if (!victim || before(*victim, s)) break;  // never preempt someone more important
      // Remove the victim from this step if it was already scheduled.
      for (auto it = out.begin(); it != out.end(); ++it)
        if (it->seq == victim) { budget += it->n_new; out.erase(it); break; }
      const size_t vi = size_t(std::find_if(running_.begin(), running_.end(), [&](auto& r) { return r.get() == victim; }) - running_.begin());
      preempt(*victim);
      if (vi < i) --i;
      ok = ensure_blocks(s, s.n_computed + n);
    }
    if (!ok) {  // nobody to take blocks from: s itself waits (recompute) unless it is alone
      if (running_.size() > 1) { preempt(s); --i; }
      continue;
    }
    out.push_back({&s, n, s.n_computed + n == int32_t(s.tokens.size())});
    budget -= n;
  }
  // 2. Admit waiting sequences (prefill chunks) while the budget and the blocks last.
  while (!waiting_.empty() && budget > 0 && int32_t(out.size()) < cfg_.max_seqs) {
    Sequence& s = *waiting_.front();
    const int32_t n = std::min(s.n_pending(), budget);
    if (!ensure_blocks(s, s.n_computed + n)) {
      free_blocks(s);  // no partial admission: wait for blocks
      break;
    }
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    out.push_back({&s, n, s.n_computed + n == int32_t(s.tokens.size())});
    budget -= n;
  }
  fill(plan, out);
  if (!out.empty()) ++stats_.steps;
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
  for (const auto& sc : scheduled) sc.seq->n_computed += sc.n_new;
}

void Scheduler::finish(RequestId id) {
  for (auto it = running_.begin(); it != running_.end(); ++it)
    if ((*it)->id == id) { free_blocks(**it); running_.erase(it); return; }
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it)
    if ((*it)->id == id) { free_blocks(**it); waiting_.erase(it); return; }
}

}  // namespace tessera
