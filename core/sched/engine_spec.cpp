// The Engine's speculative decoding: drafts before planning (propose_drafts; the auto-off rules
// are SpecCostGate's, core/sched/spec_cost_gate.h), verification after the step
// (verify_and_emit). The scheduler carries the drafts in the plan (Sequence::draft) and drops
// the rejected positions' KV (Scheduler::accept_draft).
#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/sched/engine.h"
#include "core/sched/engine_active.h"
#include "core/sched/spec_verify.h"

namespace tessera {

void Engine::propose_drafts() {
  const std::vector<Sequence*> seqs = scheduler_.decoding();
  for (Sequence* s : seqs) {
    s->draft.clear();
    s->draft_q.clear();
  }
  const SpecConfig& sc = cfg_.spec;
  if (!sc.proposer || seqs.empty()) return;
  std::vector<DraftRequest> batch;
  std::vector<Sequence*> owners;
  for (Sequence* s : seqs) {
    auto it = active_.find(s->id);
    if (it == active_.end() || it->second->forks_pending > 0) continue;
    const Active& a = *it->second;
    int32_t k = a.req.spec_k < 0 ? sc.k : a.req.spec_k;
    // A step emits at most k + 1 tokens: no draft past max_tokens or the context.
    k = std::min({k, a.req.max_tokens - a.metrics.generated_tokens - 1,
                  model_.context_length() - int32_t(s->tokens.size()) - 1});
    if (k <= 0) continue;
    batch.push_back({s->id, s->tokens, k, a.req.sampling, {}, {}});
    owners.push_back(s);
  }
  if (batch.empty()) return;
  if (int32_t(seqs.size()) > sc.max_batch) {
    ++spec_.steps_off_batch;
    return;
  }
  if (!spec_gate_.ask_proposer(spec_)) return;
  const auto t0 = std::chrono::steady_clock::now();
  sc.proposer->propose(batch);
  prune_to_grammar(batch);
  bool any = false;
  for (const DraftRequest& r : batch) any = any || !r.draft.empty();
  const double ms = cfg_.propose_ms_for_test
                        ? cfg_.propose_ms_for_test(batch.size())
                        : std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  spec_gate_.observe_propose_ms(ms);
  ++spec_.proposals;
  spec_.propose_ms += ms;
  if (!any) return;  // nothing proposed: nothing for the gate to judge
  if (!spec_gate_.admit(scheduler_.cost_policy().model(), seqs, batch, model_.vocab_size(), spec_)) return;
  for (size_t i = 0; i < batch.size(); ++i) {
    owners[i]->draft = std::move(batch[i].draft);
    owners[i]->draft_q = std::move(batch[i].q);
  }
}

void Engine::prune_to_grammar(std::vector<DraftRequest>& batch) {
  // A one-hot draft (n-gram) is cut at its first token the grammar forbids: that token would be
  // rejected for certain (p = 0) and the replacement drawn from p, which is what the shorter draft
  // draws as its bonus token. A dense draft keeps its tokens: its rejection at that position must
  // draw from norm(max(0, p - q)), so only verification may end it (prepare_draft_masks).
  for (DraftRequest& r : batch) {
    if (!r.q.empty() || r.draft.empty()) continue;
    auto it = active_.find(r.seq);
    if (it == active_.end() || !it->second->grammar) continue;
    Grammar& g = *it->second->grammar;
    int32_t ok = 0;
    while (size_t(ok) < r.draft.size() && g.accept(r.draft[size_t(ok)])) ++ok;
    if (ok > 0) g.rollback(ok);
    r.draft.resize(size_t(ok));
  }
}

void Engine::prepare_draft_masks(RequestId seq_id, int32_t n_draft) {
  auto it = active_.find(seq_id);
  Sequence* seq = scheduler_.find(seq_id);
  if (it == active_.end() || !seq || !it->second->grammar) return;
  Active& a = *it->second;
  const size_t words = size_t(mask_words(model_.vocab_size()));
  a.draft_masks.resize(size_t(n_draft + 1) * words);
  a.draft_allowed.clear();
  // Row i is the grammar after draft[0..i): walk the draft with accept, then undo the walk. The
  // walk stops at a dead end (a row that allows nothing) or a draft token the grammar refuses:
  // verification rejects that token for certain and never reads a later row.
  Grammar& g = *a.grammar;
  int32_t walked = 0;
  for (int32_t i = 0; i <= n_draft; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const int32_t allowed = g.fill_mask(a.draft_masks.data() + size_t(i) * words);
    observe_mask_ms(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    a.draft_allowed.push_back(allowed);
    if (i == n_draft || allowed == 0 || !g.accept(seq->draft[size_t(i)])) break;
    ++walked;
  }
  if (walked > 0) g.rollback(walked);
}

void Engine::verify_and_emit(RequestId seq_id, const float* logits, int32_t n_draft) {
  auto it = active_.find(seq_id);
  Sequence* seq = scheduler_.find(seq_id);
  if (it == active_.end() || !seq) return;
  Active& a = *it->second;
  const int32_t vocab = model_.vocab_size();
  // Under a grammar, one mask per row; the draft verified may be shorter than the one scored.
  std::vector<const uint32_t*> masks;
  int32_t n = n_draft;
  if (a.grammar) {
    if (a.draft_allowed.empty()) prepare_draft_masks(seq_id, n_draft);  // normally filled during the step
    const int32_t rows = int32_t(a.draft_allowed.size());
    const bool dead = a.draft_allowed.back() == 0;
    a.draft_allowed.clear();
    a.mask_allowed = -1;
    if (rows == 1 && dead) {
      return finish_dead_end(a);
    }
    // The walk ended early at row rows - 1: a dead end there makes it the bonus row of a draft of
    // rows - 1 tokens; a refused draft token there is the last token verified (rejected for
    // certain, so the row after it, unfilled, is never read).
    if (rows <= n_draft) n = dead ? rows - 1 : rows;
    const size_t words = size_t(mask_words(vocab));
    for (int32_t i = 0; i <= n; ++i) masks.push_back(i < rows ? a.draft_masks.data() + size_t(i) * words : nullptr);
  }
  const std::span<const int32_t> draft(seq->draft.data(), size_t(n));
  const std::span<const float> q = seq->draft_q.empty() ? std::span<const float>{}
                                                          : std::span<const float>(seq->draft_q.data(), size_t(n) * size_t(vocab));
  const VerifyResult v = verify_draft(*a.sampler, logits, vocab, draft, q, seq->tokens, masks);
  ++spec_.verifications;
  spec_.drafted += n;
  spec_.accepted += v.accepted;
  spec_gate_.observe_verification(n, v.accepted);
  // Each token goes through the stop checks in turn: EOS, a stop string or max_tokens in the
  // middle ends the request there, and the tokens after it are never emitted.
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    if (a.grammar && !a.grammar->accept(v.tokens[i]))  // its row's mask allowed it: a bug of the grammar's
      return finish(a, FinishReason::kError, "the grammar refused token " + std::to_string(v.tokens[i]) + " that its mask allowed");
    SampleResult r;
    a.sampler->describe(logits + i * size_t(vocab), vocab, v.tokens[i], &r);
    if (!emit_token(a, *seq, r)) return;  // finished: its blocks are freed already
  }
  if (v.dead_end) {
    return finish_dead_end(a);
  }
  scheduler_.accept_draft(seq_id, v.accepted);
}

}  // namespace tessera
