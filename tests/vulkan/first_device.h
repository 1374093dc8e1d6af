// The first usable Vulkan device, opened with |options|, or null when there is none (the tests
// then skip). Shared by the unit_vulkan test files.
#pragma once
#include <memory>
#include <vector>

#include "backends/vulkan/device.h"

namespace tessera::vulkan {

inline std::shared_ptr<VulkanDevice> first_device(DeviceOptions options = {}) {
  std::vector<DeviceEntry> entries;
  probe_devices(entries, options);
  for (auto& e : entries)
    if (e.device) return std::static_pointer_cast<VulkanDevice>(e.device);
  return nullptr;
}

}  // namespace tessera::vulkan
