// VulkanDevice::measure_peaks: the roofline's ceilings from kernels written for them
// (shaders/peaks.comp), timed by the queue's timestamps. A roof built from the backend's own op
// kernels at one shape is no roof: other shapes of the same kernels plot above it.
#include <algorithm>
#include <cstring>

#include "backends/vulkan/device.h"

namespace tessera::vulkan {

namespace {
// Mirrors PeakParams in shaders/peaks.comp.
struct PeakParams {
  uint64_t src, dst;
  uint32_t n, iters;
  float seed;
  uint32_t pad;
};
static_assert(sizeof(PeakParams) == 32);

constexpr uint32_t kGroupSize = 256;  // local_size_x of peaks.comp
}  // namespace

Result<std::vector<double>> VulkanDevice::time_peak_kernel(const std::string& kernel, uint64_t params_addr,
                                                           uint32_t groups, int reps) {
  TS_ASSIGN_OR_RETURN(VkPipeline p, pipeline(kernel, {}));
  const DeviceApi& api = ctx_->api;
  VkQueryPoolCreateInfo qci{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
  qci.queryType = VK_QUERY_TYPE_TIMESTAMP;
  qci.queryCount = uint32_t(2 * reps);
  VkQueryPool queries = VK_NULL_HANDLE;
  TS_VK_RETURN_IF_ERROR(api.vkCreateQueryPool(ctx_->device, &qci, nullptr, &queries), "vkCreateQueryPool");
  auto e = run_async([&](VkCommandBuffer cmd) {
    api.vkCmdResetQueryPool(cmd, queries, 0, qci.queryCount);
    memory_barrier(api, cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT,
                   VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
    api.vkCmdBindPipeline(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p);
    api.vkCmdPushConstants(cmd, layout_, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof(params_addr), &params_addr);
    for (int r = 0; r < reps; ++r) {
      // Each run starts after the previous one finished (its writes included).
      memory_barrier(api, cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT,
                     VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
      // Bottom of pipe: written once every earlier command has finished (a top-of-pipe stamp
      // may be latched while the previous run still executes, which would stretch this run).
      api.vkCmdWriteTimestamp(cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, queries, uint32_t(2 * r));
      api.vkCmdDispatch(cmd, groups, 1, 1);
      api.vkCmdWriteTimestamp(cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, queries, uint32_t(2 * r + 1));
    }
  });
  Status st = e.ok() ? wait(*e) : e.status();
  std::vector<uint64_t> ts(size_t(2 * reps));
  if (st.ok()) {
    const VkResult r = api.vkGetQueryPoolResults(ctx_->device, queries, 0, qci.queryCount, ts.size() * 8, ts.data(), 8,
                                                 VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT);
    if (r != VK_SUCCESS) st = vk_status(r, "vkGetQueryPoolResults");
  }
  api.vkDestroyQueryPool(ctx_->device, queries, nullptr);
  TS_RETURN_IF_ERROR(st);
  const uint64_t mask = caps_.timestamp_bits >= 64 ? ~uint64_t(0) : (uint64_t(1) << caps_.timestamp_bits) - 1;
  std::vector<double> seconds;
  for (int r = 0; r < reps; ++r)
    seconds.push_back(double((ts[2 * r + 1] - ts[2 * r]) & mask) * caps_.timestamp_period_ns * 1e-9);
  return seconds;
}

Result<std::vector<PeakFigure>> VulkanDevice::measure_peaks(bool quick) {
  if (caps_.timestamp_bits == 0) return Unimplemented(info_.id + ": the compute queue has no timestamp queries");
  const int reps = quick ? 5 : 10;
  // The streamed buffer: several times any last-level cache (an H200's L2 is 60 MB), within the
  // heap and the driver's allocation limit.
  constexpr size_t kMiB = size_t(1) << 20;
  size_t bytes = quick ? 64 * kMiB : std::clamp<size_t>(heap_bytes_ / 8, 256 * kMiB, 1024 * kMiB);
  if (caps_.max_allocation) bytes = std::min<size_t>(bytes, caps_.max_allocation);
  bytes = std::min<size_t>(bytes, size_t(UINT32_MAX) * 16) & ~size_t(4095);
  TS_ASSIGN_OR_RETURN(auto src, make_buffer(bytes, false));
  TS_ASSIGN_OR_RETURN(auto dst, make_buffer(bytes, false));
  TS_ASSIGN_OR_RETURN(auto params, make_buffer(sizeof(PeakParams), true));
  // A pattern, not zeros (a driver may know a zero-filled page).
  TS_ASSIGN_OR_RETURN(const Event filled, run_async([&](VkCommandBuffer cmd) {
    ctx_->api.vkCmdFillBuffer(cmd, src->handle(), 0, bytes, 0x3C5A96E1u);
    ctx_->api.vkCmdFillBuffer(cmd, dst->handle(), 0, bytes, 0x1u);
  }));
  TS_RETURN_IF_ERROR(wait(filled));

  auto set_params = [&](uint32_t n, uint32_t iters) {
    const PeakParams pp{src->address(), dst->address(), n, iters, 1.0f, 0};
    std::memcpy(params->host_ptr(), &pp, sizeof pp);
  };
  auto rates = [](const std::vector<double>& seconds, double amount) {
    std::vector<double> out;
    for (double s : seconds)
      if (s > 0) out.push_back(amount / s / 1e9);
    return out;
  };
  std::vector<PeakFigure> out;
  const std::string mib = std::to_string(bytes / kMiB) + " MiB";
  const uint32_t n16 = uint32_t(bytes / 16);
  // Eight 16-byte elements per invocation: enough invocations to fill any GPU, few enough that
  // each runs a loop.
  const uint32_t stream_groups = std::max<uint32_t>(1, std::min<uint32_t>(65535, n16 / (kGroupSize * 8)));
  // Two access widths each; a ceiling is the faster (GPUs reach it with 16-byte loads, a CPU
  // implementation such as lavapipe with lane-consecutive 4-byte ones, where it gathers the
  // 16-byte ones).
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
  };
  auto stream = [&](const char* name, const std::string& wide_kernel, const std::string& narrow_kernel,
                    double bytes_per_run, const std::string& what) -> Status {
    set_params(n16, 0);
    TS_ASSIGN_OR_RETURN(auto wide_s, time_peak_kernel(wide_kernel, params->address(), stream_groups, reps));
    set_params(uint32_t(bytes / 4), 0);
    TS_ASSIGN_OR_RETURN(auto narrow_s, time_peak_kernel(narrow_kernel, params->address(), stream_groups, reps));
    const bool wide = median(wide_s) <= median(narrow_s);
    out.push_back({name,
                   std::string(wide ? "16-byte" : "4-byte lane-consecutive (faster than 16-byte here)") + " " + what + ", " +
                       std::to_string(stream_groups) + "x256 invocations (GPU timestamps)",
                   rates(wide ? wide_s : narrow_s, bytes_per_run)});
    return OkStatus();
  };
  TS_RETURN_IF_ERROR(stream("read", "peak_read", "peak_read_u32", double(bytes), "loads streaming " + mib));
  TS_RETURN_IF_ERROR(stream("copy", "peak_copy", "peak_copy_u32", 2.0 * double(bytes),
                            "loads and stores, " + mib + " to " + mib + " (bytes read + written)"));

  // FMA loops: the round count doubles until one run takes 10 ms (quick) or 40 ms.
  const uint32_t fma_groups = 1024;
  const double target_s = quick ? 0.01 : 0.04;
  auto fma_peak = [&](const std::string& kernel, const char* name, const char* what) -> Status {
    uint32_t iters = 16;
    std::vector<double> s;
    for (;;) {
      set_params(0, iters);
      TS_ASSIGN_OR_RETURN(s, time_peak_kernel(kernel, params->address(), fma_groups, 1));
      if (s[0] >= target_s || iters >= (1u << 24)) break;
      iters *= s[0] > 0 ? std::clamp<uint32_t>(uint32_t(target_s / s[0]) + 1, 2, 64) : 64;
    }
    set_params(0, iters);
    TS_ASSIGN_OR_RETURN(s, time_peak_kernel(kernel, params->address(), fma_groups, reps));
    // Per round: 8 chains of 4-lane FMAs, 2 FLOPs each.
    const double flops = double(fma_groups) * kGroupSize * iters * 8 * 4 * 2;
    out.push_back({name, std::string(what) + ", " + std::to_string(fma_groups) + "x256 invocations x " +
                             std::to_string(iters) + " rounds (GPU timestamps)",
                   rates(s, flops)});
    return OkStatus();
  };
  TS_RETURN_IF_ERROR(fma_peak("peak_fma_f32", "f32", "8 independent vec4 FMA chains"));
  if (caps_.fp16_arithmetic) TS_RETURN_IF_ERROR(fma_peak("peak_fma_f16", "f16", "8 independent f16vec4 FMA chains"));
  return out;
}

}  // namespace tessera::vulkan
