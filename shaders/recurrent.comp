#version 460
// The recurrent layers' ops (core/op.h): STAGE 0 ssm_conv, one thread per (sequence, channel)
// sliding a K-tap window down the sequence's rows; STAGE 1 gated_delta_net, one thread per
// (sequence, value head, state column j), each owning column j of the head's [Dk, Dv] state in
// place (no two threads touch the same state element, so no barrier is needed). Both read and
// write their sequence's state row and bounds-check the metadata they read.
#include "types.glsl"

layout(local_size_x_id = 0) in;

#if STAGE == 0
#define MAX_K 8u
struct ConvParams {
  TensorRef x, w, st;
  uint64_t query_start, slots, dst;
  uint S, C, K, silu;
  uint out_dtype, T, n_slots, pad;
};
layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer ParamsRef { ConvParams p; };

void main() {
  const ConvParams P = ParamsRef(pc.params_addr).p;
  const uint step = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint idx = gl_GlobalInvocationID.x; idx < P.S * P.C; idx += step) {
    const uint s = idx / P.C, c = idx % P.C;
    const int a = load_i32(P.query_start + uint64_t(s) * 4u), b = load_i32(P.query_start + uint64_t(s + 1u) * 4u);
    const int slot = load_i32(P.slots + uint64_t(s) * 4u);
    if (slot < 0 || uint(slot) >= P.n_slots || a < 0 || b < a || uint(b) > P.T) continue;
    float win[MAX_K];
    for (uint j = 0u; j + 1u < P.K; ++j) win[j] = load_elem(P.st, uint(slot) * (P.K - 1u) + j, c);
    for (int r = a; r < b; ++r) {
      win[P.K - 1u] = load_elem(P.x, uint(r), c);
      float acc = 0.0;
      for (uint j = 0u; j < P.K; ++j) acc += load_elem(P.w, c, j) * win[j];
      const float y = P.silu != 0u ? acc / (1.0 + exp(min(-acc, 88.0))) : acc;
      store_f(P.dst + (uint64_t(r) * P.C + c) * dtype_size(P.out_dtype), P.out_dtype, y);
      for (uint j = 0u; j + 1u < P.K; ++j) win[j] = win[j + 1u];
    }
    for (uint j = 0u; j + 1u < P.K; ++j)
      F32Ref(row_addr(P.st, uint(slot) * (P.K - 1u) + j) + uint64_t(c) * P.st.col_stride).v = win[j];
  }
}

#else
struct GdnParams {
  TensorRef q, k, v, alpha, beta, st;
  uint64_t decay_rate, dt_bias, query_start, slots, dst;
  uint S, Hk, Hv, Dk;
  uint Dv, l2_norm, out_dtype, T;
  float scale, eps;
  uint n_slots, tiled_heads;
};
layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer ParamsRef { GdnParams p; };

float sigmoid(float x) { return 1.0 / (1.0 + exp(min(-x, 88.0))); }
float softplus(float x) { return x > 20.0 ? x : log(1.0 + exp(x)); }

void main() {
  const GdnParams P = ParamsRef(pc.params_addr).p;
  const uint step = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint idx = gl_GlobalInvocationID.x; idx < P.S * P.Hv * P.Dv; idx += step) {
    const uint j = idx % P.Dv, h = (idx / P.Dv) % P.Hv, s = idx / (P.Dv * P.Hv);
    const uint hk = P.tiled_heads != 0u ? h % P.Hk : h / (P.Hv / P.Hk);
    const int a = load_i32(P.query_start + uint64_t(s) * 4u), b = load_i32(P.query_start + uint64_t(s + 1u) * 4u);
    const int slot = load_i32(P.slots + uint64_t(s) * 4u);
    if (slot < 0 || uint(slot) >= P.n_slots || a < 0 || b < a || uint(b) > P.T) continue;
    const uint srow0 = (uint(slot) * P.Hv + h) * P.Dk;  // state row of (slot, h, i = 0)
    for (int r = a; r < b; ++r) {
      const uint qrow = uint(r) * P.Hk + hk;
      float qq = 0.0, kk = 0.0;
      if (P.l2_norm != 0u)
        for (uint i = 0u; i < P.Dk; ++i) {
          const float qi = load_elem(P.q, qrow, i), ki = load_elem(P.k, qrow, i);
          qq += qi * qi;
          kk += ki * ki;
        }
      const float qf = (P.l2_norm != 0u ? inversesqrt(qq + P.eps) : 1.0) * P.scale;
      const float kf = P.l2_norm != 0u ? inversesqrt(kk + P.eps) : 1.0;
      const float x = load_elem(P.alpha, uint(r), h);
      const float g = P.decay_rate != 0ul
                          ? F32Ref(P.decay_rate + uint64_t(h) * 4u).v * softplus(x + F32Ref(P.dt_bias + uint64_t(h) * 4u).v)
                          : x;
      const float decay = exp(g), bt = sigmoid(load_elem(P.beta, uint(r), h));
      float u = 0.0;
      for (uint i = 0u; i < P.Dk; ++i) {
        const uint64_t e = row_addr(P.st, srow0 + i) + uint64_t(j) * P.st.col_stride;
        const float sv = F32Ref(e).v * decay;
        F32Ref(e).v = sv;
        u += sv * load_elem(P.k, qrow, i) * kf;
      }
      u = (load_elem(P.v, uint(r) * P.Hv + h, j) - u) * bt;
      float o = 0.0;
      for (uint i = 0u; i < P.Dk; ++i) {
        const uint64_t e = row_addr(P.st, srow0 + i) + uint64_t(j) * P.st.col_stride;
        const float sv = F32Ref(e).v + load_elem(P.k, qrow, i) * kf * u;
        F32Ref(e).v = sv;
        o += sv * load_elem(P.q, qrow, i) * qf;
      }
      store_f(P.dst + (uint64_t(uint(r) * P.Hv + h) * P.Dv + j) * dtype_size(P.out_dtype), P.out_dtype, o);
    }
  }
}
#endif
