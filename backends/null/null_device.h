// The null backend: a Device that holds memory and runs nothing. It is the skeleton to copy
// when starting a backend (docs/adding-a-backend.md walks through it): the folder, its
// CMakeLists.txt, a probe, and one tessera_backend() line in backends/CMakeLists.txt are all a
// backend needs; no file outside backends/ changes. Built under -DTESSERA_NULL_BACKEND=ON, its
// device opens by name only (--device null); it supports no op, so every graph fails validation
// with the op it lacks named. The unit tests use it as a device of any DeviceType.
#pragma once
#include "core/device.h"

namespace tessera::null_backend {

class NullDevice final : public Device {
 public:
  // |claims| says what the device claims to be: its id, type and flags (tests of the registry's
  // ranking make one of each type); the name and backend are filled in.
  explicit NullDevice(DeviceInfo claims);
  ~NullDevice() override;

  const DeviceInfo& info() const override { return info_; }
  Result<BufferPtr> alloc(size_t bytes, MemoryKind kind) override;
  MemoryInfo memory() const override { return {}; }
  Status upload(const Tensor& dst, const void* src, size_t bytes) override;
  Status download(const Tensor& src, void* dst, size_t bytes) override;
  Result<Event> copy(std::span<const CopyRegion> regions) override;
  // A real backend answers from core's per-op policy and its kernels' limits; this one has none.
  bool supports(OpKind, DType, DType) const override { return false; }
  Result<ExecutablePtr> prepare(Graph& graph) override;
  Result<Event> submit(Executable& exe) override;
  Status wait(Event) override { return OkStatus(); }
  Status synchronize() override { return OkStatus(); }

 private:
  DeviceInfo info_;
};

}  // namespace tessera::null_backend
