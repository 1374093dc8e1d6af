#include "core/sched/step_cost.h"

#include <algorithm>
#include <cmath>

namespace tessera {

namespace {
// Damping towards the previous fit, in units of one observation whose terms are each a fair
// share of its time: weak (a step outweighs it), but it never decays, so a direction the recent
// steps say nothing about (only decodes for a while) keeps its last estimate instead of becoming
// singular. Anchored at the previous fit, not the prior, it leaves no bias at convergence (an
// anchor at the prior kept the pair term 50% off when the prior was 10x off).
constexpr double kRidge = 1e-3;
}  // namespace

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
  // Relative errors: divide the regression row by the measured time (target 1).
  Vec x = features(s);
  for (double& v : x) v /= measured_ms;
  const double pred = predict_ms(s) / measured_ms;
  double err = 1.0 - pred;
  // A step stalled by something else (another process, page faults) is an outlier: once the
  // fit has settled, clip its residual to a few times the typical one.
  if (n_observed_ >= 16) {
    const double bound = std::max(0.05, 4.0 * mean_abs_err_);
    err = std::clamp(err, -bound, bound);
  }
  mean_abs_err_ = n_observed_ == 0 ? std::abs(err) : 0.95 * mean_abs_err_ + 0.05 * std::abs(err);
  const double y = pred + err;
  for (int i = 0; i < kTerms; ++i) {
    rhs_[size_t(i)] = forgetting_ * rhs_[size_t(i)] + x[size_t(i)] * y;
    for (int j = 0; j < kTerms; ++j)
      info_[size_t(i)][size_t(j)] = forgetting_ * info_[size_t(i)][size_t(j)] + x[size_t(i)] * x[size_t(j)];
  }
  solve();
  ++n_observed_;
  max_tokens_observed_ = std::max(max_tokens_observed_, s.n_tokens);
}

void StepCostModel::solve() {
  // (info + ridge) theta = rhs + ridge * theta_previous, with theta >= 0: solve, pin any negative
  // coefficient at 0, and solve again for the rest (at most kTerms rounds).
  std::array<bool, kTerms> pinned{};
  for (int round = 0; round < kTerms; ++round) {
    std::array<Vec, kTerms> a{};
    Vec b{};
    for (int i = 0; i < kTerms; ++i) {
      for (int j = 0; j < kTerms; ++j) a[size_t(i)][size_t(j)] = pinned[size_t(i)] || pinned[size_t(j)] ? 0.0 : info_[size_t(i)][size_t(j)];
      a[size_t(i)][size_t(i)] += pinned[size_t(i)] ? 1.0 : kRidge;
      b[size_t(i)] = pinned[size_t(i)] ? 0.0 : rhs_[size_t(i)] + kRidge * theta_[size_t(i)];
    }
    // Gaussian elimination with partial pivoting (a is symmetric positive definite: the ridge).
    for (int c = 0; c < kTerms; ++c) {
      int piv = c;
      for (int r = c + 1; r < kTerms; ++r)
        if (std::abs(a[size_t(r)][size_t(c)]) > std::abs(a[size_t(piv)][size_t(c)])) piv = r;
      std::swap(a[size_t(c)], a[size_t(piv)]);
      std::swap(b[size_t(c)], b[size_t(piv)]);
      for (int r = c + 1; r < kTerms; ++r) {
        const double f = a[size_t(r)][size_t(c)] / a[size_t(c)][size_t(c)];
        for (int k = c; k < kTerms; ++k) a[size_t(r)][size_t(k)] -= f * a[size_t(c)][size_t(k)];
        b[size_t(r)] -= f * b[size_t(c)];
      }
    }
    Vec t{};
    for (int r = kTerms - 1; r >= 0; --r) {
      double v = b[size_t(r)];
      for (int k = r + 1; k < kTerms; ++k) v -= a[size_t(r)][size_t(k)] * t[size_t(k)];
      t[size_t(r)] = v / a[size_t(r)][size_t(r)];
    }
    bool negative = false;
    for (int i = 0; i < kTerms; ++i)
      if (!pinned[size_t(i)] && !(t[size_t(i)] >= 0)) pinned[size_t(i)] = negative = true;
    if (!negative) {
      for (int i = 0; i < kTerms; ++i) theta_[size_t(i)] = pinned[size_t(i)] ? 0.0 : t[size_t(i)];
      return;
    }
  }
  // Every term pinned (not expected): keep the previous fit.
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
