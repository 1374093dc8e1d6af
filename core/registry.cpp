#include "core/registry.h"

#include <algorithm>

namespace tessera {

const char* device_type_name(DeviceType t) {
  switch (t) {
    case DeviceType::kCpu:
      return "cpu";
    case DeviceType::kGpu:
      return "gpu";
    case DeviceType::kIntegratedGpu:
      return "integrated-gpu";
    case DeviceType::kAccelerator:
      return "accelerator";
  }
  return "unknown";
}

const char* memory_kind_name(MemoryKind k) {
  switch (k) {
    case MemoryKind::kDevice: return "device";
    case MemoryKind::kHostPinned: return "host-pinned";
    case MemoryKind::kHostVisible: return "host-visible";
  }
  return "unknown";
}

Result<Tensor> upload_new(Device& device, const Tensor& desc, const void* src) {
  Tensor t = desc;
  t.set_contiguous_strides();
  TS_ASSIGN_OR_RETURN(t.buffer, device.alloc(size_t(t.nbytes())));
  t.offset = 0;
  if (src) TS_RETURN_IF_ERROR(device.upload(t, src, size_t(t.nbytes())));
  return t;
}

Registry::Registry(const std::vector<std::pair<std::string, BackendProbe>>& probes) {
  for (const auto& [name, probe] : probes) {
    std::vector<DeviceEntry> found;
    probe(found);
    if (found.empty()) found.push_back({name, name, nullptr, Unavailable(name + ": no device found")});
    for (auto& e : found) entries_.push_back(std::move(e));
  }
}

namespace {
// Devices with memory of their own first, then integrated GPUs, then the CPU, then emulated
// GPU APIs; within a rank, the probes' order (builtin_backend_probes: CUDA before Vulkan).
int rank_of(const Device& d) {
  const DeviceInfo& i = d.info();
  if (i.emulated) return 3;
  switch (i.type) {
    case DeviceType::kGpu:
    case DeviceType::kAccelerator:
      return 0;
    case DeviceType::kIntegratedGpu:
      return 1;
    case DeviceType::kCpu:
      return 2;
  }
  return 4;
}
}  // namespace

std::vector<DevicePtr> Registry::devices() const {
  std::vector<DevicePtr> out;
  for (const auto& e : entries_)
    if (e.device && !e.device->info().by_name_only) out.push_back(e.device);
  std::stable_sort(out.begin(), out.end(), [](const DevicePtr& a, const DevicePtr& b) { return rank_of(*a) < rank_of(*b); });
  return out;
}

DevicePtr Registry::best() const {
  auto d = devices();
  return d.empty() ? nullptr : d.front();
}

Result<DevicePtr> Registry::find(const std::string& spec) const {
  if (spec.empty() || spec == "auto") {
    if (auto d = best()) return d;
    return Unavailable("no usable device");
  }
  // Exact id first ("vulkan:1"), then the first device of a backend ("vulkan" -> "vulkan:0").
  for (const auto& e : entries_)
    if (e.device && e.id == spec) return e.device;
  for (const auto& e : entries_)
    if (e.device && e.backend == spec) return e.device;
  for (const auto& e : entries_)
    if (!e.device && (e.backend == spec || spec.rfind(e.backend + ":", 0) == 0))
      return Status(StatusCode::kUnavailable, "device '" + spec + "' is unavailable: " + e.why.message());
  std::string known;
  for (const auto& e : entries_)
    if (e.device) known += (known.empty() ? "" : ", ") + e.id;
  return NotFound("no device '" + spec + "' (available: " + (known.empty() ? "none" : known) + ")");
}

}  // namespace tessera
