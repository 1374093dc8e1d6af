#include "core/sched/spec_verify.h"

#include <algorithm>

namespace tessera {

namespace {
// A token from norm(max(0, p - q)) where p is |c| and q is |q_row| (nullptr: one-hot at |x|).
int32_t draw_residual(Sampler& sampler, const Candidates& c, const float* q_row, int32_t x) {
  Candidates r;
  for (const auto& [t, w] : c.items) {
    const double p = w / c.mass;
    const double q = q_row ? double(q_row[t]) : (t == x ? 1.0 : 0.0);
    if (p > q) {
      r.items.push_back({t, p - q});
      r.mass += p - q;
    }
  }
  // NOTE: an empty residual means p <= q everywhere, i.e. p == q, where x is always accepted; the
  // guard only keeps rounding from leaving nothing to draw from.
  if (r.items.empty() || !(r.mass > 0)) return sampler.draw(c);
  return sampler.draw(r);
}
}  // namespace

VerifyResult verify_draft(Sampler& sampler, const float* logits, int32_t vocab, std::span<const int32_t> draft,
                          std::span<const float> q, const std::vector<int32_t>& history,
                          std::span<const uint32_t* const> masks) {
  VerifyResult out;
  std::vector<int32_t> hist = history;
  const auto mask = [&](size_t i) { return masks.empty() ? nullptr : masks[i]; };
  for (size_t i = 0; i < draft.size(); ++i) {
    const float* row = logits + i * size_t(vocab);
    const uint32_t* allowed = mask(i);
    const Candidates c = sampler.candidates(row, vocab, hist, allowed);
    const int32_t x = draft[i];
    const float* q_row = q.empty() ? nullptr : q.data() + i * size_t(vocab);
    // A token the grammar forbids is no candidate, so p(x) = 0: rejected without a draw.
    const double px = c.prob(x);
    const double qx = q_row ? double(q_row[x]) : 1.0;
    // p(x) >= q(x) accepts without a draw (greedy stays deterministic); else with p(x) / q(x).
    const bool accept = px > 0 && (px >= qx || sampler.uniform() * qx < px);
    if (!accept) {
      out.tokens.push_back(draw_residual(sampler, c, q_row, x));
      return out;
    }
    out.tokens.push_back(x);
    hist.push_back(x);
    ++out.accepted;
  }
  // Every draft token was accepted: the bonus token from the row after the draft.
  const float* row = logits + draft.size() * size_t(vocab);
  const Candidates c = sampler.candidates(row, vocab, hist, mask(draft.size()));
  if (c.items.empty()) {
    out.dead_end = true;
    return out;
  }
  out.tokens.push_back(sampler.draw(c));
  return out;
}

}  // namespace tessera
