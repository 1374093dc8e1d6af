// "cuda-sim": a HAL device that runs the GPU backend's own planner and kernel bodies
// (backends/cuda/plan.h, kernels.h) on the host through BlockSim, over host memory. Slow (a
// fiber per GPU thread), and not offered by the registry: tests build one, so the conformance
// suite and the model tests check the CUDA/HIP kernels' logic on machines without a GPU.
#pragma once
#include <memory>

#include "core/device.h"

namespace tessera::gpu::sim {

// A new simulated GPU device (DeviceInfo::id "cuda-sim", kind kCuda, emulated).
DevicePtr make_sim_device();

}  // namespace tessera::gpu::sim
