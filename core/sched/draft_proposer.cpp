#include "core/sched/draft_proposer.h"

#include <algorithm>
#include <string>

namespace tessera {

namespace {
// The draft's own sampling settings: the request's, with a seed of its own so the draft's
// stream never repeats the target's draws (a fixed request seed still fixes both).
SamplingParams draft_params(const SamplingParams& sp) {
  SamplingParams d = sp;
  d.logprobs = 0;
  if (sp.seed != 0) d.seed = (sp.seed ^ 0x9e3779b97f4a7c15ull) | 1;
  return d;
}

int32_t common_prefix(const std::vector<int32_t>& a, std::span<const int32_t> b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return int32_t(i);
}

KvManagerConfig draft_kv_config(const KvCache& kv) {
  KvManagerConfig c;
  c.block_size = kv.config().block_size;
  c.prefix_caching = false;  // one sequence's draft context is never another's: nothing to share
  return c;
}
}  // namespace

Result<std::unique_ptr<DraftModelProposer>> DraftModelProposer::create(std::shared_ptr<ModelRunner> draft,
                                                                      std::unique_ptr<KvCache> kv, int32_t target_vocab,
                                                                      DraftModelConfig cfg) {
  if (!draft || !kv) return InvalidArgument("draft model proposer: no draft model or no KV cache");
  if (draft->vocab_size() != target_vocab)
    return InvalidArgument("draft model: vocabulary of " + std::to_string(draft->vocab_size()) +
                           " tokens, but the target's has " + std::to_string(target_vocab) +
                           " (a draft must share the target's vocabulary)");
  if (!draft->generates()) return InvalidArgument("draft model: an encoder produces no next-token logits");
  if (kv->has_window())
    return InvalidArgument("draft model: its KV cache keeps sliding-window layers in a pool of their own, which the draft's "
                           "own block bookkeeping does not manage (create it with every layer in one pool)");
  if (kv->states())
    return InvalidArgument("draft model: it has recurrent layers, whose state the draft's own bookkeeping does not roll back "
                           "(use a draft model with attention layers only, or n-gram drafts)");
  if (cfg.max_batch_tokens < 1 || cfg.max_seqs < 1)
    return InvalidArgument("draft model proposer: max_batch_tokens " + std::to_string(cfg.max_batch_tokens) + " and max_seqs " +
                           std::to_string(cfg.max_seqs) + " must be >= 1");
  return std::unique_ptr<DraftModelProposer>(new DraftModelProposer(std::move(draft), std::move(kv), cfg));
}

DraftModelProposer::DraftModelProposer(std::shared_ptr<ModelRunner> draft, std::unique_ptr<KvCache> kv, DraftModelConfig cfg)
    : model_(std::move(draft)), kv_(std::move(kv)), kv_mgr_(draft_kv_config(*kv_), kv_->pool()), cfg_(cfg),
      vocab_(model_->vocab_size()) {}

int32_t DraftModelProposer::held_tokens(int64_t seq) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? 0 : int32_t(it->second.held.size());
}

void DraftModelProposer::release(int64_t seq) {
  kv_mgr_.free(seq);
  seqs_.erase(seq);
}

void DraftModelProposer::propose(std::span<DraftRequest> batch) {
  for (DraftRequest& r : batch) {
    r.draft.clear();
    r.q.clear();
  }
  std::vector<Work> work = prepare(batch);
  if (work.empty()) return;
  Status s = catch_up(work);
  if (s.ok()) s = draft_tokens(work);
  if (!s.ok()) {
    // The draft's K/V of these sequences may be half written: forget them all (they catch up
    // afresh next time) and propose nothing, so the engine decodes as without a proposer.
    last_error_ = s;
    ++stats_.failures;
    for (Work& w : work) {
      w.req->draft.clear();
      w.req->q.clear();
      release(w.req->seq);
    }
    return;
  }
  for (Work& w : work) {
    // The draft's cache now holds the context and every draft token but the last (never fed).
    std::vector<int32_t>& held = w.state->held;
    held.assign(w.req->tokens.begin(), w.req->tokens.end());
    held.insert(held.end(), w.req->draft.begin(), w.req->draft.end() - 1);
    stats_.draft_tokens += int64_t(w.req->draft.size());
  }
}

std::vector<DraftModelProposer::Work> DraftModelProposer::prepare(std::span<DraftRequest> batch) {
  std::vector<Work> work;
  for (DraftRequest& r : batch) {
    const int32_t len = int32_t(r.tokens.size());
    // Positions 0 .. len + k - 2 go through the draft (the last draft token is never fed).
    const int32_t k = std::min(r.k, model_->context_length() - len + 1);
    if (k <= 0 || len == 0) continue;
    SeqState& st = seqs_[r.seq];
    if (!st.sampler) st.sampler = std::make_unique<Sampler>(draft_params(r.sampling));
    // What the cache holds past the common prefix is a rejected draft (or an earlier draft the
    // target shortened): drop it. The last context token is always fed, for its logits.
    const int32_t keep = std::min(common_prefix(st.held, r.tokens), len - 1);
    if (keep < int32_t(st.held.size())) {
      kv_mgr_.truncate(r.seq, keep);
      st.held.resize(size_t(keep));
      ++stats_.truncations;
    }
    if (!kv_mgr_.allocate(r.seq, keep, len + k - 1)) {
      ++stats_.out_of_blocks;
      release(r.seq);
      continue;
    }
    Work w{&r, &st, keep, k, {}, {}};
    w.hist.assign(r.tokens.begin(), r.tokens.end());
    work.push_back(std::move(w));
  }
  // NOTE: nothing here copies or swaps blocks (no forks, no swap slots); drop the empty record.
  (void)kv_mgr_.take_transfers();
  return work;
}

Status DraftModelProposer::catch_up(std::vector<Work>& work) {
  std::vector<float> logits;
  // Chunked prefill over every sequence at once: each forward takes up to max_batch_tokens
  // tokens of up to max_seqs sequences, a sequence's last chunk asking for its logits row.
  for (;;) {
    StepPlan plan;
    std::vector<Work*> finishing;
    int32_t budget = cfg_.max_batch_tokens;
    for (Work& w : work) {
      const int32_t len = int32_t(w.req->tokens.size());
      if (w.done == len) continue;
      if (budget == 0 || plan.n_seqs() == cfg_.max_seqs) break;
      const int32_t n = std::min(len - w.done, budget);
      const bool last = w.done + n == len;
      add_rows(&plan, w.req->seq, w.req->tokens.data() + w.done, n, w.done, last);
      if (last) finishing.push_back(&w);
      w.done += n;
      budget -= n;
      stats_.catch_up_tokens += n;
    }
    if (plan.n_seqs() == 0) return OkStatus();
    TS_RETURN_IF_ERROR(run(plan, &logits));
    for (size_t i = 0; i < finishing.size(); ++i)
      finishing[i]->logits.assign(logits.begin() + int64_t(i) * vocab_, logits.begin() + int64_t(i + 1) * vocab_);
  }
}

Status DraftModelProposer::draft_tokens(std::vector<Work>& work) {
  int32_t k_max = 0;
  for (const Work& w : work) k_max = std::max(k_max, w.k);
  std::vector<float> logits;
  for (int32_t j = 0; j < k_max; ++j) {
    std::vector<Work*> feeding;
    for (Work& w : work) {
      if (j >= w.k) continue;
      draw(w);
      if (j + 1 < w.k) feeding.push_back(&w);
    }
    // One forward per draft position for the whole batch (chunked only beyond max_seqs).
    for (size_t from = 0; from < feeding.size(); from += size_t(cfg_.max_seqs)) {
      const size_t to = std::min(feeding.size(), from + size_t(cfg_.max_seqs));
      StepPlan plan;
      for (size_t i = from; i < to; ++i) {
        const Work& w = *feeding[i];
        const int32_t pos = int32_t(w.hist.size()) - 1;
        add_rows(&plan, w.req->seq, &w.hist.back(), 1, pos, true);
      }
      TS_RETURN_IF_ERROR(run(plan, &logits));
      for (size_t i = from; i < to; ++i)
        feeding[i]->logits.assign(logits.begin() + int64_t(i - from) * vocab_, logits.begin() + int64_t(i - from + 1) * vocab_);
    }
  }
  return OkStatus();
}

void DraftModelProposer::draw(Work& w) {
  DraftRequest& r = *w.req;
  Sampler& sampler = *w.state->sampler;
  const Candidates c = sampler.candidates(w.logits.data(), vocab_, w.hist);
  const int32_t x = sampler.draw(c);
  r.draft.push_back(x);
  w.hist.push_back(x);
  // Greedy: the draft is certain (q one-hot, left empty); else q is the distribution drawn from.
  if (sampler.greedy()) return;
  const size_t row = r.q.size();
  r.q.resize(row + size_t(vocab_), 0.0f);
  for (const auto& [t, p] : c.items) r.q[row + size_t(t)] = float(p / c.mass);
}

void DraftModelProposer::add_rows(StepPlan* plan, int64_t seq, const int32_t* tokens, int32_t n, int32_t start,
                                  bool wants_logits) {
  const std::span<const BlockId> blocks = kv_mgr_.blocks(seq);
  const int32_t bs = kv_mgr_.block_size();
  if (plan->query_start.empty()) plan->query_start.push_back(0);
  for (int32_t i = 0; i < n; ++i) {
    const int32_t pos = start + i;
    plan->tokens.push_back(tokens[i]);
    plan->positions.push_back(pos);
    plan->slot_mapping.push_back(blocks[size_t(pos / bs)] * bs + pos % bs);
  }
  plan->query_start.push_back(plan->n_tokens());
  plan->seq_lens.push_back(start + n);
  if (wants_logits) plan->logit_rows.push_back(plan->n_tokens() - 1);
  // The table rows are laid out in run(), once the widest table of the step is known.
  plan_tables_.emplace_back(blocks.begin(), blocks.end());
}

Status DraftModelProposer::run(StepPlan& plan, std::vector<float>* logits) {
  plan.max_blocks = 1;
  for (const auto& t : plan_tables_) plan.max_blocks = std::max(plan.max_blocks, int32_t(t.size()));
  plan.block_tables.assign(plan_tables_.size() * size_t(plan.max_blocks), 0);
  for (size_t s = 0; s < plan_tables_.size(); ++s)
    std::copy(plan_tables_[s].begin(), plan_tables_[s].end(), plan.block_tables.begin() + int64_t(s) * plan.max_blocks);
  plan_tables_.clear();
  ++stats_.forwards;
  TS_RETURN_IF_ERROR(model_->forward(plan, *kv_, logits));
  if (logits->size() < plan.logit_rows.size() * size_t(vocab_))
    return Internal("draft model: " + std::to_string(logits->size()) + " logits for " + std::to_string(plan.logit_rows.size()) +
                    " rows of " + std::to_string(vocab_));
  return OkStatus();
}

}  // namespace tessera
