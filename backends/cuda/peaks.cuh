// Purpose-built peak kernels for the roofline's ceilings (Device::measure_peaks): a streaming
// read with 16-byte loads over a buffer many times the L2, a device-to-device copy, eight
// independent FMA chains per thread (f32), and on CUDA warp-level matrix multiply-accumulate
// throughput (WMMA: mma.sync; f16, bf16, int8) from registers. NOTE: Hopper's full tensor rate
// needs wgmma (warpgroup MMA), which WMMA does not issue: on sm_90 these matrix figures are the
// mma.sync ceiling, below the datasheet's. Included by device.cu inside its namespace.
#pragma once

#if !defined(__HIPCC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>
#endif

namespace peaks {

__global__ void read_kernel(const uint4* p, size_t n, uint32_t* sink) {
  uint32_t acc = 0;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint4 v = p[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;  // data-dependent, so no load is dead
}

__global__ void fma_kernel(float* sink, int iters) {
  float a[8];
  for (int j = 0; j < 8; ++j) a[j] = float(threadIdx.x + j);
  const float b = 0.9999f, c = 0.0001f;
  for (int i = 0; i < iters; ++i)
    for (int j = 0; j < 8; ++j) a[j] = fmaf(a[j], b, c);
  float s = 0.0f;
  for (int j = 0; j < 8; ++j) s += a[j];
  if (s == -1.0f) *sink = s;
}
constexpr int kFmaChains = 8;

#if !defined(__HIPCC__)
template <class T, class Acc>
__global__ void mma_kernel(Acc* sink, int iters) {
  using namespace nvcuda;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> b;
  wmma::fragment<wmma::accumulator, 16, 16, 16, Acc> c[4];
  wmma::fill_fragment(a, T(1));
  wmma::fill_fragment(b, T(1));
  for (int j = 0; j < 4; ++j) wmma::fill_fragment(c[j], Acc(0));
  for (int i = 0; i < iters; ++i)
    for (int j = 0; j < 4; ++j) wmma::mma_sync(c[j], a, b, c[j]);
  if (c[0].x[0] == Acc(-1)) wmma::store_matrix_sync(sink, c[0], 16, wmma::mem_row_major);
}
constexpr int kMmaChains = 4;
#endif

}  // namespace peaks
