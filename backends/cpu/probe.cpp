#include <algorithm>

#include "backends/cpu/cpu_device.h"
#include "core/registry.h"

namespace tessera {

void probe_cpu(std::vector<DeviceEntry>& out) {
  out.push_back({"cpu", "cpu", std::make_shared<cpu::CpuDevice>(cpu::default_thread_count()), OkStatus()});
}

DevicePtr make_cpu_device(int threads) { return std::make_shared<cpu::CpuDevice>(std::max(1, threads)); }

}  // namespace tessera
