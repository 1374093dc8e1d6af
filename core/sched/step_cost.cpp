#include "core/sched/step_cost.h"

#include <algorithm>
#include <cmath>

namespace tessera {

double attention_pairs(int32_t n_computed, int32_t n_new) {
  // Token i (0-based) of the chunk attends to n_computed + i + 1 keys.
  return double(n_new) * double(n_computed) + double(n_new) * double(n_new + 1) / 2.0;
}

void StepShape::add(int32_t n_computed, int32_t n_new, bool samples) {
  n_tokens += n_new;
  n_logits += samples ? 1 : 0;
  n_pairs += attention_pairs(n_computed, n_new);
}

StepCostModel::StepCostModel(const StepCostCoefficients& prior, double forgetting)
    : prior_(prior), forgetting_(std::clamp(forgetting, 0.5, 1.0)) {
  // NOTE: a zero prior would make its term unlearnable (features are scaled by the prior).
  auto positive = [](double v, double dflt) { return v > 0 && std::isfinite(v) ? v : dflt; };
  prior_.c0_ms = positive(prior_.c0_ms, 1.0);
  prior_.token_ms = positive(prior_.token_ms, 0.1);
  prior_.logit_ms = positive(prior_.logit_ms, 0.1);
  prior_.pair_ms = positive(prior_.pair_ms, 1e-5);
  theta_.fill(1.0);
  // A relative standard deviation of 10 per coefficient: the prior is only a guess (a nominal
  // device speed), the data decide within a few dozen steps. The same value bounds the
  // covariance later; a tighter bound acts as a lasting pull towards the prior (measured: a
  // bound of 9 left the token and pair terms 20% off on exact synthetic data).
  p_max_ = 100.0;
  for (int i = 0; i < kTerms; ++i) p_[size_t(i)][size_t(i)] = p_max_;
}

StepCostModel::Vec StepCostModel::features(const StepShape& s) const {
  return {prior_.c0_ms, prior_.token_ms * s.n_tokens, prior_.logit_ms * s.n_logits, prior_.pair_ms * s.n_pairs};
}

double StepCostModel::predict_ms(const StepShape& s) const {
  const Vec x = features(s);
  double y = 0;
  for (int i = 0; i < kTerms; ++i) y += x[size_t(i)] * theta_[size_t(i)];
  return y;
}

void StepCostModel::observe(const StepShape& s, double measured_ms) {
  if (!(measured_ms > 0) || !std::isfinite(measured_ms)) return;
  // Relative errors: divide the regression row by the measured time.
  Vec x = features(s);
  for (double& v : x) v /= measured_ms;
  double pred = 0;
  for (int i = 0; i < kTerms; ++i) pred += x[size_t(i)] * theta_[size_t(i)];
  double err = 1.0 - pred;
  // A step stalled by something else (another process, page faults) is an outlier: once the
  // fit has settled, clip its residual to a few times the typical one.
  if (n_observed_ >= 16) {
    const double bound = std::max(0.05, 4.0 * mean_abs_err_);
    err = std::clamp(err, -bound, bound);
  }
  mean_abs_err_ = n_observed_ == 0 ? std::abs(err) : 0.95 * mean_abs_err_ + 0.05 * std::abs(err);
  // RLS with forgetting: k = P x / (lambda + x' P x); theta += k err; P = (P - k x' P) / lambda.
  Vec px{};
  for (int i = 0; i < kTerms; ++i)
    for (int j = 0; j < kTerms; ++j) px[size_t(i)] += p_[size_t(i)][size_t(j)] * x[size_t(j)];
  double denom = forgetting_;
  for (int i = 0; i < kTerms; ++i) denom += x[size_t(i)] * px[size_t(i)];
  Vec k{};
  for (int i = 0; i < kTerms; ++i) k[size_t(i)] = px[size_t(i)] / denom;
  for (int i = 0; i < kTerms; ++i) theta_[size_t(i)] += k[size_t(i)] * err;
  for (int i = 0; i < kTerms; ++i)
    for (int j = 0; j < kTerms; ++j)
      p_[size_t(i)][size_t(j)] = (p_[size_t(i)][size_t(j)] - k[size_t(i)] * px[size_t(j)]) / forgetting_;
  // Bound the covariance: while only decodes run, the token and pair directions get no new
  // information and forgetting would inflate them without limit (one noisy step would then
  // swing the fit). Scaling row and column i keeps P symmetric positive definite.
  for (int i = 0; i < kTerms; ++i) {
    const double d = p_[size_t(i)][size_t(i)];
    if (d <= p_max_) continue;
    const double f = std::sqrt(p_max_ / d);
    for (int j = 0; j < kTerms; ++j) {
      p_[size_t(i)][size_t(j)] *= f;
      p_[size_t(j)][size_t(i)] *= f;
    }
  }
  // Costs are never negative; a negative fit comes from noise or collinear data.
  for (double& t : theta_) t = std::max(t, 0.0);
  ++n_observed_;
  max_tokens_observed_ = std::max(max_tokens_observed_, s.n_tokens);
}

StepCostCoefficients StepCostModel::coefficients() const {
  return {prior_.c0_ms * theta_[0], prior_.token_ms * theta_[1], prior_.logit_ms * theta_[2], prior_.pair_ms * theta_[3]};
}

int32_t StepCostModel::max_chunk(const StepShape& base, int32_t n_computed, double limit_ms, int32_t cap) const {
  auto fits = [&](int32_t n) {
    StepShape s = base;
    s.add(n_computed, n, true);
    return predict_ms(s) <= limit_ms;
  };
  if (cap <= 0 || !fits(1)) return 0;
  if (fits(cap)) return cap;
  // The predicted time grows with n: binary search for the last n that fits.
  int32_t lo = 1, hi = cap;  // fits(lo), !fits(hi)
  while (hi - lo > 1) {
    const int32_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

}  // namespace tessera
