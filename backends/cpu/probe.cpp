#include <algorithm>
#include <cstdlib>
#include <string>

#include "backends/cpu/cpu_device.h"
#include "core/registry.h"

namespace tessera {

void probe_cpu(std::vector<DeviceEntry>& out) {
  out.push_back({"cpu", "cpu", std::make_shared<cpu::CpuDevice>(cpu::default_thread_count()), OkStatus()});
}

DevicePtr make_cpu_device(int threads) { return std::make_shared<cpu::CpuDevice>(std::max(1, threads)); }

Result<CpuThreadOptions> resolve_cpu_threads(CpuThreadOptions o, std::string* note) {
  const int logical = cpu::available_cpu_count();
  const auto check = [&](int* n, const char* what) -> Status {
    if (*n < 0)
      return InvalidArgument(std::string(what) + " must be at least 1 (0: the default), got " + std::to_string(*n));
    if (*n > logical) {
      if (note) {
        if (!note->empty()) *note += "; ";
        *note += std::string(what) + " " + std::to_string(*n) + " is more than the " + std::to_string(logical) +
                 " CPUs this process may run on: using " + std::to_string(logical);
      }
      *n = logical;
    }
    return OkStatus();
  };
  TS_RETURN_IF_ERROR(check(&o.threads, "threads"));
  TS_RETURN_IF_ERROR(check(&o.threads_batch, "threads_batch"));
  if (o.threads == 0) o.threads = cpu::default_thread_count();
  if (o.threads_batch == 0) o.threads_batch = o.threads;
  return o;
}

DevicePtr make_cpu_device(const CpuThreadOptions& o) {
  return std::make_shared<cpu::CpuDevice>(std::max(1, o.threads), std::max(0, o.threads_batch));
}

std::string cpu_thread_summary(const Device& d) {
  const auto* cpu = dynamic_cast<const cpu::CpuDevice*>(&d);
  return cpu ? cpu->thread_summary() : std::string();
}

std::string cpu_topology_summary() {
  std::string s = std::to_string(cpu::physical_core_count()) + " physical cores of " +
                  std::to_string(cpu::available_cpu_count()) + " CPUs this process may run on; default " +
                  std::to_string(cpu::default_thread_count()) + " threads";
  if (const char* env = std::getenv("TESSERA_THREADS")) s += std::string(" (TESSERA_THREADS=") + env + ")";
  return s;
}

}  // namespace tessera
