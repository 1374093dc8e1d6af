// The HAL: what every backend implements. Seven virtuals, no copies.
//
// Threading: a Device may be called from one thread at a time (the engine thread); backends
// may use their own worker threads internally.
#pragma once
#include <cstddef>
#include <map>
#include <memory>
#include <string>

#include "core/graph.h"
#include "core/status.h"
#include "core/tensor.h"

namespace tessera {

enum class DeviceKind : uint8_t { kCpu, kVulkan, kCuda, kHip, kReference };
const char* device_kind_name(DeviceKind k);

struct DeviceInfo {
  std::string id;           // "cpu", "vulkan:0", "cuda:1": what --device takes
  std::string name;         // "AMD EPYC 9R45 (2 threads, AVX-512 VNNI)", "llvmpipe (LLVM 15.0.7, 256 bits)"
  DeviceKind kind = DeviceKind::kCpu;
  bool emulated = false;    // a CPU-type implementation of a GPU API (lavapipe): never the default
  size_t memory_bytes = 0;  // usable device memory
  int threads = 0;          // worker threads (CPU) or 0
  std::string features;     // "avx2 avx512 vnni", "fp16 int8 subgroup=8"
  // Roofline ceilings, filled by tessera-bench measurements when known (0 = not measured).
  double peak_read_gbs = 0.0;
  std::map<DType, double> peak_flops;  // per activation/weight dtype
};

class Device {
 public:
  virtual ~Device() = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  virtual const DeviceInfo& info() const = 0;

  // |bytes| of device memory, uninitialised. ResourceExhausted when it does not fit.
  virtual Result<BufferPtr> alloc(size_t bytes) = 0;

  // Copies |bytes| from host |src| into |dst|'s memory starting at dst's element 0. |dst| must be
  // contiguous and bytes <= dst.nbytes(). Synchronous with respect to later compute() calls.
  virtual Status upload(const Tensor& dst, const void* src, size_t bytes) = 0;
  // Copies |bytes| of |src| (contiguous) to host |dst|; waits for pending work that writes it.
  virtual Status download(const Tensor& src, void* dst, size_t bytes) = 0;

  // Whether compute() implements |op| with activation dtype |act| and weight (second input)
  // dtype |weight|. For ops without a weight pass act twice.
  virtual bool supports(OpKind op, DType act, DType weight) const = 0;

  // Runs every node of |graph| in order. Intermediates are placed in a per-device arena by the
  // planner (core/planner.h); values marked as outputs stay readable until the next compute().
  // Fails (without partial side effects on external tensors where possible) on an op/dtype
  // the device does not support, naming both.
  virtual Status compute(Graph& graph) = 0;

  // Waits for all submitted work.
  virtual Status synchronize() = 0;

  // (optional) Wraps host memory that outlives the buffer through |keepalive| (a mapped model
  // file) as a read-only device buffer without copying. Devices that cannot address host memory
  // return Unimplemented and callers fall back to alloc + upload.
  virtual Result<BufferPtr> map_host(const void* ptr, size_t bytes, std::shared_ptr<const void> keepalive) {
    return Unimplemented(info().id + ": cannot map host memory");
  }

  // (optional) Runs |graph| as compute() does, waits for it, and returns the seconds the device's
  // own clock (GPU timestamp queries) measured for its work: the sum over the graph's dispatches,
  // leaving out submission, fences and host wake-ups. For benchmarks (tessera-bench); no serving
  // path calls it. A device without such a clock returns Unimplemented without running |graph|,
  // and the caller times compute() by host wall time instead.
  virtual Result<double> time_compute([[maybe_unused]] Graph& graph) {
    return Unimplemented(info().id + ": no device clock to time compute() by");
  }

 protected:
  Device() = default;
};

using DevicePtr = std::shared_ptr<Device>;

// Unimplemented naming the first node of |graph| that |device| does not support (op and dtypes),
// else OK. Backends call it at the top of compute(): a missing op is an error, never a fallback.
Status check_supported(const Device& device, const Graph& graph);

// Uploads host data into a new tensor on |device| (helper for tests, loaders and the engine).
Result<Tensor> upload_new(Device& device, const Tensor& desc, const void* src);

}  // namespace tessera
