#include "core/host_buffer.h"

namespace tessera {

std::shared_ptr<HostBuffer> HostBuffer::create(Device* device, size_t bytes) {
  const size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (!p) return nullptr;
  return std::shared_ptr<HostBuffer>(new HostBuffer(device, bytes, p, true, nullptr));
}

std::shared_ptr<HostBuffer> HostBuffer::wrap(Device* device, void* ptr, size_t bytes,
                                             std::shared_ptr<const void> keepalive) {
  return std::shared_ptr<HostBuffer>(new HostBuffer(device, bytes, ptr, false, std::move(keepalive)));
}

HostBuffer::~HostBuffer() {
  if (owned_) std::free(host_ptr());
}

}  // namespace tessera
