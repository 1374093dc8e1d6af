#version 460
// lora (core/op.h in::Lora): the multi-LoRA delta over a base projection. One workgroup per row:
// it finds the row's segment (binary search of seg_start), shrinks x through the slot's A (each
// subgroup takes rank rows j, j + n_subgroups, ... and reduces its dot product with subgroupAdd
// into shared memory), then each thread expands output columns n through B ([R, N]: a row j is
// read by the threads side by side) and adds the base row.
// Metadata out of range leaves the row's delta out (the host checks it where it can read it).
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "types.glsl"

layout(local_size_x_id = 0) in;
#define MAX_RANK 256u

struct LoraParams {
  TensorRef x, base, a, b;
  uint64_t ranks, scales, seg_start, seg_slot, dst;
  uint T, K, N, R;
  uint G, n_slots, out_dtype, pad;
};
layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer ParamsRef { LoraParams p; };

shared float s_h[MAX_RANK];

// The slot of row t's segment: the last g < G with seg_start[g] <= t (empty segments before it
// share its start), or -1 when the metadata is out of range.
int row_slot(LoraParams P, uint t) {
  uint lo = 0u, hi = P.G - 1u;
  while (lo < hi) {
    const uint mid = (lo + hi + 1u) / 2u;
    if (load_i32(P.seg_start + uint64_t(mid) * 4u) <= int(t)) lo = mid; else hi = mid - 1u;
  }
  const int slot = load_i32(P.seg_slot + uint64_t(lo) * 4u);
  return slot >= 0 && uint(slot) < P.n_slots ? slot : -1;
}

void main() {
  const LoraParams P = ParamsRef(pc.params_addr).p;
  const uint esize = dtype_size(P.out_dtype);
  for (uint t = gl_WorkGroupID.x; t < P.T; t += gl_NumWorkGroups.x) {
    const int slot = P.G > 0u ? row_slot(P, t) : -1;
    int r = slot < 0 ? 0 : load_i32(P.ranks + uint64_t(slot) * 4u);
    if (r < 0 || uint(r) > P.R) r = 0;
    for (uint j = gl_SubgroupID; j < uint(r); j += gl_NumSubgroups) {
      const uint64_t arow = row_addr(P.a, uint(slot) * P.R + j);
      float acc = 0.0;
      for (uint k = gl_SubgroupInvocationID; k < P.K; k += gl_SubgroupSize)
        acc += load_f(arow + uint64_t(k) * P.a.col_stride, P.a.dtype) * load_elem(P.x, t, k);
      acc = subgroupAdd(acc);
      if (gl_SubgroupInvocationID == 0u) s_h[j] = acc;
    }
    barrier();
    const float scale = r > 0 ? F32Ref(P.scales + uint64_t(slot) * 4u).v : 0.0;
    for (uint n = gl_LocalInvocationID.x; n < P.N; n += gl_WorkGroupSize.x) {
      float acc = 0.0;
      for (uint j = 0u; j < uint(r); ++j)
        acc += load_f(row_addr(P.b, uint(slot) * P.R + j) + uint64_t(n) * P.b.col_stride, P.b.dtype) * s_h[j];
      store_f(P.dst + (uint64_t(t) * P.N + n) * esize, P.out_dtype, load_elem(P.base, t, n) + scale * acc);
    }
    barrier();
  }
}
