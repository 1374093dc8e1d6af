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
  __device__ __forceinline__ int32_t shfl(int32_t v, int src) { return TS_SHFL(v, src); }
  __device__ __forceinline__ void mma_s8(int32_t a0, int32_t a1, int32_t b, int32_t* d) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
                 : "r"(a0), "r"(a1), "r"(b));
#else
    mma_s8_shfl(*this, a0, a1, b, d);
#endif
  }
  template <int Slot, class T, int N>
  __device__ __forceinline__ T* smem() {
    __shared__ T s[N];
    return s;
  }
  __device__ __forceinline__ void set_error(int32_t* err, KernelError e) { atomicCAS(err, 0, int32_t(e)); }
};

}  // namespace tessera::gpu
