// Timing helpers: a monotonic clock and "median of repeats after warm-up under a time budget".
#pragma once
#include <chrono>
#include <cstdint>
#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include "bench/roofline_model.h"
#include "core/status.h"

namespace tessera::bench {

// The median of |v| (the upper one of an even count); 0 when empty.
double median_of(std::vector<double> v);

inline double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// CPU seconds of the whole process (all threads): on a shared machine, CPU time / threads
// estimates the unloaded wall time of work whose idle threads block rather than spin.
inline double process_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

struct TimingBudget {
  double budget_s = 0.5;       // total time to spend on the repeats of one figure
  double min_sample_s = 0.002; // a sample runs enough calls to last at least this long
  int min_samples = 3;
  int max_samples = 9;
};

// Times |call(i)| (i counts calls, so the caller can rotate inputs) and |finish()| (waits for
// the device) per sample. One warm-up call, then warm batches doubling until one lasts
// min_sample_s (they are warm-up too), then min..max samples of that batch within the budget.
// Returns seconds per call. When the warm-up alone exceeds the budget, the warm-up is the only
// sample and |note| says so.
Result<Stat> time_calls(const std::function<Status(int64_t)>& call, const std::function<Status()>& finish,
                        const TimingBudget& budget, std::string* note);

}  // namespace tessera::bench
