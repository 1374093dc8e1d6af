// Device time from the device's own clock (Device::time_compute: GPU timestamp queries), for the
// ceilings and the kernel sweep: host wall time would count submission, fences and (on
// lavapipe) thread wake-ups.
#pragma once
#include <string>
#include <vector>

#include "bench/timing.h"
#include "core/device.h"

namespace tessera::bench {

// Which clock a measurement's samples came from.
enum class TimeSource { kHostWall, kDeviceTimestamps };

// Times compute() of |graphs| on |device| (call i runs graphs[i % size], so the caller can rotate
// inputs). By the device's clock when it has one (time_compute is not Unimplemented and reports
// a time above zero on the warm-up call): each sample is then one call's device time, |note|
// says "device time (timestamps)" and |source| (if given) kDeviceTimestamps. Otherwise host wall
// time as time_calls measures it, with device.synchronize() ending each batch.
Result<Stat> time_graphs(Device& device, std::vector<Graph>& graphs, const TimingBudget& budget, std::string* note,
                         TimeSource* source = nullptr);

}  // namespace tessera::bench
