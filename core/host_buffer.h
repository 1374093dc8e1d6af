// HostBuffer: a Buffer in ordinary (64-byte aligned) host memory, or a window onto memory owned
// elsewhere (a mapped model file) kept alive by |keepalive|. Used by the CPU and reference devices.
#pragma once
#include <cstdlib>
#include <memory>

#include <span>

#include "core/device.h"
#include "core/tensor.h"

namespace tessera {

class HostBuffer final : public Buffer {
 public:
  // Allocates; returns null when the allocation fails.
  static std::shared_ptr<HostBuffer> create(Device* device, size_t bytes);
  // Wraps |ptr| (not owned) while |keepalive| lives.
  static std::shared_ptr<HostBuffer> wrap(Device* device, void* ptr, size_t bytes,
                                          std::shared_ptr<const void> keepalive);
  ~HostBuffer() override;

 private:
  HostBuffer(Device* device, size_t bytes, void* ptr, bool owned, std::shared_ptr<const void> keepalive)
      : Buffer(device, bytes, ptr), owned_(owned), keepalive_(std::move(keepalive)) {}
  bool owned_;
  std::shared_ptr<const void> keepalive_;
};

// Runs a checked batched copy (check_copy_regions) between host-addressable buffers, in order.
void copy_host_regions(std::span<const CopyRegion> regions);

}  // namespace tessera
