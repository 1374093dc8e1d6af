// HIP device discovery through dlopen of libamdhip64, so a HIP build starts on a machine
// without ROCm and says what is missing.
#include <dlfcn.h>

#include <string>

#include "core/registry.h"

namespace tessera {

void probe_hip(std::vector<DeviceEntry>& out) {
  void* lib = dlopen("libamdhip64.so", RTLD_NOW | RTLD_LOCAL);
  if (!lib) lib = dlopen("libamdhip64.so.5", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    out.push_back({"hip", "hip", nullptr, Unavailable("hip: the ROCm runtime (libamdhip64) is not installed")});
    return;
  }
  using GetCount = int (*)(int*);
  using ErrorName = const char* (*)(int);
  auto get_count = reinterpret_cast<GetCount>(dlsym(lib, "hipGetDeviceCount"));
  auto error_name = reinterpret_cast<ErrorName>(dlsym(lib, "hipGetErrorName"));
  int count = 0;
  const int err = get_count ? get_count(&count) : -1;
  if (err != 0 || count <= 0) {
    std::string why = err == 100 ? "the ROCm runtime found no AMD GPU (hipErrorNoDevice)"
                      : !get_count ? "libamdhip64 lacks hipGetDeviceCount"
                      : err == 0   ? "no HIP device"
                                   : std::string(error_name ? error_name(err) : "error ") + std::to_string(err);
    out.push_back({"hip", "hip", nullptr, Unavailable("hip: " + why)});
    dlclose(lib);
    return;
  }
  for (int i = 0; i < count; ++i)
    out.push_back({"hip", "hip:" + std::to_string(i), nullptr,
                   Unavailable("hip:" + std::to_string(i) + ": found, but this build has no HIP kernels yet")});
  dlclose(lib);
}

}  // namespace tessera
