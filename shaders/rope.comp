#version 460
// Rotary position embedding, normal (adjacent pairs) or NeoX (halves) layout, with linear,
// YaRN and per-frequency-factor scaling. One thread per output element. With ROPE_FP64 the angle
// is formed and reduced modulo 2*pi in double precision (at position 32k a float angle is off by
// ~1e-3 rad); devices without shaderFloat64 get the float variant and that error.
#include "types.glsl"

layout(local_size_x_id = 0) in;

#if ROPE_FP64
#extension GL_EXT_shader_explicit_arithmetic_types_float64 : require
#define real double
layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer RealRef { double v; };
#define sizeof_real 8u
#else
#define real float
#define sizeof_real 4u
layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer RealRef { float v; };
#endif

struct RopeParams {
  TensorRef x;
  uint64_t pos;
  uint64_t freq_factors;  // 0 when absent
  uint64_t inv_freq;      // [n_dims/2] f64 (f32 without ROPE_FP64): freq_base^(-2i/n_dims)
  uint64_t dst;
  uint rows, H, D, n_dims;
  uint neox, out_dtype;
  float freq_scale, ext_factor;
  float mscale;           // attn_factor, times YaRN's magnitude correction when ext_factor != 0
  float corr_lo, corr_hi;
  uint pad;
};
layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer ParamsRef { RopeParams p; };

void main() {
  const RopeParams P = ParamsRef(pc.params_addr).p;
  const uint n = P.rows * P.D;
  const uint step = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  const uint half_dims = P.n_dims / 2u;
  for (uint idx = gl_GlobalInvocationID.x; idx < n; idx += step) {
    const uint r = idx / P.D, c = idx % P.D;  // r = t * H + h
    float y;
    if (c >= P.n_dims) {
      y = load_elem(P.x, r, c);
    } else {
      const uint i = P.neox != 0u ? c % half_dims : c / 2u;  // pair index
      const uint ca = P.neox != 0u ? i : 2u * i;
      const uint cb = P.neox != 0u ? i + half_dims : 2u * i + 1u;
      const real position = real(load_i32(P.pos + uint64_t(r / P.H) * 4u));
      real ff = real(1.0);
      if (P.freq_factors != 0ul) ff = real(F32Ref(P.freq_factors + uint64_t(i) * 4u).v);
      const real extrap = position * RealRef(P.inv_freq + uint64_t(i) * uint64_t(sizeof_real)).v / ff;
      const real interp = real(P.freq_scale) * extrap;
      real theta = interp;
      if (P.ext_factor != 0.0) {
        const float yr = (float(i) - P.corr_lo) / max(0.001, P.corr_hi - P.corr_lo);
        const real ramp = real((1.0 - min(1.0, max(0.0, yr))) * P.ext_factor);
        theta = interp * (real(1.0) - ramp) + extrap * ramp;
      }
      const real two_pi = real(6.283185307179586476925);
      const float reduced = float(theta - floor(theta / two_pi) * two_pi);
      const float cs = cos(reduced) * P.mscale, sn = sin(reduced) * P.mscale;
      const float x0 = load_elem(P.x, r, ca), x1 = load_elem(P.x, r, cb);
      y = c == ca ? x0 * cs - x1 * sn : x0 * sn + x1 * cs;
    }
    store_f(P.dst + uint64_t(idx) * dtype_size(P.out_dtype), P.out_dtype, y);
  }
}
