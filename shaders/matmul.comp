#version 460
// out = x @ w^T (+ bias) with w in any weight format (WTYPE, one SPIR-V per format), and the
// MoE grouped form (matmul_id: each row's weight matrix is expert ids[t, j] of w [E, N, K]).
//  TILED=0  GEMV: one workgroup per (output column, output row), threads split K and reduce
//           through subgroupAdd; decode (M small) and every matmul_id.
//  TILED=1  GEMM: 32x32 output tiles, 16x16 threads with 2x2 outputs each, K staged through
//           shared memory in steps of 32 (one quant block); prefill.
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "types.glsl"
#include "dequant.glsl"

#define FLAG_BIAS 1u
#define FLAG_IDS 2u
#define FLAG_WEIGHTED 4u
#define FLAG_X_PER_SLOT 8u

struct MatmulParams {
  TensorRef x;        // [rows, K] activations
  TensorRef w;        // rows of [E * N, K]
  uint64_t bias, ids, weights, dst;
  uint M;             // output rows: T (matmul, weighted matmul_id) or T * k
  uint N, K;
  uint k_slots;       // experts per token (1 for matmul)
  uint n_experts;     // E (1 for matmul)
  uint flags;
  uint bias_dtype, out_dtype;
};
layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer ParamsRef { MatmulParams p; };

#if TILED == 0
layout(local_size_x_id = 0) in;
shared float s_part[128];

float workgroup_sum(float v) {
  v = subgroupAdd(v);
  if (gl_SubgroupInvocationID == 0) s_part[gl_SubgroupID] = v;
  barrier();
  float total = 0.0;
  for (uint i = 0; i < gl_NumSubgroups; ++i) total += s_part[i];
  barrier();
  return total;
}

void main() {
  const MatmulParams P = ParamsRef(pc.params_addr).p;
  const bool use_ids = (P.flags & FLAG_IDS) != 0u, weighted = (P.flags & FLAG_WEIGHTED) != 0u;
  const uint n_terms = weighted ? P.k_slots : 1u;
  for (uint r = gl_WorkGroupID.y; r < P.M; r += gl_NumWorkGroups.y) {
    for (uint n = gl_WorkGroupID.x; n < P.N; n += gl_NumWorkGroups.x) {
      float acc = 0.0;
      for (uint j = 0; j < n_terms; ++j) {
        uint xrow = r, expert = 0u;
        float coef = 1.0;
        if (use_ids) {
          const uint t = weighted ? r : r / P.k_slots, slot = weighted ? j : r % P.k_slots;
          const int e = load_i32(P.ids + uint64_t(t * P.k_slots + slot) * 4u);
          if (e < 0 || uint(e) >= P.n_experts) continue;  // rejected on the host where it can see ids
          expert = uint(e);
          xrow = (P.flags & FLAG_X_PER_SLOT) != 0u ? t * P.k_slots + slot : t;
          if (weighted) coef = F32Ref(P.weights + uint64_t(t * P.k_slots + slot) * 4u).v;
        }
        const uint64_t xa = row_addr(P.x, xrow), wa = row_addr(P.w, expert * P.N + n);
        float part = 0.0;
        for (uint k = gl_LocalInvocationID.x; k < P.K; k += gl_WorkGroupSize.x)
          part += load_f(xa + uint64_t(k) * P.x.col_stride, P.x.dtype) * load_weight(wa, k);
        acc += coef * part;
      }
      acc = workgroup_sum(acc);
      if (gl_LocalInvocationID.x == 0) {
        if ((P.flags & FLAG_BIAS) != 0u) acc += load_f(P.bias + uint64_t(n) * dtype_size(P.bias_dtype), P.bias_dtype);
        store_f(P.dst + (uint64_t(r) * P.N + n) * dtype_size(P.out_dtype), P.out_dtype, acc);
      }
    }
  }
}
#else
layout(local_size_x = 16, local_size_y = 16) in;
#define TILE 32u
shared float s_x[TILE][TILE + 1];
shared float s_w[TILE][TILE + 1];

void main() {
  const MatmulParams P = ParamsRef(pc.params_addr).p;
  const uint m0 = gl_WorkGroupID.y * TILE, n0 = gl_WorkGroupID.x * TILE;
  const uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;
  const uint lid = ty * 16u + tx;
  float acc[2][2] = {{0.0, 0.0}, {0.0, 0.0}};
  for (uint k0 = 0; k0 < P.K; k0 += TILE) {
    for (uint l = lid; l < TILE * TILE; l += 256u) {
      const uint i = l / TILE, kk = l % TILE, k = k0 + kk;
      const bool in_k = k < P.K;
      s_x[i][kk] = in_k && m0 + i < P.M ? load_elem(P.x, m0 + i, k) : 0.0;
      s_w[i][kk] = in_k && n0 + i < P.N ? load_weight(row_addr(P.w, n0 + i), k) : 0.0;
    }
    barrier();
    for (uint kk = 0; kk < TILE; ++kk) {
      const float x0 = s_x[ty * 2u][kk], x1 = s_x[ty * 2u + 1u][kk];
      const float w0 = s_w[tx * 2u][kk], w1 = s_w[tx * 2u + 1u][kk];
      acc[0][0] += x0 * w0;
      acc[0][1] += x0 * w1;
      acc[1][0] += x1 * w0;
      acc[1][1] += x1 * w1;
    }
    barrier();
  }
  const uint esize = dtype_size(P.out_dtype);
  for (uint a = 0; a < 2u; ++a)
    for (uint b = 0; b < 2u; ++b) {
      const uint m = m0 + ty * 2u + a, n = n0 + tx * 2u + b;
      if (m >= P.M || n >= P.N) continue;
      float v = acc[a][b];
      if ((P.flags & FLAG_BIAS) != 0u) v += load_f(P.bias + uint64_t(n) * dtype_size(P.bias_dtype), P.bias_dtype);
      store_f(P.dst + (uint64_t(m) * P.N + n) * esize, P.out_dtype, v);
    }
}
#endif
