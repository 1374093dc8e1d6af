#include "core/sched/step_cost_policy.h"

#include <algorithm>

namespace tessera {

StepCostPolicy::StepCostPolicy(const StepCostPolicyConfig& cfg) : cfg_(cfg), model_(cfg.prior, cfg.forgetting) {}

void StepCostPolicy::begin_step(const StepShape& decodes, int32_t n_decoding, int32_t n_awaiting) {
  if (stats_.last_prefill_tokens > 0) prev_prefill_tokens_ = stats_.last_prefill_tokens;
  limit_ms_ = 0;
  limit_shape_ = StepShape{};
  prefill_in_step_ = false;
  probe_ = false;
  stats_.last_deep_queue = false;
  if (cfg_.itl_factor <= 0 && cfg_.max_step_ms <= 0) return;
  if (decodes.n_tokens == 0) return;  // nobody waits on tokens: prefill may use the whole budget
  limit_shape_ = decodes;
  // More sequences waiting for their first token than decoding: the ITL limit is lifted (an
  // explicit max_step_ms still holds). Each step that protects the minority's ITL would delay
  // more TTFTs than it smooths ITLs; a burst of short prompts beside a few decodes goes through
  // in one or two budget-sized steps instead of trickling behind the decodes.
  const bool deep_queue = n_awaiting > n_decoding;
  stats_.last_deep_queue = deep_queue;
  if (deep_queue && cfg_.max_step_ms <= 0) {
    limit_shape_ = StepShape{};
    return;
  }
  limit_ms_ = cfg_.itl_factor > 0 && !deep_queue ? cfg_.itl_factor * model_.predict_ms(limit_shape_) : cfg_.max_step_ms;
  if (cfg_.max_step_ms > 0) limit_ms_ = std::min(limit_ms_, cfg_.max_step_ms);
  probe_ = cfg_.probe_every > 0 && ++steps_since_decode_only_ >= cfg_.probe_every;
}

int32_t StepCostPolicy::chunk(int32_t n_computed, int32_t want) {
  if (want <= 1 || limit_ms_ <= 0) return want;
  if (probe_) return 0;
  // The fit is trusted up to twice the largest step it has seen (on a fast device the chunk
  // doubles each step until the limit or the budget holds it, never a blind jump to the budget).
  // Likewise a chunk at most doubles the previous step's prefill tokens: a step whose chunk
  // leaps far beyond recent ones rests on extrapolation the recent fit has not checked.
  const int32_t grow = 2 * std::max(prev_prefill_tokens_, cfg_.min_prefill_chunk);
  const int32_t trusted = std::min(std::max(2 * model_.max_tokens_observed() - limit_shape_.n_tokens, 0), grow);
  int32_t n = model_.max_chunk(limit_shape_, n_computed, limit_ms_, std::min(want, trusted));
  if (n < want) ++stats_.cost_limited_chunks;
  // The floor keeps a prefill progressing however slow a step is (one chunk per step).
  if (n < cfg_.min_prefill_chunk && !prefill_in_step_) n = std::min(want, std::max(cfg_.min_prefill_chunk, 1));
  return n;
}

void StepCostPolicy::take_prefill(int32_t n_computed, int32_t n, bool samples) {
  limit_shape_.add(n_computed, n, samples);
  prefill_in_step_ = true;
}

bool StepCostPolicy::full() const {
  return prefill_in_step_ && limit_ms_ > 0 && model_.max_chunk(limit_shape_, 0, limit_ms_, 1) == 0;
}

void StepCostPolicy::end_step(const StepShape& planned, int32_t prefill_tokens) {
  planned_ = planned;
  stats_.last_prefill_tokens = prefill_tokens;
  if (limit_ms_ > 0 && prefill_tokens == 0) steps_since_decode_only_ = 0;
  stats_.last_step_tokens = planned_.n_tokens;
  stats_.last_limit_ms = limit_ms_;
  stats_.last_predicted_ms = model_.predict_ms(planned_);
  stats_.cost = model_.coefficients();
}

void StepCostPolicy::observe(double ms) {
  if (planned_.n_tokens == 0) return;
  model_.observe(planned_, ms);
  stats_.last_step_ms = ms;
  stats_.cost = model_.coefficients();
}

}  // namespace tessera
