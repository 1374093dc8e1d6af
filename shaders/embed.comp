#version 460
// Row gather: out[t, :] = dequant(weight[ids[t], :]). One thread per output element; an id
// outside [0, V) writes zeros (the host rejects such ids before submitting where it can read them).
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
  const uint n = P.T * P.D;
  const uint step = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint i = gl_GlobalInvocationID.x; i < n; i += step) {
    const uint t = i / P.D, c = i % P.D;
    const int id = load_i32(P.ids + uint64_t(t) * 4u);
    float v = 0.0;
    if (id >= 0 && uint(id) < P.V) {
#if WTYPE == W_F32 || WTYPE == W_F16 || WTYPE == W_BF16
      v = load_f(row_addr(P.w, uint(id)) + uint64_t(c) * P.w.col_stride, P.w.dtype);
#else
      v = load_weight(row_addr(P.w, uint(id)), c);
#endif
    }
    store_f(P.dst + uint64_t(i) * dtype_size(P.out_dtype), P.out_dtype, v);
  }
}
