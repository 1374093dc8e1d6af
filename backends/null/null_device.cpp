#include "backends/null/null_device.h"

#include <cstring>
#include <string>

#include "core/host_buffer.h"

namespace tessera::null_backend {

NullDevice::NullDevice(DeviceInfo claims) : info_(std::move(claims)) {
  if (info_.id.empty()) info_.id = "null";
  info_.name = "null device (holds memory, runs no op)";
  info_.backend = "null";
}

NullDevice::~NullDevice() { release_executor(); }

// Host memory stands in for the device's own; a real backend allocates per MemoryKind.
Result<BufferPtr> NullDevice::alloc(size_t bytes, MemoryKind) {
  auto b = HostBuffer::create(this, bytes);
  if (!b) return ResourceExhausted(info_.id + ": cannot allocate " + std::to_string(bytes) + " bytes");
  return BufferPtr(b);
}

Status NullDevice::upload(const Tensor& dst, const void* src, size_t bytes) {
  if (!dst.host_data() || int64_t(bytes) > dst.nbytes())
    return InvalidArgument(info_.id + ": bad upload to " + dst.shape_string());
  std::memcpy(dst.host_data(), src, bytes);
  return OkStatus();
}

Status NullDevice::download(const Tensor& src, void* dst, size_t bytes) {
  if (!src.host_data() || int64_t(bytes) > src.nbytes())
    return InvalidArgument(info_.id + ": bad download from " + src.shape_string());
  std::memcpy(dst, src.host_data(), bytes);
  return OkStatus();
}

Result<Event> NullDevice::copy(std::span<const CopyRegion> regions) {
  TS_RETURN_IF_ERROR(check_copy_regions(*this, regions));
  copy_host_regions(regions);
  return Event{};
}

// Never reached through the Executor (which refuses unsupported ops first); a direct caller
// learns what is missing.
Result<ExecutablePtr> NullDevice::prepare(Graph& graph) {
  return Unimplemented(info_.id + ": the null backend has no kernels (graph of " +
                       std::to_string(graph.nodes().size()) + " nodes)");
}

Result<Event> NullDevice::submit(Executable&) { return Unimplemented(info_.id + ": the null backend has no kernels"); }

}  // namespace tessera::null_backend
