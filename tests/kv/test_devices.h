// The devices the HAL transfer tests run on: the CPU and, where the Vulkan backend is built
// (TESSERA_TEST_VULKAN), a Vulkan device whose memory the host cannot address (force_staging),
// so that any host round trip would have to show up as an upload or download.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/cpu/cpu_device.h"
#ifdef TESSERA_TEST_VULKAN
#include "tests/vulkan/first_device.h"
#endif

namespace tessera::testing {

inline std::vector<std::pair<std::string, DevicePtr>> cpu_and_unmapped_vulkan(int cpu_threads) {
  std::vector<std::pair<std::string, DevicePtr>> out;
  out.push_back({"cpu", std::make_shared<cpu::CpuDevice>(cpu_threads)});
#ifdef TESSERA_TEST_VULKAN
  if (auto v = vulkan::first_device({.force_staging = true})) out.push_back({"vulkan (unmapped memory)", v});
#endif
  return out;
}

}  // namespace tessera::testing
