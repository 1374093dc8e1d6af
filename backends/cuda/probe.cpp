// CUDA device discovery. The runtime is linked statically and loads the driver (libcuda) itself
// at run time, so a CUDA build starts on a machine without a GPU or driver and says which is
// missing; each GPU found becomes a device (device.cu).
#include "core/registry.h"

namespace tessera {

namespace cuda {
void probe(std::vector<DeviceEntry>& out);  // device.cu
}

void probe_cuda(std::vector<DeviceEntry>& out) { cuda::probe(out); }

}  // namespace tessera
