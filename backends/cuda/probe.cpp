// CUDA device discovery. The runtime is linked statically and loads the driver itself, so a
// CUDA build starts on a machine without a GPU or driver; this probe says which is missing.
#include <cuda_runtime_api.h>

#include <string>

#include "core/registry.h"

namespace tessera {

void probe_cuda(std::vector<DeviceEntry>& out) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count <= 0) {
    std::string why;
    switch (err) {
      case cudaErrorInsufficientDriver: why = "no NVIDIA driver (or one older than this CUDA runtime) is installed"; break;
      case cudaErrorNoDevice: why = "the driver found no CUDA device"; break;
      case cudaSuccess: why = "no CUDA device"; break;
      default: why = std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err); break;
    }
    out.push_back({"cuda", "cuda", nullptr, Unavailable("cuda: " + why)});
    return;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    const std::string name = cudaGetDeviceProperties(&prop, i) == cudaSuccess ? prop.name : "unknown";
    // NOTE: the CUDA kernels are not written yet (ROADMAP: CUDA/HIP from one source). Until they
    // are, a found GPU is reported honestly instead of being offered as a device.
    out.push_back({"cuda", "cuda:" + std::to_string(i), nullptr,
                   Unavailable("cuda:" + std::to_string(i) + " (" + name +
                               "): found, but this build has no CUDA kernels yet")});
  }
}

}  // namespace tessera
