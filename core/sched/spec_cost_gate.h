// Speculative decoding's configuration, counters, and its cost gate: the rules that decide, step
// by step, whether the proposer is asked at all and how long the drafts it returns may be, from
// the step cost model's predictions, the proposer's own time and the acceptance seen so far.
// The Engine (engine_spec.cpp) asks the gate around its proposer call and reports every
// verification back to it; the gate holds no sequence and runs nothing.
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/sched/proposer.h"
#include "core/sched/scheduler.h"
#include "core/sched/step_cost.h"

namespace tessera {

// Speculative decoding (core/sched/proposer.h): off without a proposer.
struct SpecConfig {
  std::shared_ptr<Proposer> proposer;
  int32_t k = 4;  // draft tokens per step, unless the request says otherwise
  // Auto-off: no drafts in a step with more decoding sequences than this (batched decodes use
  // the device well already; drafts then cost more than they save).
  int32_t max_batch = 8;
  // Auto-off: no drafts when the step cost model predicts fewer tokens per millisecond with
  // them, counting the proposer's own time (a draft model's forwards) and the acceptance rate
  // seen so far. While off the proposer is not called at all; every probe_every-th step drafts
  // anyway, so the acceptance and cost estimates can recover.
  bool cost_gate = true;
  int32_t probe_every = 16;
};

// Speculative decoding counters (EngineConfig::spec). A verification is one sequence's draft
// scored in one step; it emits accepted + 1 tokens.
struct SpecStats {
  int64_t steps = 0;            // steps that carried at least one draft
  int64_t steps_off_batch = 0;  // steps whose decodes did not speculate: more than max_batch of them
  int64_t steps_off_cost = 0;   // ... the step cost model predicted the drafts would not pay
  int64_t verifications = 0;
  int64_t drafted = 0;      // draft tokens scored
  int64_t accepted = 0;     // of which accepted
  int64_t proposals = 0;    // proposer calls
  double propose_ms = 0.0;  // host time in the proposer (a draft model's forwards included)
  ProposerStats proposer;   // the proposer's own counters
  double acceptance_rate() const { return drafted ? double(accepted) / double(drafted) : 0.0; }
  // Accepted draft tokens per verification (each verification also emits one more token).
  double mean_accepted() const { return verifications ? double(accepted) / double(verifications) : 0.0; }
};

class SpecCostGate {
 public:
  explicit SpecCostGate(const SpecConfig& cfg) : enabled_(cfg.cost_gate), probe_every_(std::max(1, cfg.probe_every)) {}

  // Before the proposer: false when the gate has found that drafts do not pay and the proposer
  // is costly enough (a draft model's forwards) not to be asked, except every probe_every-th
  // step (counted in stats.steps_off_cost). A cheap proposer (n-gram lookup) is always asked.
  bool ask_proposer(SpecStats& stats);
  // The proposer's time for one call (ms), exponentially weighted into the cost of drafting.
  void observe_propose_ms(double ms);
  // After the proposer: whether the drafts in |batch| (for the decoding |seqs|, in their order)
  // are used this step, capping each at the length that yields the most tokens per predicted
  // millisecond by |model| (every probe_every-th capped step keeps them whole, so the rates past
  // the cap keep being measured; q rows of |vocab| are cut with them). False when decoding
  // without drafts yields more (counted in stats.steps_off_cost), except every probe_every-th
  // such step. Ungated (cost_gate off, or before a warm-up of steps with drafts, while the fit
  // cannot yet tell a token's cost from the step's): always true, nothing capped.
  bool admit(const StepCostModel& model, const std::vector<Sequence*>& seqs, std::vector<DraftRequest>& batch,
             int32_t vocab, SpecStats& stats);
  // One verification of an |n|-token draft of which |accepted| were accepted.
  void observe_verification(int32_t n, int32_t accepted);

  // Expected tokens a verification of a |d|-token draft emits, from the acceptance per position.
  double expected_tokens(int32_t d) const;
  // The draft length (a cap on every draft of |batch|) that yields the most tokens per predicted
  // millisecond, the proposer's time included; 0 when decoding without drafts yields more.
  // |plain_ms| gets the predicted time of the step without drafts.
  int32_t best_draft_cap(const StepCostModel& model, const std::vector<Sequence*>& seqs,
                         const std::vector<DraftRequest>& batch, double* plain_ms) const;

 private:
  bool gated(const SpecStats& stats) const;

  bool enabled_;
  int32_t probe_every_;
  // Acceptance per draft position j: exponentially weighted tokens accepted and tried at j
  // (position j is tried only when 0..j-1 were accepted), so a_j = accepted / tried is the
  // chance that j is accepted given that all before it were. Acceptance is not independent
  // across positions (a draft copied from the prompt is right or wrong as a whole), which a
  // single rate would miss.
  std::vector<double> pos_accepted_, pos_tried_;
  int32_t gated_in_row_ = 0;
  int32_t capped_in_row_ = 0;     // gated steps with drafts since the last one not capped
  bool off_by_cost_ = false;      // the last verdict: drafts do not pay
  bool proposer_costly_ = false;  // the proposer takes a noticeable share of a step
  double propose_ms_ewma_ = 0.0;  // the proposer's time per call, exponentially weighted
  int64_t proposals_ = 0;         // proposer calls seen
};

}  // namespace tessera
