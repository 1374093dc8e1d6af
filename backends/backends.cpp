// The probes of every compiled-in backend, in preference order.
#include <cstdlib>
#include <string>

#include "backends/cuda/sim/sim_device.h"
#include "core/reference/reference.h"
#include "core/registry.h"

namespace tessera {

void probe_cpu(std::vector<DeviceEntry>& out);
#if TESSERA_HAVE_VULKAN
void probe_vulkan(std::vector<DeviceEntry>& out);
#endif
#if TESSERA_HAVE_CUDA
void probe_cuda(std::vector<DeviceEntry>& out);
#endif
#if TESSERA_HAVE_HIP
void probe_hip(std::vector<DeviceEntry>& out);
#endif

std::vector<std::pair<std::string, BackendProbe>> builtin_backend_probes() {
  std::vector<std::pair<std::string, BackendProbe>> probes;
#if TESSERA_HAVE_CUDA
  probes.emplace_back("cuda", probe_cuda);
#endif
#if TESSERA_HAVE_HIP
  probes.emplace_back("hip", probe_hip);
#endif
#if TESSERA_HAVE_VULKAN
  probes.emplace_back("vulkan", probe_vulkan);
#endif
  probes.emplace_back("cpu", probe_cpu);
  // The GPU kernels on the host simulator (backends/cuda/sim): for developers and tests, only
  // under TESSERA_CUDA_SIM=1; emulated, so never the default.
  probes.emplace_back("cuda-sim", [](std::vector<DeviceEntry>& out) {
    const char* e = std::getenv("TESSERA_CUDA_SIM");
    if (e && std::string(e) == "1") out.push_back({"cuda-sim", "cuda-sim", gpu::sim::make_sim_device(), OkStatus()});
  });
  // Last: opened by name only ("--device reference"); Registry::devices() and "auto" skip it.
  probes.emplace_back("reference", [](std::vector<DeviceEntry>& out) {
    out.push_back({"reference", "reference", std::make_shared<ref::ReferenceDevice>(), OkStatus()});
  });
  return probes;
}

// Defined here rather than in core/ so that core never depends on the backends.
Registry& Registry::global() {
  static Registry r(builtin_backend_probes());
  return r;
}

// Backends compiled out of this build, for `tessera info`.
std::vector<std::string> backends_not_built() {
  std::vector<std::string> out;
#if !TESSERA_HAVE_VULKAN
  out.push_back("vulkan");
#endif
#if !TESSERA_HAVE_CUDA
  out.push_back("cuda");
#endif
#if !TESSERA_HAVE_HIP
  out.push_back("hip");
#endif
  return out;
}

}  // namespace tessera
