#include "backends/vulkan/device.h"

#include <cstring>

#include "backends/vulkan/embedded_shaders.h"
#include "backends/vulkan/recorder.h"
#include "core/registry.h"

namespace tessera::vulkan {

Context::~Context() {
  if (device != VK_NULL_HANDLE) api.vkDestroyDevice(device, nullptr);
}

VulkanBuffer::~VulkanBuffer() {
  const DeviceApi& api = ctx_->api;
  ctx_->device_bytes -= device_bytes_;
  if (host_ptr()) api.vkUnmapMemory(ctx_->device, memory_);
  api.vkDestroyBuffer(ctx_->device, buffer_, nullptr);
  api.vkFreeMemory(ctx_->device, memory_, nullptr);
}

std::string Capabilities::missing() const {
  std::string m;
  auto need = [&m](bool ok, const char* what) {
    if (!ok) m += (m.empty() ? "" : ", ") + std::string(what);
  };
  need(api_version >= VK_API_VERSION_1_2, "Vulkan 1.2");
  need(buffer_device_address, "bufferDeviceAddress");
  need(timeline_semaphore, "timelineSemaphore");
  need(storage16, "storageBuffer16BitAccess");
  need(storage8, "storageBuffer8BitAccess");
  need(int64, "shaderInt64");
  need(subgroup_arithmetic, "subgroup arithmetic in compute shaders");
  need(shared_memory >= 16384, "16 KiB of shared memory");
  need(max_workgroup_invocations >= 256, "256 invocations per workgroup");
  return m;
}

std::string Capabilities::summary() const {
  std::string s;
  if (fp16_arithmetic) s += "fp16 ";
  if (int8_arithmetic) s += "int8 ";
  if (storage16) s += "storage16 ";
  if (storage8) s += "storage8 ";
  s += "subgroup=" + std::to_string(subgroup_size) + (subgroup_arithmetic ? "(arith) " : " ");
  s += "shared=" + std::to_string(shared_memory / 1024) + "KiB ";
  s += "max_storage_range=" + std::to_string(max_storage_range >> 20) + "MiB ";
  if (buffer_device_address) s += "bda ";
  if (fp64) s += "fp64 ";
  if (timestamp_bits) s += "timestamps";
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

Result<std::shared_ptr<VulkanDevice>> VulkanDevice::create(std::shared_ptr<Instance> instance, VkPhysicalDevice physical,
                                                           int index, const Capabilities& caps, DeviceOptions options) {
  std::shared_ptr<VulkanDevice> d(new VulkanDevice());
  TS_RETURN_IF_ERROR(d->init(std::move(instance), physical, index, caps, options));
  return d;
}

namespace {
// The first memory type with all of |want| (in |bits|), or -1.
int find_memory_type(const VkPhysicalDeviceMemoryProperties& mp, uint32_t bits, VkMemoryPropertyFlags want) {
  for (uint32_t i = 0; i < mp.memoryTypeCount; ++i)
    if ((bits & (1u << i)) && (mp.memoryTypes[i].propertyFlags & want) == want) return int(i);
  return -1;
}
}  // namespace

Status VulkanDevice::create_logical_device(const std::shared_ptr<Instance>& instance, VkPhysicalDevice physical) {
  const InstanceApi& ia = instance->api();
  const Capabilities& caps = caps_;
  const DeviceOptions& options = options_;
  VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  f12.bufferDeviceAddress = VK_TRUE;
  f12.storageBuffer8BitAccess = VK_TRUE;
  f12.timelineSemaphore = VK_TRUE;
  f12.shaderFloat16 = caps.fp16_arithmetic;  // optional: the f16 peak kernel (measure_peaks)
  VkPhysicalDeviceVulkan11Features f11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
  f11.storageBuffer16BitAccess = VK_TRUE;
  f11.pNext = &f12;
  VkPhysicalDeviceFeatures2 f2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
  f2.features.shaderInt64 = VK_TRUE;
  f2.features.shaderFloat64 = caps.fp64;  // optional: rope's exact angles
  f2.features.robustBufferAccess = (options.robust_access || instance->validation()) && caps.robust_buffer_access;
  f2.pNext = &f11;
  const float priority = 1.0f;
  VkDeviceQueueCreateInfo qci{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  qci.queueFamilyIndex = queue_family_;
  qci.queueCount = 1;
  qci.pQueuePriorities = &priority;
  VkDeviceCreateInfo dci{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  dci.pNext = &f2;
  dci.queueCreateInfoCount = 1;
  dci.pQueueCreateInfos = &qci;
  ctx_ = std::make_shared<Context>();
  ctx_->instance = instance;
  ctx_->physical = physical;
  TS_VK_RETURN_IF_ERROR(ia.vkCreateDevice(physical, &dci, nullptr, &ctx_->device), "vkCreateDevice");
#define TS_VK_LOAD_DEVICE(fn)                                                                  \
  ctx_->api.fn = reinterpret_cast<PFN_##fn>(ia.vkGetDeviceProcAddr(ctx_->device, #fn));        \
  if (!ctx_->api.fn) return Unavailable("the driver lacks " #fn);
  TS_VK_DEVICE_FUNCS(TS_VK_LOAD_DEVICE)
#undef TS_VK_LOAD_DEVICE
  return OkStatus();
}

Result<size_t> VulkanDevice::choose_memory_types(const InstanceApi& ia, VkPhysicalDevice physical) {
  // Memory types: device-local (mapped too when it is host-visible, as on lavapipe and
  // resizable-BAR GPUs), and host-visible coherent for staging and the params ring.
  VkPhysicalDeviceMemoryProperties mp;
  ia.vkGetPhysicalDeviceMemoryProperties(physical, &mp);
  const int mappable = find_memory_type(mp, ~0u, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT |
                                                     VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT |
                                                     VK_MEMORY_PROPERTY_HOST_COHERENT_BIT);
  const int local = find_memory_type(mp, ~0u, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
  const int host = find_memory_type(mp, ~0u, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT);
  if (host < 0) return Unavailable("no host-visible coherent memory type");
  device_mappable_ = mappable >= 0 && !options_.force_staging;
  device_type_ = uint32_t(mappable >= 0 ? mappable : local >= 0 ? local : host);
  host_visible_type_ = uint32_t(host);
  size_t heap = 0;  // the largest device-local heap
  for (uint32_t i = 0; i < mp.memoryHeapCount; ++i)
    if (mp.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) heap = std::max<size_t>(heap, mp.memoryHeaps[i].size);

  return heap;
}

Status VulkanDevice::init(std::shared_ptr<Instance> instance, VkPhysicalDevice physical, int index,
                          const Capabilities& caps, DeviceOptions options) {
  caps_ = caps;
  caps_.fp64 = caps.fp64 && !options.disable_fp64;
  options_ = options;
  const InstanceApi& ia = instance->api();
  // A queue family with compute.
  uint32_t nq = 0;
  ia.vkGetPhysicalDeviceQueueFamilyProperties(physical, &nq, nullptr);
  std::vector<VkQueueFamilyProperties> qf(nq);
  ia.vkGetPhysicalDeviceQueueFamilyProperties(physical, &nq, qf.data());
  bool found = false;
  for (uint32_t i = 0; i < nq && !found; ++i)
    if (qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) {
      queue_family_ = i;
      caps_.timestamp_bits = qf[i].timestampValidBits;
      found = true;
    }
  if (!found) return Unavailable("no compute queue");

  TS_RETURN_IF_ERROR(create_logical_device(instance, physical));
  const DeviceApi& api = ctx_->api;
  VkDevice dev = ctx_->device;
  api.vkGetDeviceQueue(dev, queue_family_, 0, &queue_);

  VkCommandPoolCreateInfo pci{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pci.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pci.queueFamilyIndex = queue_family_;
  TS_VK_RETURN_IF_ERROR(api.vkCreateCommandPool(dev, &pci, nullptr, &pool_), "vkCreateCommandPool");
  VkSemaphoreTypeCreateInfo sti{VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO};
  sti.semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE;
  sti.initialValue = 0;
  VkSemaphoreCreateInfo sci{VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO};
  sci.pNext = &sti;
  TS_VK_RETURN_IF_ERROR(api.vkCreateSemaphore(dev, &sci, nullptr, &timeline_), "vkCreateSemaphore(timeline)");
  VkPipelineCacheCreateInfo cci{VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
  TS_VK_RETURN_IF_ERROR(api.vkCreatePipelineCache(dev, &cci, nullptr, &cache_), "vkCreatePipelineCache");
  // Every kernel takes one push constant: the device address of its params struct.
  VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof(uint64_t)};
  VkPipelineLayoutCreateInfo lci{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  lci.pushConstantRangeCount = 1;
  lci.pPushConstantRanges = &range;
  TS_VK_RETURN_IF_ERROR(api.vkCreatePipelineLayout(dev, &lci, nullptr, &layout_), "vkCreatePipelineLayout");

  TS_ASSIGN_OR_RETURN(const size_t heap, choose_memory_types(ia, physical));
  VkPhysicalDeviceProperties props;
  ia.vkGetPhysicalDeviceProperties(physical, &props);
  info_.id = "vulkan:" + std::to_string(index);
  info_.name = props.deviceName;
  info_.backend = "vulkan";
  info_.emulated = props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
  // A Vulkan implementation on the CPU shares host memory as an integrated GPU does.
  info_.type = props.deviceType == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU ||
                       props.deviceType == VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU
                   ? DeviceType::kGpu
               : props.deviceType == VK_PHYSICAL_DEVICE_TYPE_OTHER ? DeviceType::kAccelerator
                                                                   : DeviceType::kIntegratedGpu;
  info_.pads_decode_batches = !info_.emulated;
  caps_.tiled_gemm = !info_.emulated || options.force_tiled_gemm;
  info_.memory_bytes = heap;
  heap_bytes_ = heap;
  info_.features = caps_.summary();
  return OkStatus();
}

VulkanDevice::~VulkanDevice() {
  if (!ctx_ || ctx_->device == VK_NULL_HANDLE) return;
  const DeviceApi& api = ctx_->api;
  VkDevice dev = ctx_->device;
  if (api.vkDeviceWaitIdle) api.vkDeviceWaitIdle(dev);
  closing_ = true;
  release_executor();  // its executables free command buffers from pool_
  in_flight_.clear();
  for (auto& [key, p] : pipelines_) api.vkDestroyPipeline(dev, p, nullptr);
  if (layout_) api.vkDestroyPipelineLayout(dev, layout_, nullptr);
  if (cache_) api.vkDestroyPipelineCache(dev, cache_, nullptr);
  if (timeline_) api.vkDestroySemaphore(dev, timeline_, nullptr);
  if (pool_) api.vkDestroyCommandPool(dev, pool_, nullptr);
}

Result<std::shared_ptr<VulkanBuffer>> VulkanDevice::make_buffer(size_t bytes, bool host_visible) {
  if (caps_.max_allocation && bytes > caps_.max_allocation)
    return ResourceExhausted(info_.id + ": allocation of " + std::to_string(bytes) + " bytes exceeds the driver's " +
                             "maxMemoryAllocationSize (" + std::to_string(caps_.max_allocation) + ")");
  const DeviceApi& api = ctx_->api;
  VkDevice dev = ctx_->device;
  VkBufferCreateInfo bci{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  bci.size = std::max<size_t>(bytes, 16);
  bci.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT |
              VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  bci.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  VkBuffer buf = VK_NULL_HANDLE;
  TS_VK_RETURN_IF_ERROR(api.vkCreateBuffer(dev, &bci, nullptr, &buf), "vkCreateBuffer(" + std::to_string(bytes) + ")");
  VkMemoryRequirements req;
  api.vkGetBufferMemoryRequirements(dev, buf, &req);
  VkMemoryAllocateFlagsInfo flags{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO};
  flags.flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT;
  VkMemoryAllocateInfo mai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  mai.pNext = &flags;
  mai.allocationSize = req.size;
  mai.memoryTypeIndex = host_visible ? host_visible_type_ : device_type_;
  VkDeviceMemory mem = VK_NULL_HANDLE;
  VkResult r = api.vkAllocateMemory(dev, &mai, nullptr, &mem);
  if (r != VK_SUCCESS) {
    api.vkDestroyBuffer(dev, buf, nullptr);
    return vk_status(r, info_.id + ": vkAllocateMemory(" + std::to_string(bytes) + " bytes)");
  }
  void* mapped = nullptr;
  r = api.vkBindBufferMemory(dev, buf, mem, 0);
  if (r == VK_SUCCESS && (host_visible || device_mappable_)) r = api.vkMapMemory(dev, mem, 0, VK_WHOLE_SIZE, 0, &mapped);
  if (r != VK_SUCCESS) {
    api.vkDestroyBuffer(dev, buf, nullptr);
    api.vkFreeMemory(dev, mem, nullptr);
    return vk_status(r, info_.id + ": binding/mapping a buffer");
  }
  VkBufferDeviceAddressInfo ai{VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO};
  ai.buffer = buf;
  const VkDeviceAddress addr = api.vkGetBufferDeviceAddress(dev, &ai);
  return std::make_shared<VulkanBuffer>(this, ctx_, bytes, mapped, buf, mem, addr, host_visible ? 0 : size_t(req.size));
}

Result<BufferPtr> VulkanDevice::alloc(size_t bytes, MemoryKind kind) {
  TS_ASSIGN_OR_RETURN(auto b, make_buffer(bytes, kind != MemoryKind::kDevice));
  return BufferPtr(std::move(b));
}

MemoryInfo VulkanDevice::memory() const {
  const size_t used = ctx_->device_bytes.load();
  return {heap_bytes_, heap_bytes_ > used ? heap_bytes_ - used : 0};
}

void memory_barrier(const DeviceApi& api, VkCommandBuffer cmd, VkPipelineStageFlags src_stage, VkAccessFlags src,
                    VkPipelineStageFlags dst_stage, VkAccessFlags dst) {
  VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  mb.srcAccessMask = src;
  mb.dstAccessMask = dst;
  api.vkCmdPipelineBarrier(cmd, src_stage, dst_stage, 0, 1, &mb, 0, nullptr, 0, nullptr);
}

Status VulkanDevice::copy_via_staging(const VulkanBuffer& buf, size_t offset, void* host, size_t bytes, bool to_device) {
  TS_ASSIGN_OR_RETURN(auto staging, make_buffer(bytes, true));
  if (to_device) std::memcpy(staging->host_ptr(), host, bytes);
  const VkBuffer staged = staging->handle(), target = buf.handle();
  std::vector<std::shared_ptr<VulkanBuffer>> keep = {staging};
  TS_ASSIGN_OR_RETURN(const Event e, run_async(
                                         [&](VkCommandBuffer cmd) {
                                           VkBufferCopy region{to_device ? 0 : offset, to_device ? offset : 0, bytes};
                                           ctx_->api.vkCmdCopyBuffer(cmd, to_device ? staged : target,
                                                                     to_device ? target : staged, 1, &region);
                                         },
                                         std::move(keep)));
  // An upload is queued (the staging buffer holds the data until it ran); a download waits.
  if (to_device) return OkStatus();
  TS_RETURN_IF_ERROR(wait(e));
  std::memcpy(host, staging->host_ptr(), bytes);
  return OkStatus();
}

namespace {
Status check_transfer(const Device* self, const DeviceInfo& info, const char* what, const Tensor& t, size_t bytes) {
  if (!t.buffer || t.buffer->device() != self)
    return InvalidArgument(info.id + ": " + what + " of a tensor not allocated by this device: " + t.shape_string());
  if (!t.is_contiguous()) return InvalidArgument(info.id + ": " + what + " needs a contiguous tensor, got " + t.shape_string());
  if (int64_t(bytes) > t.nbytes() || t.offset + bytes > t.buffer->size())
    return OutOfRange(info.id + ": " + what + " of " + std::to_string(bytes) + " bytes at offset " +
                      std::to_string(t.offset) + " exceeds " + t.shape_string() + " (" + std::to_string(t.nbytes()) +
                      " bytes, buffer " + std::to_string(t.buffer->size()) + ")");
  return OkStatus();
}
}  // namespace

Status VulkanDevice::upload(const Tensor& dst, const void* src, size_t bytes) {
  TS_RETURN_IF_ERROR(check_transfer(this, info_, "upload", dst, bytes));
  if (void* p = dst.host_data()) {
    TS_RETURN_IF_ERROR(wait(Event{submitted_}));  // queued work may still read or write it
    std::memcpy(p, src, bytes);
    return OkStatus();
  }
  return copy_via_staging(static_cast<const VulkanBuffer&>(*dst.buffer), dst.offset, const_cast<void*>(src), bytes, true);
}

Status VulkanDevice::download(const Tensor& src, void* dst, size_t bytes) {
  TS_RETURN_IF_ERROR(check_transfer(this, info_, "download", src, bytes));
  if (const void* p = src.host_data()) {
    TS_RETURN_IF_ERROR(wait(Event{submitted_}));
    std::memcpy(dst, p, bytes);
    return OkStatus();
  }
  return copy_via_staging(static_cast<const VulkanBuffer&>(*src.buffer), src.offset, dst, bytes, false);
}

Result<VkPipeline> VulkanDevice::pipeline(const std::string& kernel, const std::vector<uint32_t>& spec) {
  std::string key = kernel;
  for (uint32_t v : spec) key += "/" + std::to_string(v);
  if (auto it = pipelines_.find(key); it != pipelines_.end()) return it->second;
  const EmbeddedShader* shader = find_embedded_shader(kernel);
  if (!shader) return Internal("vulkan: no embedded shader '" + kernel + "'");
  const DeviceApi& api = ctx_->api;
  VkShaderModuleCreateInfo smi{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
  smi.codeSize = shader->size;
  smi.pCode = reinterpret_cast<const uint32_t*>(shader->data);
  VkShaderModule module = VK_NULL_HANDLE;
  TS_VK_RETURN_IF_ERROR(api.vkCreateShaderModule(ctx_->device, &smi, nullptr, &module), "vkCreateShaderModule " + kernel);
  std::vector<VkSpecializationMapEntry> entries;
  for (uint32_t i = 0; i < spec.size(); ++i) entries.push_back({i, i * 4u, 4u});
  VkSpecializationInfo si{uint32_t(entries.size()), entries.data(), spec.size() * 4u, spec.data()};
  VkComputePipelineCreateInfo ci{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  ci.stage = {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO};
  ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  ci.stage.module = module;
  ci.stage.pName = "main";
  ci.stage.pSpecializationInfo = spec.empty() ? nullptr : &si;
  ci.layout = layout_;
  VkPipeline p = VK_NULL_HANDLE;
  const VkResult r = api.vkCreateComputePipelines(ctx_->device, cache_, 1, &ci, nullptr, &p);
  api.vkDestroyShaderModule(ctx_->device, module, nullptr);
  if (r != VK_SUCCESS) return vk_status(r, "creating pipeline " + key);
  pipelines_[key] = p;
  return p;
}

Status VulkanDevice::check_validation() const {
  const Instance& inst = *ctx_->instance;
  if (inst.message_count() == 0) return OkStatus();
  return Internal(info_.id + ": the validation layer reported " + std::to_string(inst.message_count()) +
                  " message(s); the first: " + inst.first_message());
}

Status VulkanDevice::synchronize() { return wait(Event{submitted_}); }

}  // namespace tessera::vulkan
