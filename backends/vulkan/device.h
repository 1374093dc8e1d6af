// The Vulkan backend: compute pipelines from SPIR-V embedded at build time, one command buffer
// per graph, tensors addressed by buffer device address (so weights beyond
// maxStorageBufferRange need no splitting and strided views cost nothing).
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/vulkan/loader.h"
#include "core/device.h"
#include "core/planner.h"
#include "core/registry.h"

namespace tessera::vulkan {

// What the backend found out about a physical device (filled by the probe).
struct Capabilities {
  uint32_t api_version = 0;
  uint32_t subgroup_size = 0;
  bool subgroup_arithmetic = false;
  bool fp16_arithmetic = false, int8_arithmetic = false;
  bool storage16 = false, storage8 = false;
  bool int64 = false, fp64 = false, buffer_device_address = false, robust_buffer_access = false;
  uint32_t shared_memory = 0;
  uint64_t max_storage_range = 0, max_allocation = 0;
  uint32_t max_workgroup_invocations = 0;
  uint32_t timestamp_bits = 0;
  float timestamp_period_ns = 1.0f;
  // Prefill matmuls (M > 8) use the tiled shared-memory GEMM; a CPU implementation (lavapipe)
  // runs the GEMV instead, since each shared-memory read costs it a per-lane loop (set from
  // the device type and DeviceOptions::force_tiled_gemm).
  bool tiled_gemm = true;
  // Empty when usable, else what is missing ("bufferDeviceAddress, shaderFloat64").
  std::string missing() const;
  std::string summary() const;  // DeviceInfo::features
};

// Options a test may set when it builds a device directly.
struct DeviceOptions {
  bool force_staging = false;  // never map memory: exercise the staging-buffer upload/download path
  bool robust_access = false;  // enable robustBufferAccess (also on under validation)
  bool disable_fp64 = false;   // behave as a device without shaderFloat64 (rope's float variant)
  bool force_tiled_gemm = false;  // use the tiled GEMM for M > 8 even on a CPU implementation
};

// The VkDevice and its function table, shared by the device and every buffer it allocated (a
// buffer may outlive its Device object).
struct Context {
  std::shared_ptr<Instance> instance;
  VkPhysicalDevice physical = VK_NULL_HANDLE;
  VkDevice device = VK_NULL_HANDLE;
  DeviceApi api;
  ~Context();
};

class VulkanBuffer final : public Buffer {
 public:
  VulkanBuffer(Device* owner, std::shared_ptr<Context> ctx, size_t size, void* mapped, VkBuffer buffer,
               VkDeviceMemory memory, VkDeviceAddress address)
      : Buffer(owner, size, mapped), ctx_(std::move(ctx)), buffer_(buffer), memory_(memory), address_(address) {}
  ~VulkanBuffer() override;
  VkBuffer handle() const { return buffer_; }
  VkDeviceAddress address() const { return address_; }

 private:
  std::shared_ptr<Context> ctx_;
  VkBuffer buffer_;
  VkDeviceMemory memory_;
  VkDeviceAddress address_;
};

// One dispatch's measured time (from timestamp queries), for tessera-bench.
struct DispatchTiming {
  std::string kernel;  // "matmul_vec_q4_0", "attention_store", ...
  OpKind op;
  double microseconds;
};

class Recorder;

class VulkanDevice final : public Device {
 public:
  // Creates the logical device for |physical| (index |index| of the instance's devices).
  static Result<std::shared_ptr<VulkanDevice>> create(std::shared_ptr<Instance> instance, VkPhysicalDevice physical,
                                                      int index, const Capabilities& caps, DeviceOptions options);
  ~VulkanDevice() override;

  const DeviceInfo& info() const override { return info_; }
  Result<BufferPtr> alloc(size_t bytes) override;
  Status upload(const Tensor& dst, const void* src, size_t bytes) override;
  Status download(const Tensor& src, void* dst, size_t bytes) override;
  bool supports(OpKind op, DType act, DType weight) const override;
  Status compute(Graph& graph) override;
  Status synchronize() override;
  // The sum of last_timings() after compute(|graph|); Unimplemented without timestamp queries.
  Result<double> time_compute(Graph& graph) override;

  // Per-dispatch times of the last compute() (empty when the queue has no timestamps).
  const std::vector<DispatchTiming>& last_timings() const { return timings_; }
  const Capabilities& capabilities() const { return caps_; }
  // Pipelines created so far (lazily, one per kernel and specialisation).
  size_t pipeline_count() const { return pipelines_.size(); }

 private:
  friend class Recorder;
  VulkanDevice() = default;
  Status init(std::shared_ptr<Instance> instance, VkPhysicalDevice physical, int index, const Capabilities& caps,
              DeviceOptions options);
  Status create_logical_device(const std::shared_ptr<Instance>& instance, VkPhysicalDevice physical);
  // Picks the device and host-visible memory types; returns the device-local heap size.
  Result<size_t> choose_memory_types(const InstanceApi& ia, VkPhysicalDevice physical);
  Result<VkPipeline> pipeline(const std::string& kernel, const std::vector<uint32_t>& spec);
  Result<std::shared_ptr<VulkanBuffer>> make_buffer(size_t bytes, bool host_visible);
  // Runs |record| in a one-shot command buffer and waits (staging copies).
  Status run_once(const std::function<void(VkCommandBuffer)>& record);
  Status copy_via_staging(const VulkanBuffer& buf, size_t offset, void* host, size_t bytes, bool to_device);
  Status check_validation() const;

  DeviceInfo info_;
  Capabilities caps_;
  DeviceOptions options_;
  std::shared_ptr<Context> ctx_;
  uint32_t queue_family_ = 0;
  VkQueue queue_ = VK_NULL_HANDLE;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  VkCommandBuffer cmd_ = VK_NULL_HANDLE;
  VkFence fence_ = VK_NULL_HANDLE;
  VkPipelineCache cache_ = VK_NULL_HANDLE;
  VkPipelineLayout layout_ = VK_NULL_HANDLE;
  VkQueryPool queries_ = VK_NULL_HANDLE;
  uint32_t query_capacity_ = 0;
  uint32_t host_visible_type_ = 0, device_type_ = 0;
  bool device_mappable_ = false;
  std::map<std::string, VkPipeline> pipelines_;
  std::vector<std::shared_ptr<VulkanBuffer>> params_chunks_;  // the params ring
  GraphArena arena_;
  std::vector<DispatchTiming> timings_;
};

// Records a global memory barrier (all the backend needs: it never aliases images or queues).
void memory_barrier(const DeviceApi& api, VkCommandBuffer cmd, VkPipelineStageFlags src_stage, VkAccessFlags src,
                    VkPipelineStageFlags dst_stage, VkAccessFlags dst);

// Probes every physical device into entries "vulkan:N" (defined in probe.cpp).
void probe_devices(std::vector<DeviceEntry>& out, DeviceOptions options);

}  // namespace tessera::vulkan
