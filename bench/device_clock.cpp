#include "bench/device_clock.h"

#include <algorithm>
#include <vector>

#if TESSERA_BENCH_VULKAN
#include "backends/vulkan/device.h"
#endif

namespace tessera::bench {

DeviceClock device_clock(Device& device) {
#if TESSERA_BENCH_VULKAN
  if (auto* vk = dynamic_cast<vulkan::VulkanDevice*>(&device); vk && vk->capabilities().timestamp_bits > 0)
    return [vk]() -> std::optional<double> {
      const auto& t = vk->last_timings();
      if (t.empty()) return std::nullopt;
      double us = 0.0;
      for (const auto& d : t) us += d.microseconds;
      return us * 1e-6;
    };
#endif
  (void)device;
  return {};
}

Result<Stat> time_on_device(Device& device, const std::function<Status(int64_t)>& call,
                            const std::function<Status()>& finish, const TimingBudget& budget, std::string* note,
                            TimeSource* source) {
  if (source) *source = TimeSource::kHostWall;
  const DeviceClock clock = device_clock(device);
  if (!clock) return time_calls(call, finish, budget, note);
  // Warm-up: pipeline creation and first-touch costs stay out of the samples.
  const double t0 = now_seconds();
  TS_RETURN_IF_ERROR(call(0));
  TS_RETURN_IF_ERROR(finish());
  const double wall = now_seconds() - t0;
  if (!clock()) return time_calls(call, finish, budget, note);
  // compute() waits for its command buffer, so each call's timestamps are complete on return.
  const int n = std::clamp(int(budget.budget_s / std::max(wall, 1e-6)), budget.min_samples, std::max(budget.max_samples, 5));
  std::vector<double> samples;
  for (int i = 1; i <= n; ++i) {
    TS_RETURN_IF_ERROR(call(i));
    TS_RETURN_IF_ERROR(finish());
    const std::optional<double> s = clock();
    if (!s) return Internal("bench: the device stopped reporting timestamps");
    samples.push_back(*s);
  }
  if (note) *note = "device time (timestamps)";
  if (source) *source = TimeSource::kDeviceTimestamps;
  return make_stat(std::move(samples));
}

}  // namespace tessera::bench
