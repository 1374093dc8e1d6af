#version 460
// Paged attention over a KV cache [n_blocks, block_size, Hkv, D] (cache rows: slot * Hkv + h).
//  STAGE=0  store: copies the new K/V rows into their slots (one thread per element; slot -1
//           stores nothing).
//  STAGE=1  attend: one workgroup per (query row, q head); keys are taken WG at a time: each
//           thread scores one key, then every thread folds the chunk into its share of the
//           output dims with an online softmax. Causal or bidirectional, GQA, sliding
//           window, softcap, per-head sink logits.
// KVTYPE (a -D, default 0) picks the cache format: 0 f32/f16/bf16 (the dtype read from the
// params), W_FP8_E4M3 or W_INT8_PC: rows of [f32 scale][D codes], one per (slot, kv head), that
// STAGE 0 writes one thread per row with quant/'s encoder (kv_encode.glsl, bit-exact) and STAGE 1
// reads with the matmul's decoders (dequant_units.glsl).
// Every block-table entry and slot is bounds-checked here as well as on the host.
#include "types.glsl"
#ifndef KVTYPE
#define KVTYPE 0
#endif
#if KVTYPE != 0
#define WTYPE KVTYPE
#include "dequant.glsl"
#endif

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
  uint causal;  // 0: every query sees all seq_lens[s] keys (encoders)
  uint pad;
  uint64_t sinks;  // [Hq] f32 sink logits (gpt-oss): one more denominator term per head; 0: none
};
layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer ParamsRef { AttnParams p; };

#if STAGE == 0 && KVTYPE == 0
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
#elif STAGE == 0
#include "kv_encode.glsl"

// f32 bits of an f16, exactly (subnormals included, whatever the device does with f32 ones).
uint f16_to_f32_bits(uint h) {
  const uint s = (h & 0x8000u) << 16, e = (h >> 10) & 31u, m = h & 0x3ffu;
  if (e == 31u) return s | F32_INF | (m << 13);
  if (e != 0u) return s | ((e + 112u) << 23) | (m << 13);
  if (m == 0u) return s;
  const uint sh = 10u - uint(findMSB(m));  // normalise m * 2^-24
  return s | ((113u - sh) << 23) | (((m << sh) & 0x3ffu) << 13);
}
// f32 bits of element |c| of row |r| of a float tensor, read without a float operation.
uint load_bits(TensorRef t, uint r, uint c) {
  const uint64_t a = row_addr(t, r) + uint64_t(c) * t.col_stride;
  if (t.dtype == DT_F32) return uint(I32Ref(a).v);
  const uint h = uint(U16Ref(a).v);
  return t.dtype == DT_F16 ? f16_to_f32_bits(h) : h << 16;
}

// Row |r| of |src| quantised into cache row |crow| of |dst| (4-byte aligned, checked on the host).
void store_row(TensorRef src, uint r, TensorRef dst, uint crow, uint D) {
  uint amax = 0u;
  for (uint c = 0; c < D; ++c) {
    const uint a = load_bits(src, r, c) & 0x7fffffffu;
    if (a <= F32_INF) amax = max(amax, a);
  }
  const uint scale = kv_row_scale(amax), f = kv_row_factor(scale);
  const uint64_t base = row_addr(dst, crow);
  I32Ref(base).v = int(scale);
  for (uint c0 = 0; c0 < D; c0 += 4u) {
    uint word = 0u;  // an all-zero row (scale 0) stores zero codes
    if (scale != 0u)
      for (uint i = 0; i < 4u; ++i) word |= kv_code(load_bits(src, r, c0 + i), f) << (8u * i);
    I32Ref(base + 4u + uint64_t(c0)).v = int(word);
  }
}

// One thread per (row, K or V). NOTE: two tokens of a batch with the same slot (the engine never
// makes them) race here as they do in the float store, so which one a row then holds is
// undefined (the reference keeps the last).
void main() {
  const AttnParams P = ParamsRef(pc.params_addr).p;
  const uint n = 2u * P.T * P.Hkv;
  const uint n_slots = P.n_blocks * P.block_size;
  const uint step = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint i = gl_GlobalInvocationID.x; i < n; i += step) {
    const uint row = i >> 1, t = row / P.Hkv, h = row % P.Hkv;  // row = t * Hkv + h
    const int slot = load_i32(P.slots + uint64_t(t) * 4u);
    if (slot < 0 || uint(slot) >= n_slots) continue;
    const uint crow = uint(slot) * P.Hkv + h;
    if ((i & 1u) == 0u) store_row(P.k, row, P.kc, crow, P.D);
    else store_row(P.v, row, P.vc, crow, P.D);
  }
}
#else
shared float s_q[MAX_D];
shared float s_p[MAX_WG];
shared uint s_row[MAX_WG];
#define PER_THREAD 8u  // output dims per thread: MAX_D / WG, checked on the host

// q . key row |ka| (without the scale).
float dot_key(uint64_t ka, TensorRef kc, uint D) {
  float d = 0.0;
#if KVTYPE == 0
  for (uint c = 0; c < D; ++c) d += s_q[c] * load_f(ka + uint64_t(c) * kc.col_stride, kc.dtype);
#else
  float w[16];
  for (uint u = 0; u < D / 16u; ++u) {  // D is a multiple of 32 (the row formats' rule)
    load_unit(ka, u, w);
    for (uint i = 0; i < 16u; ++i) d += s_q[16u * u + i] * w[i];
  }
#endif
  return d;
}
// Element |c| of the value row |va|.
float value_at(uint64_t va, TensorRef vc, uint c) {
#if KVTYPE == 0
  return load_f(va + uint64_t(c) * vc.col_stride, vc.dtype);
#elif KVTYPE == W_FP8_E4M3
  return fp8_e4m3(uint(U8Ref(va + 4u + c).v)) * F32Ref(va).v;
#else
  return i8_of(uint(U8Ref(va + 4u + c).v), 0u) * F32Ref(va).v;
#endif
}

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
  // The last key this query sees.
  const int pos = P.causal != 0u ? len - (q1 - q0) + (int(t) - q0) : len - 1;
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
        float d = dot_key(row_addr(P.kc, crow), P.kc, P.D) * P.scale;
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
          if (c < P.D) acc[e] += p * value_at(va, P.vc, c);
        }
      }
      m = m_new;
    }
    barrier();
  }
  if (P.sinks != 0ul) {  // the sink joins the denominator with no value row
    const float sink = F32Ref(P.sinks + uint64_t(h) * 4u).v;
    const float m_new = max(m, sink);
    const float corr = exp(m - m_new);
    l = l * corr + exp(sink - m_new);
    for (uint i = 0; i < PER_THREAD; ++i) acc[i] *= corr;
  }
  const uint esize = dtype_size(P.out_dtype);
  const uint64_t orow = P.dst + uint64_t(t * P.Hq + h) * P.D * esize;
  for (uint e = 0; e < PER_THREAD; ++e) {
    const uint c = tid + e * wg;
    if (c < P.D) store_f(orow + uint64_t(c) * esize, P.out_dtype, l > 0.0 ? acc[e] / l : 0.0);
  }
}
#endif
