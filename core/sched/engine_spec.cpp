// The Engine's speculative decoding: drafts before planning (propose_drafts, with the auto-off
// rules), verification after the step (verify_and_emit). The scheduler carries the drafts in the
// plan (Sequence::draft) and drops the rejected positions' KV (Scheduler::accept_draft).
#include <algorithm>
#include <cmath>

#include "core/sched/engine.h"
#include "core/sched/engine_active.h"
#include "core/sched/spec_verify.h"

namespace tessera {

namespace {
constexpr int64_t kSpecGateWarmup = 16;  // steps with drafts before the cost gate may turn them off
}  // namespace

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
    // NOTE: no drafts under a grammar yet (that needs one mask per draft position).
    if (a.grammar) continue;
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
  sc.proposer->propose(batch);
  // The gate trusts the fit only once it has seen steps with drafts: until then decodes are all
  // one token wide and the fit cannot tell the per-token cost from the fixed one.
  if (sc.cost_gate && spec_.steps >= kSpecGateWarmup && !drafts_pay(seqs, batch)) {
    if (++spec_gated_in_row_ < std::max(1, sc.probe_every)) {
      ++spec_.steps_off_cost;
      return;
    }
  }
  spec_gated_in_row_ = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    owners[i]->draft = std::move(batch[i].draft);
    owners[i]->draft_q = std::move(batch[i].q);
  }
}

bool Engine::drafts_pay(const std::vector<Sequence*>& seqs, const std::vector<DraftRequest>& batch) const {
  // Tokens per predicted millisecond with and without the drafts. With per-token acceptance
  // alpha, a draft of d tokens emits (1 - alpha^(d+1)) / (1 - alpha) tokens in expectation.
  const double alpha = std::clamp(spec_accepted_ewma_ / std::max(spec_tried_ewma_, 1e-9), 0.0, 0.999);
  StepShape plain, spec;
  double expected = 0;
  size_t j = 0;
  for (const Sequence* s : seqs) {
    plain.add(s->n_computed, 1, true);
    const int32_t d = j < batch.size() && batch[j].seq == s->id ? int32_t(batch[j++].draft.size()) : 0;
    spec.add(s->n_computed, 1 + d, true);
    spec.n_logits += d;
    expected += (1.0 - std::pow(alpha, d + 1)) / (1.0 - alpha);
  }
  const StepCostModel& m = scheduler_.cost_policy().model();
  return expected * m.predict_ms(plain) > double(seqs.size()) * m.predict_ms(spec);
}

void Engine::verify_and_emit(RequestId seq_id, const float* logits, int32_t n_draft) {
  auto it = active_.find(seq_id);
  Sequence* seq = scheduler_.find(seq_id);
  if (it == active_.end() || !seq) return;
  Active& a = *it->second;
  const int32_t vocab = model_.vocab_size();
  const std::span<const int32_t> draft(seq->draft.data(), size_t(n_draft));
  const std::span<const float> q = seq->draft_q.empty() ? std::span<const float>{}
                                                          : std::span<const float>(seq->draft_q.data(), size_t(n_draft) * size_t(vocab));
  const VerifyResult v = verify_draft(*a.sampler, logits, vocab, draft, q, seq->tokens);
  ++spec_.verifications;
  spec_.drafted += n_draft;
  spec_.accepted += v.accepted;
  constexpr double kDecay = 0.98;
  spec_accepted_ewma_ = kDecay * spec_accepted_ewma_ + v.accepted;
  spec_tried_ewma_ = kDecay * spec_tried_ewma_ + v.accepted + (v.accepted < n_draft ? 1 : 0);
  // Each token goes through the stop checks in turn: EOS, a stop string or max_tokens in the
  // middle ends the request there, and the tokens after it are never emitted.
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    SampleResult r;
    a.sampler->describe(logits + i * size_t(vocab), vocab, v.tokens[i], &r);
    if (!emit_token(a, *seq, r)) return;  // finished: its blocks are freed already
  }
  scheduler_.accept_draft(seq_id, v.accepted);
}

}  // namespace tessera
