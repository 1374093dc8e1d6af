// StepCostModel: predicts how long one engine step takes from its shape, so the scheduler can size
// prefill chunks that keep running decodes smooth. The model is linear in four terms:
//
//   ms = c0 + c_tok * tokens + c_logit * logit rows + c_pair * query-key pairs
//
// c0 is the fixed cost of a step (reading every weight once, launches), c_tok the per-token cost
// of the linear layers, c_logit the output head of each sampled row, c_pair attention (each new
// token attends to every earlier key of its sequence). NOTE: a fifth term, keys read per
// sequence (a small chunk is memory-bound on its context), was tried and dropped: with chunks of
// similar size it is collinear with the pairs, and the fit gave it the long prompt's context
// cost, which it then charged to every decode too (a decode-only step predicted at 2.5x its
// measured time, so the limit let steps grow to 5x). The coefficients start from a prior (from the
// model's dimensions and the device; ModelRunner::cost_prior) and are fitted online to the
// measured time of each step: exponentially weighted least squares on relative errors (a 5 s step
// and a 50 ms step weigh the same) in information form (normal equations re-solved each step,
// with a weak damping towards the previous fit that never decays, so directions that
// decode-only periods do not excite keep their estimate instead of drifting or winding up), residuals clipped (a step stalled by the OS
// moves the fit little) and the coefficients kept non-negative (active set). Not thread-safe:
// the engine thread owns it.
#pragma once
#include <array>
#include <cstdint>

namespace tessera {

// What a step computes, as the cost model sees it.
struct StepShape {
  int32_t n_tokens = 0;   // query rows (new tokens of every sequence)
  int32_t n_logits = 0;   // rows that go through the output head (sampled)
  double n_pairs = 0;     // sum over sequences of n_new * (n_computed + (n_new + 1) / 2)

  // Adds one sequence's |n_new| tokens after its |n_computed| cached ones.
  void add(int32_t n_computed, int32_t n_new, bool samples);
};

// Query-key pairs of |n_new| causal tokens after |n_computed| cached ones.
double attention_pairs(int32_t n_computed, int32_t n_new);

// Milliseconds per unit of each term.
struct StepCostCoefficients {
  double c0_ms = 0;
  double token_ms = 0;
  double logit_ms = 0;
  double pair_ms = 0;
};

class StepCostModel {
 public:
  // |prior| must have every coefficient > 0 (a zero is replaced by a small default).
  // |forgetting| in (0, 1]: the weight of an observation decays by it per later step.
  explicit StepCostModel(const StepCostCoefficients& prior, double forgetting = 0.98);

  double predict_ms(const StepShape& s) const;
  // Fits the step |s| that took |measured_ms| (ignored when not finite or <= 0).
  void observe(const StepShape& s, double measured_ms);
  // The largest chunk n in [0, cap] of a sequence with |n_computed| cached tokens that keeps the
  // predicted time of |base| plus the chunk within |limit_ms| (the chunk is counted as sampling,
  // the conservative choice).
  int32_t max_chunk(const StepShape& base, int32_t n_computed, double limit_ms, int32_t cap) const;

  StepCostCoefficients coefficients() const;
  int64_t n_observed() const { return n_observed_; }
  // The most tokens in one observed step: the fit is trusted to extrapolate only so far.
  int32_t max_tokens_observed() const { return max_tokens_observed_; }

 private:
  static constexpr int kTerms = 4;
  using Vec = std::array<double, kTerms>;
  Vec features(const StepShape& s) const;  // each term's prior contribution in ms
  void solve();                            // theta_ from info_ and rhs_

  StepCostCoefficients prior_;
  double forgetting_;
  Vec theta_{};                     // coefficients relative to the prior (1 = the prior)
  std::array<Vec, kTerms> info_{};  // sum of decayed x x' (relative features)
  Vec rhs_{};                       // sum of decayed x y
  double mean_abs_err_ = 0.0;       // running mean of |relative residual|
  int64_t n_observed_ = 0;
  int32_t max_tokens_observed_ = 0;
};

}  // namespace tessera
