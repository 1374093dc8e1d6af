#version 460
// add, mul (b broadcast over a's leading rows), scale, swiglu/geglu/sigmoid glu/swiglu_oai, gelu (erf form), cast and copy: one thread
// per output element of [rows, cols], any input strides, contiguous output. OP is a
// specialisation constant, so each op compiles to its own small pipeline.
#include "types.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint OP = 0;
#define OP_ADD 0u
#define OP_MUL 1u
#define OP_SCALE 2u
#define OP_SILU_GLU 3u
#define OP_GELU_GLU 4u
#define OP_CONVERT 5u
#define OP_GELU_ERF 6u
#define OP_SIGMOID_GLU 7u
#define OP_SWIGLU_OAI 8u  // gpt-oss: min(x, limit) sigmoid(alpha min(x, limit)) (clamp(up, +-limit) + 1)

// erf(x) for the exact GELU (GLSL has none): Abramowitz & Stegun 7.1.26, absolute error under
// 1.5e-7, below f32 rounding of the GELU's output at the magnitudes that matter.
float erf_approx(float x) {
  const float t = 1.0 / (1.0 + 0.3275911 * abs(x));
  const float y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t +
                         0.254829592) * t * exp(-x * x);
  return x < 0.0 ? -y : y;
}

struct EltParams {
  TensorRef a;
  TensorRef b;
  uint64_t dst;
  uint rows, cols;
  uint out_dtype;
  float scale;  // scale; swiglu_oai: alpha
  uint b_rows;
  float limit;  // swiglu_oai
  float softcap;
};
layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer ParamsRef { EltParams p; };

void main() {
  const EltParams P = ParamsRef(pc.params_addr).p;
  const uint n = P.rows * P.cols;
  const uint step = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint i = gl_GlobalInvocationID.x; i < n; i += step) {
    const uint r = i / P.cols, c = i % P.cols;
    const float x = load_elem(P.a, r, c);
    float y;
    if (OP == OP_ADD || OP == OP_MUL) {
      const float z = load_elem(P.b, r % P.b_rows, c);
      y = OP == OP_ADD ? x + z : x * z;
    } else if (OP == OP_SCALE) {
      y = x * P.scale;
      if (P.softcap > 0.0) y = P.softcap * tanh(y / P.softcap);
    } else if (OP == OP_SILU_GLU) {
      y = x / (1.0 + exp(-x)) * load_elem(P.b, r, c);
    } else if (OP == OP_GELU_GLU) {
      const float t = tanh(0.7978845608028654 * (x + 0.044715 * x * x * x));
      y = 0.5 * x * (1.0 + t) * load_elem(P.b, r, c);
    } else if (OP == OP_SIGMOID_GLU) {
      y = 1.0 / (1.0 + exp(min(-x, 88.0))) * load_elem(P.b, r, c);
    } else if (OP == OP_SWIGLU_OAI) {
      const float g = min(x, P.limit);
      const float u = clamp(load_elem(P.b, r, c), -P.limit, P.limit);
      y = g / (1.0 + exp(min(-P.scale * g, 88.0))) * (u + 1.0);
    } else if (OP == OP_GELU_ERF) {
      y = 0.5 * x * (1.0 + erf_approx(x * 0.7071067811865476));
    } else {
      y = x;
    }
    store_f(P.dst + uint64_t(i) * dtype_size(P.out_dtype), P.out_dtype, y);
  }
}
