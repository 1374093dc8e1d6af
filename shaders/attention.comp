#version 460
// Paged attention over a KV cache [n_blocks, block_size, Hkv, D] (cache rows: slot * Hkv + h).
//  STAGE=0  store: copies the new K/V rows into their slots (one thread per element; slot -1
//           stores nothing).
//  STAGE=1  attend: one workgroup per (query row, q head); keys are taken WG at a time: each
//           thread scores one key, then every thread folds the chunk into its share of the
//           output dims with an online softmax. Causal, GQA, sliding window, softcap.
// Every block-table entry and slot is bounds-checked here as well as on the host.
#include "types.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint MAX_D = 256;
#define MAX_WG 256u

struct AttnParams {
  TensorRef q, k, v, kc, vc;
  uint64_t slots, query_start, seq_lens, tables, dst;
  uint T, Hq, Hkv, D;
  uint block_size, n_blocks, S, max_blocks;
  float scale, softcap;
  int window;
  uint out_dtype;
};
layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer ParamsRef { AttnParams p; };

#if STAGE == 0
void main() {
  const AttnParams P = ParamsRef(pc.params_addr).p;
  const uint n = P.T * P.Hkv * P.D;
  const uint n_slots = P.n_blocks * P.block_size;
  const uint step = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint i = gl_GlobalInvocationID.x; i < n; i += step) {
    const uint row = i / P.D, c = i % P.D;  // row = t * Hkv + h
    const uint t = row / P.Hkv, h = row % P.Hkv;
    const int slot = load_i32(P.slots + uint64_t(t) * 4u);
    if (slot < 0 || uint(slot) >= n_slots) continue;
    const uint crow = uint(slot) * P.Hkv + h;
    store_f(row_addr(P.kc, crow) + uint64_t(c) * P.kc.col_stride, P.kc.dtype, load_elem(P.k, row, c));
    store_f(row_addr(P.vc, crow) + uint64_t(c) * P.vc.col_stride, P.vc.dtype, load_elem(P.v, row, c));
  }
}
#else
shared float s_q[MAX_D];
shared float s_p[MAX_WG];
shared uint s_row[MAX_WG];
#define PER_THREAD 8u  // output dims per thread: MAX_D / WG, checked on the host

void main() {
  const AttnParams P = ParamsRef(pc.params_addr).p;
  const uint tid = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;
  const uint t = gl_WorkGroupID.x, h = gl_WorkGroupID.y;
  // The sequence of query row t.
  uint s = 0u;
  while (s + 1u < P.S && load_i32(P.query_start + uint64_t(s + 1u) * 4u) <= int(t)) ++s;
  const int q0 = load_i32(P.query_start + uint64_t(s) * 4u);
  const int q1 = load_i32(P.query_start + uint64_t(s + 1u) * 4u);
  const int len = load_i32(P.seq_lens + uint64_t(s) * 4u);
  const int pos = len - (q1 - q0) + (int(t) - q0);
  const int lo = P.window > 0 ? max(0, pos - P.window + 1) : 0;
  const uint hk = h / (P.Hq / P.Hkv);
  for (uint c = tid; c < P.D; c += wg) s_q[c] = load_elem(P.q, t * P.Hq + h, c);
  barrier();
  float m = -1.0 / 0.0, l = 0.0;
  float acc[PER_THREAD];
  for (uint i = 0; i < PER_THREAD; ++i) acc[i] = 0.0;
  for (int j0 = lo; j0 <= pos; j0 += int(wg)) {
    const int j = j0 + int(tid);
    float score = -1.0 / 0.0;
    uint crow = 0u;
    if (j <= pos && uint(j) / P.block_size < P.max_blocks) {
      const int blk = load_i32(P.tables + (uint64_t(s) * P.max_blocks + uint(j) / P.block_size) * 4u);
      if (blk >= 0 && uint(blk) < P.n_blocks) {
        crow = (uint(blk) * P.block_size + uint(j) % P.block_size) * P.Hkv + hk;
        const uint64_t ka = row_addr(P.kc, crow);
        float d = 0.0;
        for (uint c = 0; c < P.D; ++c) d += s_q[c] * load_f(ka + uint64_t(c) * P.kc.col_stride, P.kc.dtype);
        d *= P.scale;
        if (P.softcap > 0.0) d = P.softcap * tanh(d / P.softcap);
        score = d;
      }
    }
    s_p[tid] = score;
    s_row[tid] = crow;
    barrier();
    const uint n_keys = uint(min(int(wg), pos - j0 + 1));
    float m_new = m;
    for (uint i = 0; i < n_keys; ++i) m_new = max(m_new, s_p[i]);
    if (m_new > -1.0 / 0.0) {
      const float corr = exp(m - m_new);
      l *= corr;
      for (uint i = 0; i < PER_THREAD; ++i) acc[i] *= corr;
      for (uint i = 0; i < n_keys; ++i) {
        if (!(s_p[i] > -1.0 / 0.0)) continue;  // masked: a bad block-table entry
        const float p = exp(s_p[i] - m_new);
        l += p;
        const uint64_t va = row_addr(P.vc, s_row[i]);
        for (uint e = 0; e < PER_THREAD; ++e) {
          const uint c = tid + e * wg;
          if (c < P.D) acc[e] += p * load_f(va + uint64_t(c) * P.vc.col_stride, P.vc.dtype);
        }
      }
      m = m_new;
    }
    barrier();
  }
  const uint esize = dtype_size(P.out_dtype);
  const uint64_t orow = P.dst + uint64_t(t * P.Hq + h) * P.D * esize;
  for (uint e = 0; e < PER_THREAD; ++e) {
    const uint c = tid + e * wg;
    if (c < P.D) store_f(orow + uint64_t(c) * esize, P.out_dtype, l > 0.0 ? acc[e] / l : 0.0);
  }
}
#endif
