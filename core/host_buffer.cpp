#include "core/host_buffer.h"

#include <cstring>

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

void copy_host_regions(std::span<const CopyRegion> regions) {
  for (const CopyRegion& r : regions)
    std::memmove(static_cast<char*>(r.dst->host_ptr()) + r.dst_offset,
                 static_cast<const char*>(r.src->host_ptr()) + r.src_offset, r.bytes);
}

}  // namespace tessera
