// A Device decorator that forwards every call to |inner| and counts the transfers: host round
// trips (upload, download) and batched device copies (copy calls and their regions). Tests use
// it to show what the KV cache and the engine ask of a device.
#pragma once
#include <memory>

#include "core/device.h"

namespace tessera::testing {

class CountingDevice final : public Device {
 public:
  explicit CountingDevice(DevicePtr inner) : inner_(std::move(inner)) {}
  ~CountingDevice() override { release_executor(); }

  const DeviceInfo& info() const override { return inner_->info(); }
  Result<BufferPtr> alloc(size_t bytes, MemoryKind kind = MemoryKind::kDevice) override { return inner_->alloc(bytes, kind); }
  MemoryInfo memory() const override { return inner_->memory(); }
  Status upload(const Tensor& dst, const void* src, size_t bytes) override {
    ++uploads;
    return inner_->upload(dst, src, bytes);
  }
  Status download(const Tensor& src, void* dst, size_t bytes) override {
    ++downloads;
    return inner_->download(src, dst, bytes);
  }
  Result<Event> copy(std::span<const CopyRegion> regions) override {
    ++copies;
    regions_copied += int64_t(regions.size());
    return inner_->copy(regions);
  }
  bool supports(OpKind op, DType act, DType weight) const override { return inner_->supports(op, act, weight); }
  Result<ExecutablePtr> prepare(Graph& graph) override { return inner_->prepare(graph); }
  Result<Event> submit(Executable& exe) override { return inner_->submit(exe); }
  Status wait(Event event) override {
    ++waits;
    return inner_->wait(event);
  }
  Status synchronize() override { return inner_->synchronize(); }
  Status compute(Graph& graph) override { return inner_->compute(graph); }
  Result<Event> compute_async(Graph& graph) override {
    ++computes;
    return inner_->compute_async(graph);
  }

  void reset() { uploads = downloads = copies = regions_copied = waits = computes = 0; }
  int64_t uploads = 0, downloads = 0, copies = 0, regions_copied = 0, waits = 0, computes = 0;

 private:
  DevicePtr inner_;
};

}  // namespace tessera::testing
