// The Vulkan backend: compute pipelines from SPIR-V embedded at build time, one command buffer
// per graph, tensors addressed by buffer device address (so weights beyond
// maxStorageBufferRange need no splitting and strided views cost nothing).
#pragma once
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/vulkan/loader.h"
#include "core/device.h"
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
  bool timeline_semaphore = false;  // the queue's events (Vulkan 1.2 makes it mandatory)
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
  std::atomic<size_t> device_bytes{0};  // device-local memory held by live buffers
  ~Context();
};

class VulkanBuffer final : public Buffer {
 public:
  VulkanBuffer(Device* owner, std::shared_ptr<Context> ctx, size_t size, void* mapped, VkBuffer buffer,
               VkDeviceMemory memory, VkDeviceAddress address, size_t device_bytes)
      : Buffer(owner, size, mapped), ctx_(std::move(ctx)), buffer_(buffer), memory_(memory), address_(address),
        device_bytes_(device_bytes) {
    ctx_->device_bytes += device_bytes_;
  }
  ~VulkanBuffer() override;
  VkBuffer handle() const { return buffer_; }
  VkDeviceAddress address() const { return address_; }
  // The queue value of the last copy() that writes this buffer: until the queue passes it, what
  // the host sees through host_ptr() is not yet what the device will read.
  uint64_t queued_write() const { return queued_write_; }
  void set_queued_write(uint64_t value) const { queued_write_ = value; }

 private:
  std::shared_ptr<Context> ctx_;
  VkBuffer buffer_;
  VkDeviceMemory memory_;
  VkDeviceAddress address_;
  size_t device_bytes_;  // counted in Context::device_bytes (0 for host-visible memory)
  mutable uint64_t queued_write_ = 0;
};

// One dispatch's measured time (from timestamp queries), for tessera-bench.
struct DispatchTiming {
  std::string kernel;  // "matmul_vec_q4_0", "attention_store", ...
  OpKind op;
  double microseconds;
};

class Recorder;
class VulkanExecutable;

class VulkanDevice final : public Device {
 public:
  // Creates the logical device for |physical| (index |index| of the instance's devices).
  static Result<std::shared_ptr<VulkanDevice>> create(std::shared_ptr<Instance> instance, VkPhysicalDevice physical,
                                                      int index, const Capabilities& caps, DeviceOptions options);
  ~VulkanDevice() override;

  const DeviceInfo& info() const override { return info_; }
  // kDevice: device-local (mapped too where the driver allows, as on lavapipe); kHostPinned and
  // kHostVisible: host-visible coherent memory, always mapped.
  Result<BufferPtr> alloc(size_t bytes, MemoryKind kind = MemoryKind::kDevice) override;
  MemoryInfo memory() const override;
  // Both wait for the queued work first (the host touches memory the queue may be using).
  Status upload(const Tensor& dst, const void* src, size_t bytes) override;
  Status download(const Tensor& src, void* dst, size_t bytes) override;
  // One command buffer: vkCmdCopyBuffer per (src, dst) buffer pair with all their regions.
  Result<Event> copy(std::span<const CopyRegion> regions) override;
  bool supports(OpKind op, DType act, DType weight) const override;
  // Records the graph into a command buffer of its own (params in memory of its own), replayed by
  // every submit().
  Result<ExecutablePtr> prepare(Graph& graph) override;
  Result<Event> submit(Executable& exe) override;
  // Waits on the queue's timeline semaphore: no fence per submission.
  Status wait(Event event) override;
  Status synchronize() override;
  // The sum of last_timings() after compute(|graph|); Unimplemented without timestamp queries.
  Result<double> time_compute(Graph& graph) override;
  // The ceilings from the peak kernels of shaders/peaks.comp on the queue's timestamps: 16-byte
  // streaming read and copy over a buffer several times the last-level cache, f32 (and f16 where
  // the device has shaderFloat16) FMA loops. Unimplemented without timestamp queries.
  Result<std::vector<PeakFigure>> measure_peaks(bool quick) override;

  // Command buffers recorded so far (one per executable the executor built); a steady decode
  // records none.
  int64_t recordings() const { return recordings_; }
  // Per-dispatch times of the last executable waited for (empty when the queue has no timestamps).
  const std::vector<DispatchTiming>& last_timings() const { return timings_; }
  const Capabilities& capabilities() const { return caps_; }
  // Pipelines created so far (lazily, one per kernel and specialisation).
  size_t pipeline_count() const { return pipelines_.size(); }

 private:
  friend class Recorder;
  friend class VulkanExecutable;
  VulkanDevice() = default;
  Status init(std::shared_ptr<Instance> instance, VkPhysicalDevice physical, int index, const Capabilities& caps,
              DeviceOptions options);
  Status create_logical_device(const std::shared_ptr<Instance>& instance, VkPhysicalDevice physical);
  // Picks the device and host-visible memory types; returns the device-local heap size.
  Result<size_t> choose_memory_types(const InstanceApi& ia, VkPhysicalDevice physical);
  Result<VkPipeline> pipeline(const std::string& kernel, const std::vector<uint32_t>& spec);
  Result<std::shared_ptr<VulkanBuffer>> make_buffer(size_t bytes, bool host_visible);
  size_t heap_bytes_ = 0;  // the device-local heap
  // Records |record| into a transient command buffer and queues it; |keep| lives until it ran.
  Result<Event> run_async(const std::function<void(VkCommandBuffer)>& record,
                          std::vector<std::shared_ptr<VulkanBuffer>> keep = {});
  // Queues |cmd| and signals the next timeline value, which it returns.
  Result<uint64_t> queue_submit(VkCommandBuffer cmd);
  // Recycles transient command buffers (and their kept buffers) whose work has completed.
  void retire(uint64_t completed);
  Result<VkCommandBuffer> transient_command_buffer();
  // Reads the timestamps of |exe|'s last run into timings_.
  Status read_timings(const VulkanExecutable& exe);
  Status copy_via_staging(const VulkanBuffer& buf, size_t offset, void* host, size_t bytes, bool to_device);
  Status check_validation() const;
  // Runs |kernel| (no specialisation) |reps| times in one command buffer, a barrier between runs,
  // and returns each run's seconds from the timestamps around it.
  Result<std::vector<double>> time_peak_kernel(const std::string& kernel, uint64_t params_addr, uint32_t groups, int reps);

  DeviceInfo info_;
  Capabilities caps_;
  DeviceOptions options_;
  std::shared_ptr<Context> ctx_;
  uint32_t queue_family_ = 0;
  VkQueue queue_ = VK_NULL_HANDLE;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  VkPipelineCache cache_ = VK_NULL_HANDLE;
  VkPipelineLayout layout_ = VK_NULL_HANDLE;
  uint32_t host_visible_type_ = 0, device_type_ = 0;
  bool device_mappable_ = false;
  std::map<std::string, VkPipeline> pipelines_;
  // The queue: a timeline semaphore whose value counts completed submissions.
  VkSemaphore timeline_ = VK_NULL_HANDLE;
  uint64_t submitted_ = 0;  // the value the latest submission signals
  uint64_t completed_ = 0;  // the highest value seen reached
  struct Transient {
    VkCommandBuffer cmd;
    uint64_t value;
    std::vector<std::shared_ptr<VulkanBuffer>> keep;
  };
  std::vector<Transient> in_flight_;           // copies and staging transfers not yet retired
  std::vector<VkCommandBuffer> free_commands_;  // transient command buffers ready for reuse
  size_t allocated_bytes_ = 0;                  // kDevice memory allocated and not yet freed (approximate)
  const VulkanExecutable* last_exe_ = nullptr;  // the latest submitted executable (for timings)
  int64_t recordings_ = 0;
  bool closing_ = false;  // in the destructor: executables leave their command buffers to the pool
  std::vector<DispatchTiming> timings_;
};

// Records a global memory barrier (all the backend needs: it never aliases images or queues).
void memory_barrier(const DeviceApi& api, VkCommandBuffer cmd, VkPipelineStageFlags src_stage, VkAccessFlags src,
                    VkPipelineStageFlags dst_stage, VkAccessFlags dst);

// Probes every physical device into entries "vulkan:N" (defined in probe.cpp).
void probe_devices(std::vector<DeviceEntry>& out, DeviceOptions options);

}  // namespace tessera::vulkan
