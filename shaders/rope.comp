#version 460
// Rotary position embedding, normal (adjacent pairs) or NeoX (halves) layout, with linear,
// YaRN and per-frequency-factor scaling. One thread per output element. The angle is formed and
// reduced modulo 2*pi in double precision: at position 32k a float angle is off by ~1e-3 rad.
#extension GL_EXT_shader_explicit_arithmetic_types_float64 : require
#include "types.glsl"

layout(local_size_x_id = 0) in;

layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer F64Ref { double v; };

struct RopeParams {
  TensorRef x;
  uint64_t pos;
  uint64_t freq_factors;  // 0 when absent
  uint64_t inv_freq;      // [n_dims/2] f64: freq_base^(-2i/n_dims), written by the host
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
      const double position = double(load_i32(P.pos + uint64_t(r / P.H) * 4u));
      double ff = 1.0;
      if (P.freq_factors != 0ul) ff = double(F32Ref(P.freq_factors + uint64_t(i) * 4u).v);
      const double extrap = position * F64Ref(P.inv_freq + uint64_t(i) * 8u).v / ff;
      const double interp = double(P.freq_scale) * extrap;
      double theta = interp;
      if (P.ext_factor != 0.0) {
        const float yr = (float(i) - P.corr_lo) / max(0.001, P.corr_hi - P.corr_lo);
        const double ramp = double((1.0 - min(1.0, max(0.0, yr))) * P.ext_factor);
        theta = interp * (1.0 - ramp) + extrap * ramp;
      }
      const double two_pi = 6.283185307179586476925;
      const float reduced = float(theta - floor(theta / two_pi) * two_pi);
      const float cs = cos(reduced) * P.mscale, sn = sin(reduced) * P.mscale;
      const float x0 = load_elem(P.x, r, ca), x1 = load_elem(P.x, r, cb);
      y = c == ca ? x0 * cs - x1 * sn : x0 * sn + x1 * cs;
    }
    store_f(P.dst + uint64_t(idx) * dtype_size(P.out_dtype), P.out_dtype, y);
  }
}
