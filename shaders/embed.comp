#version 460
// Row gather: out[t, :] = dequant(weight[ids[t], :]). Float weights: one thread per output
// element. Block formats: one thread per weight unit (dequant.glsl load_unit: 16 elements with a
// few wide loads, the same decoder as the matmul's). An id outside [0, V) writes zeros (the host
// rejects such ids before submitting where it can read them).
#include "types.glsl"
#include "dequant.glsl"

layout(local_size_x_id = 0) in;

struct EmbedParams {
  TensorRef w;
  uint64_t ids;
  uint64_t dst;
  uint T, D, V, out_dtype;
};
layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer ParamsRef { EmbedParams p; };

void main() {
  const EmbedParams P = ParamsRef(pc.params_addr).p;
  const uint step = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  const uint osize = dtype_size(P.out_dtype);
#if W_FLOAT
  const uint n = P.T * P.D;
  for (uint i = gl_GlobalInvocationID.x; i < n; i += step) {
    const uint t = i / P.D, c = i % P.D;
    const int id = load_i32(P.ids + uint64_t(t) * 4u);
    float v = 0.0;
    if (id >= 0 && uint(id) < P.V) v = load_f(row_addr(P.w, uint(id)) + uint64_t(c) * P.w.col_stride, P.w.dtype);
    store_f(P.dst + uint64_t(i) * osize, P.out_dtype, v);
  }
#else
  const uint units = P.D / UNIT;  // D is whole blocks, so whole units
  for (uint i = gl_GlobalInvocationID.x; i < P.T * units; i += step) {
    const uint t = i / units, u = i % units;
    const int id = load_i32(P.ids + uint64_t(t) * 4u);
    float w[16];
    if (id >= 0 && uint(id) < P.V) {
      load_unit(row_addr(P.w, uint(id)), u, w);
    } else {
      for (uint j = 0; j < 16u; ++j) w[j] = 0.0;
    }
    const uint64_t dst = P.dst + (uint64_t(t) * P.D + unit_run0(u)) * osize;
    for (uint j = 0; j < 8u; ++j) {
      store_f(dst + uint64_t(j) * osize, P.out_dtype, w[j]);
      store_f(dst + uint64_t(UNIT_RUN1 + j) * osize, P.out_dtype, w[8u + j]);
    }
  }
#endif
}
