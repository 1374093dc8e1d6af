// lora: the segmented shrink and expand over adapter slots.
#pragma once
#include "backends/cuda/kernels/common.h"

namespace tessera::gpu {

// lora: one block per row t. Every thread finds t's segment (the last g with seg_start[g] <= t:
// empty segments before it share its start); warp w shrinks rank rows w, w + warps, ... of the
// slot's A against x into shared memory; then each thread expands output columns through B and
// adds the base row. Base-model rows (slot -1) copy the base.
struct LoraKernel {
  using Args = LoraArgs;
  template <class C>
  TS_KFN static void run(C& c, const Args& a) {
    const int64_t t = c.bx(), T = a.x.shape[0], K = a.x.cols(), N = a.base.cols(), R = a.a.shape[1];
    const int64_t G = a.seg_slot.cols(), n_slots = a.ranks.cols();
    float* h = c.template smem<1, float, kLoraMaxRank>();
    int64_t lo = 0, hi = G - 1;
    while (lo < hi) {
      const int64_t mid = (lo + hi + 1) / 2;
      if (load_i32(a.seg_start, mid) <= t) lo = mid;
      else hi = mid - 1;
    }
    const int64_t slot = G > 0 ? load_i32(a.seg_slot, lo) : -1;
    int64_t r = slot >= 0 && slot < n_slots ? load_i32(a.ranks, slot) : 0;
    const bool bad = G == 0 || load_i32(a.seg_start, 0) != 0 || load_i32(a.seg_start, G) != T || slot < -1 ||
                     slot >= n_slots || load_i32(a.seg_start, lo) > t || load_i32(a.seg_start, lo + 1) <= t || r < 0 ||
                     r > R;
    if (bad) {
      if (c.tid() == 0) c.set_error(a.err, KernelError::kLoraMetadata);
      r = 0;
    }
    const int warps = c.ntid() / kWarp, lane = c.tid() % kWarp;
    const uint8_t* xr = a.x.row(t);
    for (int64_t j = c.tid() / kWarp; j < r; j += warps) {
      const uint8_t* ar = a.a.row(slot * R + j);
      float acc = 0.0f;
      for (int64_t k = lane; k < K; k += kWarp)
        acc += load_f(ar + k * a.a.col_stride(), a.a.dtype) * load_f(xr + k * a.x.col_stride(), a.x.dtype);
      acc = warp_sum(c, acc);
      if (lane == 0) h[j] = acc;
    }
    c.sync();
    const float scale = r > 0 ? load_f(a.scales.p + slot * a.scales.col_stride(), DType::kF32) : 0.0f;
    for (int64_t n = c.tid(); n < N; n += c.ntid()) {
      float acc = 0.0f;
      for (int64_t j = 0; j < r; ++j)  // B [R, N]: row j read by the block's threads side by side
        acc += load_f(a.b.row(slot * R + j) + n * a.b.col_stride(), a.b.dtype) * h[j];
      store_f(a.out.row(t) + n * a.out.col_stride(), a.out.dtype,
              load_f(a.base.row(t) + n * a.base.col_stride(), a.base.dtype) + scale * acc);
    }
  }
};

}  // namespace tessera::gpu
