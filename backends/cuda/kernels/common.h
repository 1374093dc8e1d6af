// What every GPU kernel family uses (kernels.h explains the execution context C): TS_KFN, the
// warp and block reductions, the gelu forms, and decode16_tail over a weight row.
#pragma once
#include <math.h>

#include "backends/cuda/args.h"

#if defined(__CUDACC__) || defined(__HIPCC__)
#define TS_KFN __device__ inline __attribute__((always_inline))
#else
#define TS_KFN inline
#endif
namespace tessera::gpu {

inline constexpr int kWarp = 32;

template <class C>
TS_KFN float warp_sum(C& c, float v) {
  for (int m = kWarp / 2; m > 0; m /= 2) v += c.shfl_xor(v, m);
  return v;
}
template <class C>
TS_KFN float warp_max(C& c, float v) {
  for (int m = kWarp / 2; m > 0; m /= 2) v = fmaxf(v, c.shfl_xor(v, m));
  return v;
}
// The sum of |v| over the block (every thread gets it). Uses shared slot 0 (32 floats).
template <class C>
TS_KFN float block_sum(C& c, float v) {
  float* part = c.template smem<0, float, 32>();
  v = warp_sum(c, v);
  if (c.tid() % kWarp == 0) part[c.tid() / kWarp] = v;
  c.sync();
  float s = 0.0f;
  for (int w = 0; w < (c.ntid() + kWarp - 1) / kWarp; ++w) s += part[w];
  c.sync();
  return s;
}
template <class C>
TS_KFN float block_max(C& c, float v) {
  float* part = c.template smem<0, float, 32>();
  v = warp_max(c, v);
  if (c.tid() % kWarp == 0) part[c.tid() / kWarp] = v;
  c.sync();
  float s = -INFINITY;
  for (int w = 0; w < (c.ntid() + kWarp - 1) / kWarp; ++w) s = fmaxf(s, part[w]);
  c.sync();
  return s;
}

TS_KFN float gelu_tanh(float x) { return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x))); }
TS_KFN float gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f)); }

// decode16 of elements e0.. of a row of |n| elements; returns how many are valid (16, or fewer at
// the end of a float row, whose length need not be a multiple of 16; block formats always fill).
template <DType W>
TS_KFN int decode16_tail(const uint8_t* row, int64_t e0, int64_t n, float* out) {
  if constexpr (W == DType::kF32 || W == DType::kF16 || W == DType::kBF16) {
    if (e0 + 16 > n) {
      const int m = int(n - e0);
      for (int i = 0; i < m; ++i) out[i] = load_f(row + (e0 + i) * (W == DType::kF32 ? 4 : 2), W);
      return m;
    }
  }
  decode::decode16<W>(row, e0, out);
  return 16;
}

}  // namespace tessera::gpu
