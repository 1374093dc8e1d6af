#include "bench/timing.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace tessera::bench {

double median_of(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

Result<Stat> time_calls(const std::function<Status(int64_t)>& call, const std::function<Status()>& finish,
                        const TimingBudget& budget, std::string* note) {
  int64_t index = 0;
  double t0 = now_seconds();
  TS_RETURN_IF_ERROR(call(index++));
  TS_RETURN_IF_ERROR(finish());
  const double warm = now_seconds() - t0;
  if (warm > budget.budget_s) {
    if (note) *note = "one call took longer than the budget: a single, cold measurement";
    return make_stat({warm});
  }
  // Calibrate on warm calls: double the batch until it lasts min_sample_s (a cold first call
  // would make tiny kernels' batches too short and their timings mostly noise).
  int64_t per_sample = 1;
  double batch_s = 0.0;
  for (;;) {
    t0 = now_seconds();
    for (int64_t c = 0; c < per_sample; ++c) TS_RETURN_IF_ERROR(call(index++));
    TS_RETURN_IF_ERROR(finish());
    batch_s = now_seconds() - t0;
    if (batch_s >= budget.min_sample_s || batch_s * 2 > budget.budget_s || per_sample >= (int64_t(1) << 20)) break;
    per_sample *= 2;
  }
  const int n = std::clamp(int(budget.budget_s / std::max(batch_s, 1e-9)), budget.min_samples, budget.max_samples);
  std::vector<double> samples;
  for (int s = 0; s < n; ++s) {
    t0 = now_seconds();
    for (int64_t c = 0; c < per_sample; ++c) TS_RETURN_IF_ERROR(call(index++));
    TS_RETURN_IF_ERROR(finish());
    samples.push_back((now_seconds() - t0) / double(per_sample));
  }
  return make_stat(std::move(samples));
}

}  // namespace tessera::bench
