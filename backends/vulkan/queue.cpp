// The Vulkan device's queue: submissions signal increasing values of one timeline semaphore, an
// Event is such a value, and the host waits on the semaphore only when it needs a result (no
// fence per submission). Transient command buffers (copies, staging transfers) are recycled once
// the timeline passes their value.
#include <algorithm>
#include <map>

#include "backends/vulkan/device.h"

namespace tessera::vulkan {

Result<VkCommandBuffer> VulkanDevice::transient_command_buffer() {
  if (!free_commands_.empty()) {
    VkCommandBuffer cmd = free_commands_.back();
    free_commands_.pop_back();
    return cmd;
  }
  VkCommandBufferAllocateInfo cai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  cai.commandPool = pool_;
  cai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  cai.commandBufferCount = 1;
  VkCommandBuffer cmd = VK_NULL_HANDLE;
  TS_VK_RETURN_IF_ERROR(ctx_->api.vkAllocateCommandBuffers(ctx_->device, &cai, &cmd), "vkAllocateCommandBuffers");
  return cmd;
}

Result<uint64_t> VulkanDevice::queue_submit(VkCommandBuffer cmd) {
  const uint64_t value = submitted_ + 1;
  VkTimelineSemaphoreSubmitInfo ti{VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO};
  ti.signalSemaphoreValueCount = 1;
  ti.pSignalSemaphoreValues = &value;
  VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  si.pNext = &ti;
  si.commandBufferCount = 1;
  si.pCommandBuffers = &cmd;
  si.signalSemaphoreCount = 1;
  si.pSignalSemaphores = &timeline_;
  TS_VK_RETURN_IF_ERROR(ctx_->api.vkQueueSubmit(queue_, 1, &si, VK_NULL_HANDLE), "vkQueueSubmit");
  submitted_ = value;
  return value;
}

void VulkanDevice::retire(uint64_t completed) {
  completed_ = std::max(completed_, completed);
  auto done = std::partition(in_flight_.begin(), in_flight_.end(), [&](const Transient& t) { return t.value > completed_; });
  for (auto it = done; it != in_flight_.end(); ++it) free_commands_.push_back(it->cmd);
  in_flight_.erase(done, in_flight_.end());
}

Result<Event> VulkanDevice::run_async(const std::function<void(VkCommandBuffer)>& record,
                                      std::vector<std::shared_ptr<VulkanBuffer>> keep) {
  const DeviceApi& api = ctx_->api;
  TS_ASSIGN_OR_RETURN(VkCommandBuffer cmd, transient_command_buffer());
  TS_VK_RETURN_IF_ERROR(api.vkResetCommandBuffer(cmd, 0), "vkResetCommandBuffer");
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  TS_VK_RETURN_IF_ERROR(api.vkBeginCommandBuffer(cmd, &bi), "vkBeginCommandBuffer");
  // Earlier dispatches and copies before these copies; their writes before whatever comes next
  // (dispatches, other copies, the host).
  memory_barrier(api, cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                 VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT,
                 VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT);
  record(cmd);
  memory_barrier(api, cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT,
                 VK_PIPELINE_STAGE_HOST_BIT | VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                 VK_ACCESS_HOST_READ_BIT | VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                     VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT);
  TS_VK_RETURN_IF_ERROR(api.vkEndCommandBuffer(cmd), "vkEndCommandBuffer");
  auto value = queue_submit(cmd);
  if (!value.ok()) {
    free_commands_.push_back(cmd);
    return value.status();
  }
  in_flight_.push_back({cmd, *value, std::move(keep)});
  return Event{*value};
}

Result<Event> VulkanDevice::copy(std::span<const CopyRegion> regions) {
  TS_RETURN_IF_ERROR(check_copy_regions(*this, regions));
  if (regions.empty()) return Event{};
  // One vkCmdCopyBuffer per (src, dst) pair, with every region between them.
  std::map<std::pair<VkBuffer, VkBuffer>, std::vector<VkBufferCopy>> by_pair;
  for (const CopyRegion& r : regions) {
    const VkBuffer src = static_cast<const VulkanBuffer*>(r.src)->handle();
    const VkBuffer dst = static_cast<const VulkanBuffer*>(r.dst)->handle();
    if (r.bytes > 0) by_pair[{src, dst}].push_back({r.src_offset, r.dst_offset, r.bytes});
  }
  TS_ASSIGN_OR_RETURN(const Event e, run_async([&](VkCommandBuffer cmd) {
    for (const auto& [pair, list] : by_pair)
      ctx_->api.vkCmdCopyBuffer(cmd, pair.first, pair.second, uint32_t(list.size()), list.data());
  }));
  for (const CopyRegion& r : regions) static_cast<const VulkanBuffer*>(r.dst)->set_queued_write(e.value);
  return e;
}

Status VulkanDevice::wait(Event event) {
  if (event.value > submitted_)
    return InvalidArgument(info_.id + ": wait for event " + std::to_string(event.value) + ", but only " +
                           std::to_string(submitted_) + " were submitted");
  if (event.value > completed_) {
    VkSemaphoreWaitInfo wi{VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO};
    wi.semaphoreCount = 1;
    wi.pSemaphores = &timeline_;
    wi.pValues = &event.value;
    TS_VK_RETURN_IF_ERROR(ctx_->api.vkWaitSemaphores(ctx_->device, &wi, UINT64_MAX), "vkWaitSemaphores");
    retire(event.value);
  }
  if (last_exe_) TS_RETURN_IF_ERROR(read_timings(*last_exe_));
  return check_validation();
}

}  // namespace tessera::vulkan
