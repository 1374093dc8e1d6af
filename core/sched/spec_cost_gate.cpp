#include "core/sched/spec_cost_gate.h"

#include <algorithm>

namespace tessera {

namespace {
constexpr int64_t kSpecGateWarmup = 16;  // steps with drafts before the cost gate may turn them off
// A proposer taking more than this share of a plain step's predicted time is not asked while the
// gate is off (n-gram lookup takes ~0.1%; a draft model's forwards are comparable to the step).
constexpr double kCostlyProposerShare = 0.1;
}  // namespace

bool SpecCostGate::gated(const SpecStats& stats) const { return enabled_ && stats.steps >= kSpecGateWarmup; }

bool SpecCostGate::ask_proposer(SpecStats& stats) {
  if (gated(stats) && off_by_cost_ && proposer_costly_ && gated_in_row_ + 1 < probe_every_) {
    ++gated_in_row_;
    ++stats.steps_off_cost;
    return false;
  }
  return true;
}

void SpecCostGate::observe_propose_ms(double ms) {
  propose_ms_ewma_ = proposals_++ == 0 ? ms : 0.8 * propose_ms_ewma_ + 0.2 * ms;
}

bool SpecCostGate::admit(const StepCostModel& model, const std::vector<Sequence*>& seqs,
                         std::vector<DraftRequest>& batch, int32_t vocab, SpecStats& stats) {
  if (gated(stats)) {
    double plain_ms = 0;
    const int32_t cap = best_draft_cap(model, seqs, batch, &plain_ms);
    off_by_cost_ = cap == 0;
    proposer_costly_ = propose_ms_ewma_ > kCostlyProposerShare * plain_ms;
    if (off_by_cost_ && ++gated_in_row_ < probe_every_) {
      ++stats.steps_off_cost;
      return false;
    }
    // Longer drafts than the best length cost more rows than their expected tokens repay.
    const bool explore = cap > 0 && ++capped_in_row_ >= probe_every_;
    if (explore) capped_in_row_ = 0;
    for (DraftRequest& r : batch)
      if (cap > 0 && !explore && int32_t(r.draft.size()) > cap) {
        r.draft.resize(size_t(cap));
        if (!r.q.empty()) r.q.resize(size_t(cap) * size_t(vocab));
      }
  }
  gated_in_row_ = 0;
  return true;
}

void SpecCostGate::observe_verification(int32_t n, int32_t accepted) {
  // Positions 0..accepted-1 were tried and accepted; |accepted| was tried and rejected (unless
  // the whole draft was accepted); later ones were not tried.
  constexpr double kDecay = 0.98;
  const size_t tried = size_t(std::min(n, accepted + 1));
  if (pos_tried_.size() < tried) {
    pos_tried_.resize(tried, 0.0);
    pos_accepted_.resize(tried, 0.0);
  }
  for (size_t j = 0; j < tried; ++j) {
    pos_tried_[j] = kDecay * pos_tried_[j] + 1.0;
    pos_accepted_[j] = kDecay * pos_accepted_[j] + (int32_t(j) < accepted ? 1.0 : 0.0);
  }
}

double SpecCostGate::expected_tokens(int32_t d) const {
  // 1 (the token every verification emits) + sum over i of P(draft[0..i) all accepted).
  double tokens = 1.0, reach = 1.0, prev = 0.5;
  for (int32_t j = 0; j < d; ++j) {
    // An unseen position takes the rate of the one before it (one pseudo-observation).
    const double acc = j < int32_t(pos_tried_.size()) ? pos_accepted_[size_t(j)] : 0.0;
    const double tried = j < int32_t(pos_tried_.size()) ? pos_tried_[size_t(j)] : 0.0;
    const double a = std::clamp((acc + prev) / (tried + 1.0), 0.0, 1.0);
    reach *= a;
    tokens += reach;
    prev = a;
  }
  return tokens;
}

int32_t SpecCostGate::best_draft_cap(const StepCostModel& m, const std::vector<Sequence*>& seqs,
                                     const std::vector<DraftRequest>& batch, double* plain_ms) const {
  // Tokens per predicted millisecond without drafts and with every draft capped at L, for each L;
  // the proposer's time is paid once per step, before it, and adds to a drafted step's cost.
  StepShape plain;
  for (const Sequence* s : seqs) plain.add(s->n_computed, 1, true);
  *plain_ms = m.predict_ms(plain);
  int32_t longest = 0;
  for (const DraftRequest& r : batch) longest = std::max(longest, int32_t(r.draft.size()));
  double best = double(seqs.size()) / *plain_ms;
  int32_t best_cap = 0;
  for (int32_t cap = 1; cap <= longest; ++cap) {
    StepShape spec;
    double expected = 0;
    size_t j = 0;
    for (const Sequence* s : seqs) {
      const int32_t d = j < batch.size() && batch[j].seq == s->id ? std::min(cap, int32_t(batch[j++].draft.size())) : 0;
      spec.add(s->n_computed, 1 + d, true);
      spec.n_logits += d;
      expected += expected_tokens(d);
    }
    const double rate = expected / (m.predict_ms(spec) + propose_ms_ewma_);
    if (rate > best) {
      best = rate;
      best_cap = cap;
    }
  }
  return best_cap;
}

}  // namespace tessera
