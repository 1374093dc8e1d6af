// The execution context of kernels.h on a real GPU (CUDA or HIP): device code only.
#pragma once
#include "backends/cuda/kernels.h"
#include "backends/cuda/vendor.h"

namespace tessera::gpu {

struct DeviceCtx {
  __device__ __forceinline__ int tid() const { return int(threadIdx.x); }
  __device__ __forceinline__ int ntid() const { return int(blockDim.x); }
  __device__ __forceinline__ int bx() const { return int(blockIdx.x); }
  __device__ __forceinline__ int by() const { return int(blockIdx.y); }
  __device__ __forceinline__ int nbx() const { return int(gridDim.x); }
  __device__ __forceinline__ int nby() const { return int(gridDim.y); }
  __device__ __forceinline__ void sync() { __syncthreads(); }
  __device__ __forceinline__ float shfl_xor(float v, int mask) { return TS_SHFL_XOR(v, mask); }
  template <int Slot, class T, int N>
  __device__ __forceinline__ T* smem() {
    __shared__ T s[N];
    return s;
  }
  __device__ __forceinline__ void set_error(int32_t* err, KernelError e) { atomicCAS(err, 0, int32_t(e)); }
};

}  // namespace tessera::gpu
