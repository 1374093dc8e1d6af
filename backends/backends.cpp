// The probes of every compiled-in backend, in preference order. The list comes from
// backends/CMakeLists.txt's tessera_backend() lines (generated/backend_list.inc): registering a
// backend edits nothing here.
#include <cstdlib>
#include <string>

#include "backends/cuda/sim/sim_device.h"
#include "core/reference/reference.h"
#include "core/registry.h"

namespace tessera {

#define TS_BACKEND(name) void probe_##name(std::vector<DeviceEntry>& out);
#define TS_BACKEND_NOT_BUILT(name)
#include "backend_list.inc"
#undef TS_BACKEND
#undef TS_BACKEND_NOT_BUILT

std::vector<std::pair<std::string, BackendProbe>> builtin_backend_probes() {
  std::vector<std::pair<std::string, BackendProbe>> probes;
#define TS_BACKEND(name) probes.emplace_back(#name, probe_##name);
#define TS_BACKEND_NOT_BUILT(name)
#include "backend_list.inc"
#undef TS_BACKEND
#undef TS_BACKEND_NOT_BUILT
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
#define TS_BACKEND(name)
#define TS_BACKEND_NOT_BUILT(name) out.push_back(#name);
#include "backend_list.inc"
#undef TS_BACKEND
#undef TS_BACKEND_NOT_BUILT
  return out;
}

}  // namespace tessera
