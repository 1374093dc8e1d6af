// probe_vulkan: one registry entry per physical device ("vulkan:N"), or one entry saying why
// there is none (no loader, no device, missing features).
#include <cstdlib>
#include <cstring>

#include "backends/vulkan/device.h"
#include "core/registry.h"

namespace tessera {
namespace vulkan {

namespace {
Capabilities query_capabilities(const InstanceApi& api, VkPhysicalDevice pd) {
  Capabilities c;
  VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  VkPhysicalDeviceVulkan11Features f11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
  f11.pNext = &f12;
  VkPhysicalDeviceFeatures2 f2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
  f2.pNext = &f11;
  VkPhysicalDeviceProperties props;
  api.vkGetPhysicalDeviceProperties(pd, &props);
  c.api_version = props.apiVersion;
  if (c.api_version < VK_API_VERSION_1_2) return c;  // the 1.1/1.2 structs below are unknown to it
  api.vkGetPhysicalDeviceFeatures2(pd, &f2);
  VkPhysicalDeviceVulkan11Properties p11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_PROPERTIES};
  VkPhysicalDeviceProperties2 p2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
  VkPhysicalDeviceMaintenance3Properties m3{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
  p11.pNext = &m3;
  p2.pNext = &p11;
  api.vkGetPhysicalDeviceProperties2(pd, &p2);
  c.subgroup_size = p11.subgroupSize;
  c.subgroup_arithmetic = (p11.subgroupSupportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                          (p11.subgroupSupportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT) &&
                          (p11.subgroupSupportedOperations & VK_SUBGROUP_FEATURE_BASIC_BIT);
  c.fp16_arithmetic = f12.shaderFloat16;
  c.int8_arithmetic = f12.shaderInt8;
  c.storage16 = f11.storageBuffer16BitAccess;
  c.storage8 = f12.storageBuffer8BitAccess;
  c.int64 = f2.features.shaderInt64;
  c.fp64 = f2.features.shaderFloat64;
  c.buffer_device_address = f12.bufferDeviceAddress;
  c.timeline_semaphore = f12.timelineSemaphore;
  c.robust_buffer_access = f2.features.robustBufferAccess;
  c.shared_memory = props.limits.maxComputeSharedMemorySize;
  c.max_storage_range = props.limits.maxStorageBufferRange;
  c.max_allocation = m3.maxMemoryAllocationSize;
  c.max_workgroup_invocations = props.limits.maxComputeWorkGroupInvocations;
  c.timestamp_period_ns = props.limits.timestampPeriod;
  if (!props.limits.timestampComputeAndGraphics) c.timestamp_bits = 0;
  return c;
}
}  // namespace

void probe_devices(std::vector<DeviceEntry>& out, DeviceOptions options) {
  auto inst = Instance::create();
  if (!inst.ok()) {
    out.push_back({"vulkan", "vulkan", nullptr, Unavailable(inst.status().message())});
    return;
  }
  const InstanceApi& api = (*inst)->api();
  uint32_t n = 0;
  api.vkEnumeratePhysicalDevices((*inst)->handle(), &n, nullptr);
  std::vector<VkPhysicalDevice> pds(n);
  if (n) api.vkEnumeratePhysicalDevices((*inst)->handle(), &n, pds.data());
  if (n == 0) {
    out.push_back({"vulkan", "vulkan", nullptr, Unavailable("no device (the loader found no Vulkan driver)")});
    return;
  }
  const char* robust = std::getenv("TESSERA_VULKAN_ROBUST");
  if (robust && *robust && std::strcmp(robust, "0") != 0) options.robust_access = true;
  const char* tiled = std::getenv("TESSERA_VULKAN_TILED_GEMM");  // tests: the tiled GEMM on lavapipe too
  if (tiled && *tiled && std::strcmp(tiled, "0") != 0) options.force_tiled_gemm = true;
  for (uint32_t i = 0; i < n; ++i) {
    const std::string id = "vulkan:" + std::to_string(i);
    VkPhysicalDeviceProperties props;
    api.vkGetPhysicalDeviceProperties(pds[i], &props);
    const Capabilities caps = query_capabilities(api, pds[i]);
    if (const std::string missing = caps.missing(); !missing.empty()) {
      out.push_back({"vulkan", id, nullptr, Unavailable(id + " (" + props.deviceName + ") lacks " + missing)});
      continue;
    }
    auto dev = VulkanDevice::create(*inst, pds[i], int(i), caps, options);
    if (!dev.ok()) {
      out.push_back({"vulkan", id, nullptr, Unavailable(id + " (" + props.deviceName + "): " + dev.status().message())});
      continue;
    }
    out.push_back({"vulkan", id, *dev, OkStatus()});
  }
}

}  // namespace vulkan

void probe_vulkan(std::vector<DeviceEntry>& out) { vulkan::probe_devices(out, {}); }

}  // namespace tessera
