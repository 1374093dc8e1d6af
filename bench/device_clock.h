// Device time from the device's own clock (GPU timestamp queries), for the ceilings and the
// kernel sweep: host wall time would count submission, fences and (on lavapipe) thread wake-ups.
#pragma once
#include <functional>
#include <optional>
#include <string>

#include "bench/timing.h"
#include "core/device.h"

namespace tessera::bench {

// Seconds the device spent on the dispatches of its last compute(), or nullopt when it has no
// timestamps (the CPU backend, a queue without timestamp support).
using DeviceClock = std::function<std::optional<double>()>;
// The clock of |device| (empty for a device without one).
DeviceClock device_clock(Device& device);

// Which clock a measurement's samples came from.
enum class TimeSource { kHostWall, kDeviceTimestamps };

// Times |call| like time_calls, but by |clock| when the device has one: after a warm-up call,
// each sample is one call's device time; |note| then says "device time (timestamps)" and
// |source| (if given) says kDeviceTimestamps.
Result<Stat> time_on_device(Device& device, const std::function<Status(int64_t)>& call,
                            const std::function<Status()>& finish, const TimingBudget& budget, std::string* note,
                            TimeSource* source = nullptr);

}  // namespace tessera::bench
