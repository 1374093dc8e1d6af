// Registry: finds the devices usable at run time. A build with Vulkan, CUDA and HIP compiled in
// starts on a machine without any of them; each absent backend is listed with the reason.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "core/device.h"

namespace tessera {

struct DeviceEntry {
  std::string backend;  // "cpu", "vulkan", "cuda", "hip"
  std::string id;       // "vulkan:0"; for an unavailable backend, the backend name
  DevicePtr device;     // null when unavailable
  Status why;           // Unavailable(reason) when device is null
};

// A backend's probe: appends one entry per device found, or one unavailable entry saying why.
using BackendProbe = std::function<void(std::vector<DeviceEntry>&)>;

class Registry {
 public:
  // The process-wide registry, probing every compiled-in backend once (thread-safe; defined in
  // backends/backends.cpp).
  static Registry& global();

  const std::vector<DeviceEntry>& entries() const { return entries_; }
  // Usable devices, best first: GPUs and accelerators with memory of their own, integrated GPUs,
  // the native CPU, then emulated GPU devices (rank_of in registry.cpp: by DeviceType, never by
  // backend). Devices marked by_name_only, as the scalar reference, are not among them (it is slow; it is what the
  // others are tested against), so neither "auto" nor a loop over every device picks it: only find("reference").
  std::vector<DevicePtr> devices() const;
  // "cpu", "vulkan", "vulkan:1", "cuda:0", "reference", or "" / "auto" for the best.
  Result<DevicePtr> find(const std::string& spec) const;
  DevicePtr best() const;

  // For tests: a registry over explicit probes.
  explicit Registry(const std::vector<std::pair<std::string, BackendProbe>>& probes);

 private:
  std::vector<DeviceEntry> entries_;
};

// Every compiled-in backend's probe (defined in backends/backends.cpp).
std::vector<std::pair<std::string, BackendProbe>> builtin_backend_probes();
// Backends this build was configured without (for `tessera info`).
std::vector<std::string> backends_not_built();

// A new CPU device with |threads| (>= 1) worker threads, beside the registry's own (which takes
// TESSERA_THREADS or every core): for tools that compare thread counts, such as tessera-bench,
// without including the CPU backend's headers (defined in backends/cpu/probe.cpp).
DevicePtr make_cpu_device(int threads);

// The thread counts of a CPU device (CLI --threads/--threads-batch, the C API's n_threads).
// 0: the default (TESSERA_THREADS if set, else the physical cores this process may run on).
struct CpuThreadOptions {
  int threads = 0;        // single-row graphs (decode)
  int threads_batch = 0;  // graphs of more rows (prefill, batches); 0: as |threads|
};
// Checks |o| and fills in the defaults. A negative count is InvalidArgument naming it; a count
// above the logical CPUs this process may run on (more threads than CPUs never helps) is clamped
// to them, and |note| (when given) says so.
Result<CpuThreadOptions> resolve_cpu_threads(CpuThreadOptions o, std::string* note = nullptr);
// A new CPU device with resolved |o|.
DevicePtr make_cpu_device(const CpuThreadOptions& o);
// For a CPU device: its thread counts and what its pool did under load ("2 threads, adaptive:
// never shrank ..."); "" for other devices.
std::string cpu_thread_summary(const Device& d);
// Where the CPU default comes from: "2 physical cores of 2 CPUs this process may run on; default
// 2 threads" (and TESSERA_THREADS when set).
std::string cpu_topology_summary();

}  // namespace tessera
