// StepCostPolicy: how large a step's prefill chunks may be while decodes run, so the decodes'
// inter-token latency stays smooth. The Scheduler consults it while it plans a step
// (begin_step, chunk, take_prefill, full, end_step) and reports the step's measured time
// (observe); the policy owns the fitted StepCostModel (core/sched/step_cost.h) and its per-step
// state. While decodes run, each step's prefill chunks are the largest whose predicted step time
// stays within itl_factor x the predicted decode-only step (and within max_step_ms when > 0), at
// least min_prefill_chunk tokens per step so a prefill always progresses; the scheduler's token
// budget stays the hard cap. With no decode running there is no limit (prefill fills the budget).
// Not thread-safe: the engine thread owns it.
#pragma once
#include <cstdint>

#include "core/sched/step_cost.h"

namespace tessera {

struct StepCostPolicyConfig {
  double itl_factor = 4.0;  // 0 with max_step_ms 0: the policy is off (chunks fill the budget)
  double max_step_ms = 0.0;
  int32_t min_prefill_chunk = 4;
  StepCostCoefficients prior;
  double forgetting = 0.98;
  // While a prefill runs beside decodes, every Nth step leaves the prefill out (0: never): a
  // decode-only step whose time re-anchors the fit, which otherwise sees only look-alike
  // steps (the same decodes plus a chunk) and cannot tell the decodes' share from the chunk's.
  int32_t probe_every = 16;
};

// The latest planned step as the policy saw it, and the fit.
struct StepCostStats {
  int64_t cost_limited_chunks = 0;  // prefill chunks the cost limit made smaller than the budget
  int32_t last_prefill_tokens = 0;  // prefill tokens in the latest step
  int32_t last_step_tokens = 0;
  double last_limit_ms = 0;         // its step-time limit (0: none: no decode, or a deep queue)
  bool last_deep_queue = false;     // more waiting on prefill than decoding: no ITL limit
  double last_predicted_ms = 0;     // its predicted time
  double last_step_ms = 0;          // its measured time (observe)
  StepCostCoefficients cost;        // fitted
};

class StepCostPolicy {
 public:
  explicit StepCostPolicy(const StepCostPolicyConfig& cfg);

  // Starts planning a step that carries |decodes| (|n_decoding| running sequences with one
  // pending token) while |n_awaiting| sequences wait on prefill (queued, or mid-prompt): sets the
  // step's time limit: none when nothing decodes, the policy is off, or more sequences wait on
  // prefill than decode (a queue that deep fills the budget, as with no decodes: at 32 streams of
  // 64-token prompts the burst at start otherwise trickled behind the first prompts' decodes,
  // docs/serving.md); else itl_factor x the predicted decode-only step, so a lone long prompt
  // beside running decodes is chunked to keep their gaps near the factor.
  void begin_step(const StepShape& decodes, int32_t n_decoding = 1, int32_t n_awaiting = 0);
  // The prefill chunk of a sequence with |n_computed| cached tokens that wants |want| tokens (its
  // pending tokens within the step's remaining token budget): |want| itself without a limit or
  // for a decode (|want| <= 1), 0 on a probe step (decode-only), else the largest chunk the
  // limit allows, at least min_prefill_chunk for the step's first prefill chunk.
  int32_t chunk(int32_t n_computed, int32_t want);
  // The scheduler took a prefill chunk of |n| tokens after |n_computed| into the step.
  void take_prefill(int32_t n_computed, int32_t n, bool samples);
  // The step already holds a prefill chunk and has no room under its limit for another.
  bool full() const;
  // The planned step (not empty): |planned| is its whole shape, |prefill_tokens| of its tokens
  // are prefill chunks. Records its prediction for stats and the fit.
  void end_step(const StepShape& planned, int32_t prefill_tokens);
  // The step planned last took |ms|: fits the cost model. Ignored before any step was planned.
  void observe(double ms);

  const StepCostStats& stats() const { return stats_; }
  const StepCostModel& model() const { return model_; }

 private:
  StepCostPolicyConfig cfg_;
  StepCostModel model_;
  StepCostStats stats_;
  // This step's cost limit (0: none), the shape chunks are sized against (the running decodes,
  // then each chunk taken) and whether a prefill chunk was taken; the planned step's shape.
  double limit_ms_ = 0;
  StepShape limit_shape_;
  bool prefill_in_step_ = false;
  int32_t prev_prefill_tokens_ = 0;      // prefill tokens of the latest step that had any
  int32_t steps_since_decode_only_ = 0;  // steps with decodes since one without prefill
  bool probe_ = false;                   // this step leaves prefill out (probe_every)
  StepShape planned_;
};

}  // namespace tessera
