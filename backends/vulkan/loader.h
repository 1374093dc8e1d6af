// The Vulkan loader, opened at run time (dlopen) so that a Tessera binary starts on a machine
// without one, and the small function table Tessera uses. The instance is process-wide.
#pragma once
#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"

namespace tessera::vulkan {

#define TS_VK_INSTANCE_FUNCS(X)                                                                    \
  X(vkDestroyInstance) X(vkEnumeratePhysicalDevices) X(vkGetPhysicalDeviceProperties)             \
  X(vkGetPhysicalDeviceProperties2) X(vkGetPhysicalDeviceFeatures2)                                \
  X(vkGetPhysicalDeviceMemoryProperties) X(vkGetPhysicalDeviceQueueFamilyProperties)               \
  X(vkCreateDevice) X(vkGetDeviceProcAddr) X(vkEnumerateDeviceExtensionProperties)

#define TS_VK_DEVICE_FUNCS(X)                                                                      \
  X(vkDestroyDevice) X(vkGetDeviceQueue) X(vkCreateBuffer) X(vkDestroyBuffer)                      \
  X(vkGetBufferMemoryRequirements) X(vkAllocateMemory) X(vkFreeMemory) X(vkBindBufferMemory)       \
  X(vkMapMemory) X(vkUnmapMemory) X(vkGetBufferDeviceAddress) X(vkCreateShaderModule)              \
  X(vkDestroyShaderModule) X(vkCreatePipelineLayout) X(vkDestroyPipelineLayout)                    \
  X(vkCreateComputePipelines) X(vkDestroyPipeline) X(vkCreatePipelineCache)                        \
  X(vkDestroyPipelineCache) X(vkCreateCommandPool) X(vkDestroyCommandPool)                         \
  X(vkAllocateCommandBuffers) X(vkResetCommandBuffer) X(vkBeginCommandBuffer)                      \
  X(vkEndCommandBuffer) X(vkCmdBindPipeline) X(vkCmdPushConstants) X(vkCmdDispatch)                \
  X(vkCmdPipelineBarrier) X(vkCmdCopyBuffer) X(vkCmdFillBuffer) X(vkCmdWriteTimestamp) X(vkCmdResetQueryPool)         \
  X(vkCreateQueryPool) X(vkDestroyQueryPool) X(vkGetQueryPoolResults) X(vkCreateFence)             \
  X(vkDestroyFence) X(vkResetFences) X(vkWaitForFences) X(vkQueueSubmit) X(vkDeviceWaitIdle)       \
  X(vkFreeCommandBuffers) X(vkCreateSemaphore) X(vkDestroySemaphore) X(vkWaitSemaphores)           \
  X(vkGetSemaphoreCounterValue)

#define TS_VK_DECLARE(name) PFN_##name name = nullptr;

struct InstanceApi {
  TS_VK_INSTANCE_FUNCS(TS_VK_DECLARE)
};
struct DeviceApi {
  TS_VK_DEVICE_FUNCS(TS_VK_DECLARE)
};

// The loaded library and the VkInstance (with the validation layer and a debug messenger that
// counts its messages when TESSERA_VULKAN_VALIDATION=1).
class Instance {
 public:
  // Opens the loader (env TESSERA_VULKAN_LOADER overrides the name "libvulkan.so.1", so tests can
  // simulate a machine without one) and creates the instance. Unavailable says why not.
  static Result<std::shared_ptr<Instance>> create();
  ~Instance();
  Instance(const Instance&) = delete;
  Instance& operator=(const Instance&) = delete;

  VkInstance handle() const { return instance_; }
  const InstanceApi& api() const { return api_; }
  bool validation() const { return messenger_ != VK_NULL_HANDLE; }
  // Validation messages (warnings and errors) reported so far, and the first one's text.
  uint64_t message_count() const { return messages_.load(); }
  std::string first_message() const;

 private:
  Instance() = default;
  Status init();
  static VKAPI_ATTR VkBool32 VKAPI_CALL on_message(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                                   VkDebugUtilsMessageTypeFlagsEXT types,
                                                   const VkDebugUtilsMessengerCallbackDataEXT* data, void* user);

  void* lib_ = nullptr;
  PFN_vkGetInstanceProcAddr get_instance_proc_ = nullptr;
  VkInstance instance_ = VK_NULL_HANDLE;
  InstanceApi api_;
  VkDebugUtilsMessengerEXT messenger_ = VK_NULL_HANDLE;
  PFN_vkDestroyDebugUtilsMessengerEXT destroy_messenger_ = nullptr;
  std::atomic<uint64_t> messages_{0};
  mutable std::mutex mu_;
  std::string first_message_;
};

// "VK_ERROR_OUT_OF_DEVICE_MEMORY" etc.
const char* vk_result_name(VkResult r);
// Status for a failed call: Unavailable/ResourceExhausted/Internal naming |what| and the code.
Status vk_status(VkResult r, const std::string& what);

#define TS_VK_RETURN_IF_ERROR(call, what)                    \
  do {                                                        \
    const VkResult ts_vk_r_ = (call);                         \
    if (ts_vk_r_ != VK_SUCCESS) return vk_status(ts_vk_r_, what); \
  } while (0)

}  // namespace tessera::vulkan
