#include "bench/device_clock.h"

#include <algorithm>

namespace tessera::bench {

Result<Stat> time_graphs(Device& device, std::vector<Graph>& graphs, const TimingBudget& budget, std::string* note,
                         TimeSource* source) {
  if (source) *source = TimeSource::kHostWall;
  if (graphs.empty()) return InvalidArgument("bench: time_graphs needs at least one graph");
  const auto graph = [&](int64_t i) -> Graph& { return graphs[size_t(i) % graphs.size()]; };
  const auto host_wall = [&] {
    return time_calls([&](int64_t i) { return device.compute(graph(i)); }, [&] { return device.synchronize(); },
                      budget, note);
  };
  // Warm-up (pipeline creation and first-touch costs stay out of the samples), and the probe of
  // whether the device has a clock at all.
  const double t0 = now_seconds();
  Result<double> first = device.time_compute(graph(0));
  if (!first.ok() && first.status().code() == StatusCode::kUnimplemented) return host_wall();
  TS_RETURN_IF_ERROR(first.status());
  const double wall = now_seconds() - t0;
  if (*first <= 0.0) return host_wall();  // nothing was dispatched: there is no device time to read
  const int n = std::clamp(int(budget.budget_s / std::max(wall, 1e-6)), budget.min_samples, std::max(budget.max_samples, 5));
  std::vector<double> samples;
  for (int i = 1; i <= n; ++i) {
    TS_ASSIGN_OR_RETURN(const double s, device.time_compute(graph(i)));
    samples.push_back(s);
  }
  if (note) *note = "device time (timestamps)";
  if (source) *source = TimeSource::kDeviceTimestamps;
  return make_stat(std::move(samples));
}

}  // namespace tessera::bench
