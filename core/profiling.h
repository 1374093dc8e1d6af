// DeviceProfiling: what tessera-bench asks of a device beyond the HAL's serving interface, so the
// bench measures a backend's kernels without including the backend's headers. Optional: a
// device returns it from Device::profiling(), null where its backend offers none. No serving path
// calls it.
//
// (Device::time_compute and Device::measure_peaks are bench hooks of the same kind that still
// live on Device itself; they move here when a backend next touches them.)
#pragma once
#include <cstdint>
#include <functional>

#include "quant/dtype.h"
#include "core/status.h"

namespace tessera {

class DeviceProfiling {
 public:
  virtual ~DeviceProfiling() = default;

  // The worker threads run_on_workers spreads over.
  virtual int workers() const = 0;
  // Runs |work(i)| for every i in [0, workers()) at once, one call on each worker thread (the
  // threads the device's kernels run on, so a read-bandwidth pass sees the placement a GEMV
  // does), and returns when all are done.
  virtual void run_on_workers(const std::function<void(int)>& work) = 0;
  // The decode GEMV kernel's rate with its weights in cache: each worker runs the kernel over
  // its own copy of |rows| x |K| weights of format |w| (|image|: the rows as a file stores them,
  // small enough for a core's L2) again and again for at least |seconds|, with no graph or
  // dispatch in between. |prepared|: the layout Device::prepare_weight makes where it repacks
  // this format. GB/s, all workers together, the median of 5 runs.
  virtual Result<double> in_cache_gemv_gbs(DType w, const uint8_t* image, int64_t rows, int64_t K, double seconds,
                                           bool prepared) = 0;
};

}  // namespace tessera
