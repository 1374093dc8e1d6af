#version 460
// out = x @ w^T (+ bias) with w in any weight format (WTYPE, one SPIR-V per format), and the
// MoE grouped form (matmul_id: each row's weight matrix is expert ids[t, j] of w [E, N, K], with an
// optional [E, N] bias whose row ids[t, j] joins that slot's product).
//  TILED=0  GEMV: one subgroup per (COLS output columns, up to ROWS output rows), lanes split
//           K in units of 16 weights and reduce through subgroupAdd; decode (M small) and every
//           matmul_id.
//  TILED=1  GEMM: 32x64 output tiles, 64 threads with 4x8 outputs each, K staged through
//           shared memory in steps of 32 (a multiple of every format's run); prefill.
// Weights are read a unit (dequant.glsl) at a time with wide loads, never one load per element.
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "types.glsl"
#include "dequant.glsl"

#define FLAG_BIAS 1u
#define FLAG_IDS 2u
#define FLAG_WEIGHTED 4u
#define FLAG_X_PER_SLOT 8u
#define FLAG_X_F32_ALIGNED 16u  // x is f32 with contiguous, 16-byte aligned rows: 8-byte loads

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

// The 16 activations of row |xa| that pair with a weight unit whose first run starts at |k0|.
void load_x_unit(const TensorRef x, uint64_t xa, uint k0, bool f32_aligned, out float xs[16]) {
  if (f32_aligned) {
    for (uint h = 0; h < 2u; ++h) {
      const uint64_t a = xa + uint64_t(k0 + h * UNIT_RUN1) * 4u;
      for (uint i = 0; i < 4u; ++i) {
        const uvec2 v = load8_a8(a + 8u * i);
        xs[8u * h + 2u * i] = uintBitsToFloat(v.x);
        xs[8u * h + 2u * i + 1u] = uintBitsToFloat(v.y);
      }
    }
  } else {
    for (uint i = 0; i < 8u; ++i) {
      xs[i] = load_f(xa + uint64_t(k0 + i) * x.col_stride, x.dtype);
      xs[8u + i] = load_f(xa + uint64_t(k0 + UNIT_RUN1 + i) * x.col_stride, x.dtype);
    }
  }
}

float dot16(const float a[16], const float b[16]) {
  float s = 0.0;
  for (uint i = 0; i < 16u; ++i) s += a[i] * b[i];
  return s;
}

#if TILED == 0
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint ROWS = 1;  // activation rows that share each weight read (1, 2, 4, 8)
#define COLS 8u  // output columns per subgroup: each activation read serves COLS weight rows

// acc[c][r] += this lane's share of dot(weight row wa[c], activation row xa[r]) for c < nc,
// r < nr. Lanes take weight units in turn (a subgroup reads consecutive units of a row:
// coalesced on GPUs); each unit of x is read once for all nc columns, each weight unit once for
// all nr rows.
void dot_tile(const MatmulParams P, const uint64_t wa[COLS], uint nc, const uint64_t xa[ROWS], uint nr, float coef,
              inout float acc[COLS][ROWS]) {
  const uint lane = gl_SubgroupInvocationID, lanes = gl_SubgroupSize;
  const bool xf = (P.flags & FLAG_X_F32_ALIGNED) != 0u;
  const uint n_units = P.K / UNIT;
  for (uint u = lane; u < n_units; u += lanes) {
    float xs[ROWS][16], w[16];
    const uint k0 = unit_run0(u);
    for (uint r = 0; r < ROWS; ++r)
      if (r < nr) load_x_unit(P.x, xa[r], k0, xf, xs[r]);
    for (uint c = 0; c < COLS; ++c) {
      if (c >= nc) break;
      load_unit(wa[c], u, w);
      for (uint r = 0; r < ROWS; ++r)
        if (r < nr) acc[c][r] += coef * dot16(w, xs[r]);
    }
  }
  // The tail of a float row whose K is not a multiple of UNIT (block formats have none).
  for (uint k = n_units * UNIT + lane; k < P.K; k += lanes)
    for (uint c = 0; c < nc; ++c) {
      const float wv = coef * load_weight(wa[c], k);
      for (uint r = 0; r < nr; ++r) acc[c][r] += wv * load_f(xa[r] + uint64_t(k) * P.x.col_stride, P.x.dtype);
    }
}

// One subgroup per (COLS output columns, up to ROWS output rows); lanes split K and reduce
// through subgroupAdd alone: no shared memory and no barriers, which lavapipe implements with
// costly coroutine switches. matmul_id takes one row per group (its rows use different experts).
void main() {
  const MatmulParams P = ParamsRef(pc.params_addr).p;
  const bool use_ids = (P.flags & FLAG_IDS) != 0u, weighted = (P.flags & FLAG_WEIGHTED) != 0u;
  const uint rows_per_group = use_ids ? 1u : ROWS;
  const uint n_groups = (P.M + rows_per_group - 1u) / rows_per_group;
  const uint n_step = gl_NumWorkGroups.x * gl_NumSubgroups * COLS;
  for (uint g = gl_WorkGroupID.y; g < n_groups; g += gl_NumWorkGroups.y) {
    const uint r0 = g * rows_per_group, nr = min(rows_per_group, P.M - r0);
    for (uint n0 = (gl_WorkGroupID.x * gl_NumSubgroups + gl_SubgroupID) * COLS; n0 < P.N; n0 += n_step) {
      const uint nc = min(COLS, P.N - n0);
      float acc[COLS][ROWS];
      float bsum[COLS];  // matmul_id: sum over slots of coef * bias[e, n] (added once, after the reduction)
      uint64_t xa[ROWS], wa[COLS];
      for (uint c = 0; c < COLS; ++c) {
        bsum[c] = 0.0;
        for (uint r = 0; r < ROWS; ++r) acc[c][r] = 0.0;
      }
      for (uint r = 0; r < ROWS; ++r) xa[r] = r < nr ? row_addr(P.x, r0 + r) : 0ul;
      if (!use_ids) {
        for (uint c = 0; c < COLS; ++c) wa[c] = c < nc ? row_addr(P.w, n0 + c) : 0ul;
        dot_tile(P, wa, nc, xa, nr, 1.0, acc);
      } else {
        for (uint j = 0; j < (weighted ? P.k_slots : 1u); ++j) {
          const uint t = weighted ? r0 : r0 / P.k_slots, slot = weighted ? j : r0 % P.k_slots;
          const int e = load_i32(P.ids + uint64_t(t * P.k_slots + slot) * 4u);
          if (e < 0 || uint(e) >= P.n_experts) continue;  // rejected on the host where it can see ids
          xa[0] = row_addr(P.x, (P.flags & FLAG_X_PER_SLOT) != 0u ? t * P.k_slots + slot : t);
          const float coef = weighted ? F32Ref(P.weights + uint64_t(t * P.k_slots + slot) * 4u).v : 1.0;
          for (uint c = 0; c < COLS; ++c) wa[c] = c < nc ? row_addr(P.w, uint(e) * P.N + n0 + c) : 0ul;
          dot_tile(P, wa, nc, xa, 1u, coef, acc);
          if ((P.flags & FLAG_BIAS) != 0u)
            for (uint c = 0; c < nc; ++c)
              bsum[c] += coef * load_f(P.bias + (uint64_t(e) * P.N + n0 + c) * dtype_size(P.bias_dtype), P.bias_dtype);
        }
      }
      for (uint c = 0; c < COLS; ++c)
        for (uint r = 0; r < ROWS; ++r) {
          if (c >= nc || r >= nr) continue;
          float v = subgroupAdd(acc[c][r]);
          if (gl_SubgroupInvocationID == 0u) {
            const uint n = n0 + c;
            if (use_ids) v += bsum[c];
            else if ((P.flags & FLAG_BIAS) != 0u) v += load_f(P.bias + uint64_t(n) * dtype_size(P.bias_dtype), P.bias_dtype);
            store_f(P.dst + (uint64_t(r0 + r) * P.N + n) * dtype_size(P.out_dtype), P.out_dtype, v);
          }
        }
    }
  }
}
#else
// A BM x BN output tile per workgroup of 64 threads, each computing 4 rows x 8 columns (12
// shared-memory reads per 32 multiply-adds). K goes through shared memory BK = 32 (one quant
// block of the 32-element formats) at a time, each weight unit dequantised with wide loads.
layout(local_size_x = 64) in;
#define BM 32u
#define BN 64u
#define BK 32u
shared float s_x[BM][BK + 1u];
shared float s_w[BN][BK + 1u];
shared uint64_t s_xrow[BM], s_wrow[BN];  // row addresses: computed once, not per element

// The weight units that hold columns [k0, k0 + BK) (dequant.glsl tile_unit) of the tile's BN
// rows into s_w; a unit whose other run lies outside the window (formats with UNIT_RUN1 >= 32)
// contributes only the run inside it.
void stage_weights(const MatmulParams P, uint k0, uint n0, uint lid) {
  for (uint l = lid; l < BN * TILE_UNITS; l += 64u) {
    const uint i = l / TILE_UNITS, u = tile_unit(k0, l % TILE_UNITS), k = unit_run0(u);
    float w[16];
    if (n0 + i < P.N && k + UNIT_RUN1 + 8u <= P.K) {
      load_unit(s_wrow[i], u, w);
    } else {  // a partial unit at the end of a float row, or a column past N
      for (uint j = 0; j < 16u; ++j) {
        const uint kj = k + (j < 8u ? j : UNIT_RUN1 + j - 8u);
        w[j] = n0 + i < P.N && kj < P.K ? load_weight(s_wrow[i], kj) : 0.0;
      }
    }
    for (uint h = 0; h < 2u; ++h) {
      const uint kr = k + h * UNIT_RUN1;
      if (kr < k0 || kr >= k0 + BK) continue;
      for (uint j = 0; j < 8u; ++j) s_w[i][kr - k0 + j] = w[8u * h + j];
    }
  }
}

// Activations [m0, m0 + BM) x [k0, k0 + BK) into s_x: each thread one run of 16.
void stage_x(const MatmulParams P, uint k0, uint m0, uint lid) {
  const uint i = lid >> 1, kb = k0 + (lid & 1u) * 16u;
  float xs[16];
  if (m0 + i < P.M && (P.flags & FLAG_X_F32_ALIGNED) != 0u && kb + 16u <= P.K) {
    for (uint q = 0; q < 8u; ++q) {
      const uvec2 v = load8_a8(s_xrow[i] + uint64_t(kb + 2u * q) * 4u);
      xs[2u * q] = uintBitsToFloat(v.x);
      xs[2u * q + 1u] = uintBitsToFloat(v.y);
    }
  } else {
    for (uint j = 0; j < 16u; ++j)
      xs[j] = m0 + i < P.M && kb + j < P.K ? load_f(s_xrow[i] + uint64_t(kb + j) * P.x.col_stride, P.x.dtype) : 0.0;
  }
  for (uint j = 0; j < 16u; ++j) s_x[i][kb - k0 + j] = xs[j];
}

void main() {
  const MatmulParams P = ParamsRef(pc.params_addr).p;
  const uint m0 = gl_WorkGroupID.y * BM, n0 = gl_WorkGroupID.x * BN;
  const uint lid = gl_LocalInvocationID.x, tx = lid % 8u, ty = lid / 8u;
  float acc[4][8];
  for (uint a = 0; a < 4u; ++a)
    for (uint b = 0; b < 8u; ++b) acc[a][b] = 0.0;
  for (uint i = lid; i < BN; i += 64u) {
    if (i < BM) s_xrow[i] = m0 + i < P.M ? row_addr(P.x, m0 + i) : 0ul;
    s_wrow[i] = n0 + i < P.N ? row_addr(P.w, n0 + i) : 0ul;
  }
  barrier();
  for (uint k0 = 0; k0 < P.K; k0 += BK) {
    stage_weights(P, k0, n0, lid);
    stage_x(P, k0, m0, lid);
    barrier();
    for (uint kk = 0; kk < BK; ++kk) {
      float xv[4], wv[8];
      for (uint a = 0; a < 4u; ++a) xv[a] = s_x[ty * 4u + a][kk];
      for (uint b = 0; b < 8u; ++b) wv[b] = s_w[tx + 8u * b][kk];
      for (uint a = 0; a < 4u; ++a)
        for (uint b = 0; b < 8u; ++b) acc[a][b] += xv[a] * wv[b];
    }
    barrier();
  }
  const uint esize = dtype_size(P.out_dtype);
  for (uint a = 0; a < 4u; ++a)
    for (uint b = 0; b < 8u; ++b) {
      const uint m = m0 + ty * 4u + a, n = n0 + tx + 8u * b;
      if (m >= P.M || n >= P.N) continue;
      float v = acc[a][b];
      if ((P.flags & FLAG_BIAS) != 0u) v += load_f(P.bias + uint64_t(n) * dtype_size(P.bias_dtype), P.bias_dtype);
      store_f(P.dst + (uint64_t(m) * P.N + n) * esize, P.out_dtype, v);
    }
}
#endif
