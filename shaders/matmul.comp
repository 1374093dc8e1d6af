#version 460
// out = x @ w^T (+ bias) with w in any weight format (WTYPE, one SPIR-V per format), and the
// MoE grouped form (matmul_id: each row's weight matrix is expert ids[t, j] of w [E, N, K]).
//  TILED=0  GEMV: one subgroup per (output column, output row), lanes split K and reduce
//           through subgroupAdd; decode (M small) and every matmul_id.
//  TILED=1  GEMM: 32x32 output tiles, 8x8 threads with 4x4 outputs each, K staged through
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

// Each subgroup owns one output column at a time and reduces with subgroupAdd alone: no shared
// memory and no barriers, which lavapipe implements with costly coroutine switches.
void main() {
  const MatmulParams P = ParamsRef(pc.params_addr).p;
  const bool use_ids = (P.flags & FLAG_IDS) != 0u, weighted = (P.flags & FLAG_WEIGHTED) != 0u;
  const uint n_terms = weighted ? P.k_slots : 1u;
  const uint lane = gl_SubgroupInvocationID, lanes = gl_SubgroupSize;
  const uint n_step = gl_NumWorkGroups.x * gl_NumSubgroups;
  for (uint r = gl_WorkGroupID.y; r < P.M; r += gl_NumWorkGroups.y) {
    for (uint n = gl_WorkGroupID.x * gl_NumSubgroups + gl_SubgroupID; n < P.N; n += n_step) {
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
        for (uint k = lane; k < P.K; k += lanes)
          part += load_f(xa + uint64_t(k) * P.x.col_stride, P.x.dtype) * load_weight(wa, k);
        acc += coef * part;
      }
      acc = subgroupAdd(acc);
      if (lane == 0u) {
        if ((P.flags & FLAG_BIAS) != 0u) acc += load_f(P.bias + uint64_t(n) * dtype_size(P.bias_dtype), P.bias_dtype);
        store_f(P.dst + (uint64_t(r) * P.N + n) * dtype_size(P.out_dtype), P.out_dtype, acc);
      }
    }
  }
}
#else
// 8x8 threads, each computing a 4x4 block of the 32x32 output tile: 8 shared-memory reads per
// 16 multiply-adds (lavapipe turns every shared read into a gather).
layout(local_size_x = 8, local_size_y = 8) in;
#define TILE 32u
#define THREADS 64u
shared float s_x[TILE][TILE + 1];
shared float s_w[TILE][TILE + 1];
shared uint64_t s_xrow[TILE], s_wrow[TILE];  // row addresses: computed once, not per element

void main() {
  const MatmulParams P = ParamsRef(pc.params_addr).p;
  const uint m0 = gl_WorkGroupID.y * TILE, n0 = gl_WorkGroupID.x * TILE;
  const uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;
  const uint lid = ty * 8u + tx;
  float acc[4][4];
  for (uint a = 0; a < 4u; ++a)
    for (uint b = 0; b < 4u; ++b) acc[a][b] = 0.0;
  if (lid < TILE) {
    s_xrow[lid] = m0 + lid < P.M ? row_addr(P.x, m0 + lid) : 0ul;
    s_wrow[lid] = n0 + lid < P.N ? row_addr(P.w, n0 + lid) : 0ul;
  }
  barrier();
  for (uint k0 = 0; k0 < P.K; k0 += TILE) {
    for (uint l = lid; l < TILE * TILE; l += THREADS) {
      const uint i = l / TILE, kk = l % TILE, k = k0 + kk;
      const bool in_k = k < P.K;
      s_x[i][kk] = in_k && m0 + i < P.M ? load_f(s_xrow[i] + uint64_t(k) * P.x.col_stride, P.x.dtype) : 0.0;
      s_w[i][kk] = in_k && n0 + i < P.N ? load_weight(s_wrow[i], k) : 0.0;
    }
    barrier();
    for (uint kk = 0; kk < TILE; ++kk) {
      float xv[4], wv[4];
      for (uint a = 0; a < 4u; ++a) xv[a] = s_x[ty * 4u + a][kk];
      for (uint b = 0; b < 4u; ++b) wv[b] = s_w[tx * 4u + b][kk];
      for (uint a = 0; a < 4u; ++a)
        for (uint b = 0; b < 4u; ++b) acc[a][b] += xv[a] * wv[b];
    }
    barrier();
  }
  const uint esize = dtype_size(P.out_dtype);
  for (uint a = 0; a < 4u; ++a)
    for (uint b = 0; b < 4u; ++b) {
      const uint m = m0 + ty * 4u + a, n = n0 + tx * 4u + b;
      if (m >= P.M || n >= P.N) continue;
      float v = acc[a][b];
      if ((P.flags & FLAG_BIAS) != 0u) v += load_f(P.bias + uint64_t(n) * dtype_size(P.bias_dtype), P.bias_dtype);
      store_f(P.dst + (uint64_t(m) * P.N + n) * esize, P.out_dtype, v);
    }
}
#endif
