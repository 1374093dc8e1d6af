#version 460
// Peak kernels for the roofline's ceilings (VulkanDevice::measure_peaks), not ops of the graph:
//   KIND 0 (read): every invocation sums 16-byte loads, grid-stride, over a buffer several times
//                  the last-level cache; one value per invocation is stored only if the sum comes
//                  out at an impossible value, so the loads cannot be dropped and nothing else
//                  touches memory.
//   KIND 4 (read): the same with 4-byte loads, consecutive across a subgroup's lanes (a CPU
//                  implementation such as lavapipe turns these into full-width vector loads,
//                  where it gathers the 16-byte ones).
//   KIND 1 (copy): 16-byte loads and stores, grid-stride (bytes read + written).
//   KIND 5 (copy): the same with 4-byte lane-consecutive loads and stores.
//   KIND 2 (f32):  ITERS rounds of 8 independent vec4 FMA chains per invocation (no memory).
//   KIND 3 (f16):  the same on f16vec4 (shaderFloat16 devices only).
// The ceilings are what these loops reach on the device's own clock; a kernel of the sweep that
// plots above them shows a roof that is wrong, not a fast kernel.
#include "types.glsl"
#if KIND == 3
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#endif

layout(local_size_x = 256) in;

layout(buffer_reference, std430, buffer_reference_align = 16) buffer Vec4Ref { uvec4 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer FloatsRef { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer UintsRef { uint v[]; };

struct PeakParams {
  uint64_t src;   // KIND 0, 1: the buffer read
  uint64_t dst;   // KIND 1: the buffer written; otherwise where an impossible result would go
  uint n;         // KIND 0, 1: 16-byte elements of src (and dst); KIND 4, 5: 4-byte ones
  uint iters;     // KIND 2, 3: rounds of the FMA loop
  float seed;     // KIND 2, 3: a value the compiler cannot see (the host passes 1.0)
  uint pad;
};
layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer ParamsRef { PeakParams p; };

void main() {
  const PeakParams P = ParamsRef(pc.params_addr).p;
  const uint gid = gl_GlobalInvocationID.x;
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
#if KIND == 0
  Vec4Ref src = Vec4Ref(P.src);
  uvec4 a = uvec4(0), b = uvec4(0);
  uint i = gid;
  for (; i + stride < P.n; i += 2 * stride) {
    a ^= src.v[i];
    b ^= src.v[i + stride];
  }
  if (i < P.n) a ^= src.v[i];
  a ^= b;
  if (a.x == 0x9E3779B9u && a.y == 0x7F4A7C15u) FloatsRef(P.dst).v[gid] = float(a.z);
#elif KIND == 4
  UintsRef src = UintsRef(P.src);
  uint a = 0, b = 0, c = 0, d = 0;
  uint i = gid;
  for (; i + 3 * stride < P.n; i += 4 * stride) {
    a ^= src.v[i];
    b ^= src.v[i + stride];
    c ^= src.v[i + 2 * stride];
    d ^= src.v[i + 3 * stride];
  }
  for (; i < P.n; i += stride) a ^= src.v[i];
  a ^= b ^ c ^ d;
  if (a == 0x9E3779B9u) FloatsRef(P.dst).v[gid] = float(a);
#elif KIND == 1
  Vec4Ref src = Vec4Ref(P.src), dst = Vec4Ref(P.dst);
  for (uint i = gid; i < P.n; i += stride) dst.v[i] = src.v[i];
#elif KIND == 5
  UintsRef src = UintsRef(P.src), dst = UintsRef(P.dst);
  for (uint i = gid; i < P.n; i += stride) dst.v[i] = src.v[i];
#elif KIND == 2
  const float s = P.seed;
  vec4 acc[8];
  for (int j = 0; j < 8; ++j) acc[j] = vec4(float(gid & 7u) * 1e-3 + float(j) * 1e-4);
  const vec4 m = vec4(s * 0.999999, s * 0.999998, s * 0.999997, s * 0.999996);
  const vec4 c = vec4(s * 1e-7);
  for (uint it = 0; it < P.iters; ++it)
    for (int j = 0; j < 8; ++j) acc[j] = fma(acc[j], m, c);
  vec4 t = acc[0];
  for (int j = 1; j < 8; ++j) t += acc[j];
  if (t.x == -1.0) FloatsRef(P.dst).v[gid] = t.y + t.z + t.w;
#elif KIND == 3
  const float16_t s = float16_t(P.seed);
  f16vec4 acc[8];
  for (int j = 0; j < 8; ++j) acc[j] = f16vec4(float16_t(float(gid & 7u) * 1e-2 + float(j) * 1e-3));
  const f16vec4 m = f16vec4(s * float16_t(0.999), s * float16_t(0.998), s * float16_t(0.997), s * float16_t(0.996));
  const f16vec4 c = f16vec4(s * float16_t(1e-3));
  for (uint it = 0; it < P.iters; ++it)
    for (int j = 0; j < 8; ++j) acc[j] = fma(acc[j], m, c);
  f16vec4 t = acc[0];
  for (int j = 1; j < 8; ++j) t += acc[j];
  if (t.x == float16_t(-1.0)) FloatsRef(P.dst).v[gid] = float(t.y + t.z + t.w);
#endif
}
