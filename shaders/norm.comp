#version 460
// Row reductions: rms_norm, layer_norm and softmax. One workgroup per row; partial sums combine through
// subgroup operations and one shared slot per subgroup.
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "types.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint OP = 0;
#define OP_RMS_NORM 0u
#define OP_SOFTMAX 1u
#define OP_LAYER_NORM 2u
#define MAX_SUBGROUPS 128

struct NormParams {
  TensorRef x;
  TensorRef w;
  TensorRef b;
  uint64_t dst;
  uint rows, cols;
  uint out_dtype;
  float eps_or_scale;  // rms_norm, layer_norm: eps; softmax: the logit scale
  uint has_w;
  uint has_b;
};
layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer ParamsRef { NormParams p; };

shared float s_part[MAX_SUBGROUPS];

float workgroup_sum(float v) {
  v = subgroupAdd(v);
  if (gl_SubgroupInvocationID == 0) s_part[gl_SubgroupID] = v;
  barrier();
  float total = 0.0;
  for (uint i = 0; i < gl_NumSubgroups; ++i) total += s_part[i];
  barrier();
  return total;
}
float workgroup_max(float v) {
  v = subgroupMax(v);
  if (gl_SubgroupInvocationID == 0) s_part[gl_SubgroupID] = v;
  barrier();
  float m = -1.0 / 0.0;
  for (uint i = 0; i < gl_NumSubgroups; ++i) m = max(m, s_part[i]);
  barrier();
  return m;
}

void main() {
  const NormParams P = ParamsRef(pc.params_addr).p;
  const uint esize = dtype_size(P.out_dtype);
  for (uint r = gl_WorkGroupID.x; r < P.rows; r += gl_NumWorkGroups.x) {
    const uint64_t orow = P.dst + uint64_t(r) * P.cols * esize;
    if (OP == OP_RMS_NORM) {
      float ss = 0.0;
      for (uint c = gl_LocalInvocationID.x; c < P.cols; c += gl_WorkGroupSize.x) {
        const float v = load_elem(P.x, r, c);
        ss += v * v;
      }
      const float inv = inversesqrt(workgroup_sum(ss) / float(P.cols) + P.eps_or_scale);
      for (uint c = gl_LocalInvocationID.x; c < P.cols; c += gl_WorkGroupSize.x) {
        float v = load_elem(P.x, r, c) * inv;
        if (P.has_w != 0u) v *= load_elem(P.w, 0u, c);
        store_f(orow + uint64_t(c) * esize, P.out_dtype, v);
      }
    } else if (OP == OP_LAYER_NORM) {
      // Two passes: the mean, then the variance of the centred row.
      float sum = 0.0;
      for (uint c = gl_LocalInvocationID.x; c < P.cols; c += gl_WorkGroupSize.x) sum += load_elem(P.x, r, c);
      const float mean = workgroup_sum(sum) / float(P.cols);
      float ss = 0.0;
      for (uint c = gl_LocalInvocationID.x; c < P.cols; c += gl_WorkGroupSize.x) {
        const float d = load_elem(P.x, r, c) - mean;
        ss += d * d;
      }
      const float inv = inversesqrt(workgroup_sum(ss) / float(P.cols) + P.eps_or_scale);
      for (uint c = gl_LocalInvocationID.x; c < P.cols; c += gl_WorkGroupSize.x) {
        float v = (load_elem(P.x, r, c) - mean) * inv;
        if (P.has_w != 0u) v *= load_elem(P.w, 0u, c);
        if (P.has_b != 0u) v += load_elem(P.b, 0u, c);
        store_f(orow + uint64_t(c) * esize, P.out_dtype, v);
      }
    } else {
      float m = -1.0 / 0.0;
      for (uint c = gl_LocalInvocationID.x; c < P.cols; c += gl_WorkGroupSize.x)
        m = max(m, load_elem(P.x, r, c) * P.eps_or_scale);
      m = workgroup_max(m);
      float sum = 0.0;
      for (uint c = gl_LocalInvocationID.x; c < P.cols; c += gl_WorkGroupSize.x)
        sum += exp(load_elem(P.x, r, c) * P.eps_or_scale - m);
      const float inv = 1.0 / workgroup_sum(sum);
      for (uint c = gl_LocalInvocationID.x; c < P.cols; c += gl_WorkGroupSize.x)
        store_f(orow + uint64_t(c) * esize, P.out_dtype, exp(load_elem(P.x, r, c) * P.eps_or_scale - m) * inv);
    }
  }
}
