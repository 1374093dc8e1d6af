// KV cache stores and paged attention (with split-K parts and their combine).
#pragma once
#include "backends/cuda/kernels/common.h"

namespace tessera::gpu {

// A KV cache row is f32/f16/bf16, or row-scaled FP8 E4M3 / INT8_PC ([f32 scale] then one code per
// element). Element c is kv_code(row, t, c) * kv_scale(row, t): the scale is read once per row.
TS_KFN float kv_scale(const uint8_t* row, DType t) {
  return t == DType::kFP8_E4M3 || t == DType::kINT8_PC ? decode::f32_at(row) : 1.0f;
}
TS_KFN float kv_code(const uint8_t* row, DType t, int64_t c) {
  if (t == DType::kFP8_E4M3) return decode::fp8_e4m3_to_f32(row[4 + c]);
  if (t == DType::kINT8_PC) return float(int8_t(row[4 + c]));
  return load_f(row + c * (t == DType::kF32 ? 4 : 2), t);
}

// Stores the new tokens' K and V in their cache slots: one block per token, a warp per KV head.
struct KvStoreKernel {
  using Args = KvStoreArgs;
  template <class C>
  TS_KFN static void store_row(C& c, const View& src, int64_t sr, const View& cache, int64_t cr) {
    const int lane = c.tid() % kWarp;
    const int64_t D = src.cols(), ss = src.col_stride();
    const uint8_t* rs = src.row(sr);
    uint8_t* rc = cache.row(cr);
    const DType t = cache.dtype;
    if (t == DType::kFP8_E4M3 || t == DType::kINT8_PC) {
      float amax = 0.0f;
      for (int64_t i = lane; i < D; i += kWarp) amax = fmaxf(amax, fabsf(load_f(rs + i * ss, src.dtype)));
      amax = warp_max(c, amax);
      const float scale = amax / (t == DType::kFP8_E4M3 ? 448.0f : 127.0f);
      const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
      if (lane == 0) store_f(rc, DType::kF32, scale);
      for (int64_t i = lane; i < D; i += kWarp) {
        const float x = load_f(rs + i * ss, src.dtype);
        uint8_t code = 0;
        if (t == DType::kFP8_E4M3) {
          code = scale > 0.0f ? decode::f32_to_fp8_e4m3(x / scale) : uint8_t(0);
        } else {
          const float q = roundf(x * inv);
          code = uint8_t(int8_t(q > 127.0f ? 127.0f : q < -127.0f ? -127.0f : q));
        }
        rc[4 + i] = code;
      }
    } else {
      const int64_t sc = t == DType::kF32 ? 4 : 2;
      for (int64_t i = lane; i < D; i += kWarp) store_f(rc + i * sc, t, load_f(rs + i * ss, src.dtype));
    }
  }
  template <class C>
  TS_KFN static void run(C& c, const Args& a) {
    const int64_t t = c.bx(), H = a.k.shape[1];
    const int32_t slot = load_i32(a.slots, t);
    if (slot < 0) return;
    if (slot >= a.n_slots) {
      if (c.tid() == 0) c.set_error(a.err, KernelError::kAttnMetadata);
      return;
    }
    for (int64_t h = c.tid() / kWarp; h < H; h += c.ntid() / kWarp) {
      store_row(c, a.k, t * H + h, a.k_cache, int64_t(slot) * H + h);
      store_row(c, a.v, t * H + h, a.v_cache, int64_t(slot) * H + h);
    }
  }
};

// Folds a sink logit (gpt-oss) into a softmax's running max |M| and denominator |L|: the sink is
// one more term of the denominator with no value row. Returns the factor the unnormalised
// accumulator (taken relative to the old |M|) must take (0 when no key was seen, M = -inf).
TS_KFN float fold_sink(const View& sinks, int64_t h, float& M, float& L) {
  if (!sinks.p) return 1.0f;
  const float sink = load_f(sinks.p + h * sinks.col_stride(), DType::kF32);
  const float m = fmaxf(M, sink), corr = L > 0.0f ? expf(M - m) : 0.0f;
  L = L * corr + expf(sink - m);
  M = m;
  return corr;
}

// Paged attention of one query row (token, head) over its sequence's cached keys: kAttnWarps
// warps take keys in turn, each with its own online softmax, merged at the end. With split-K
// (a.splits > 1, grid x = rows * splits) the block takes one part of the keys and leaves its
// unnormalised sum, max and denominator to AttentionCombineKernel.
template <int kMaxD>
struct AttentionKernelT {
  using Args = AttentionArgs;
  template <class C>
  TS_KFN static void run(C& c, const Args& a) {
    const int64_t t = c.bx() / a.splits, split = c.bx() % a.splits, h = c.by();
    const int64_t Hq = a.q.shape[1], D = a.q.cols(), T = a.q.shape[0];
    float* part = a.splits > 1 ? a.partial + ((t * Hq + h) * a.splits + split) * (D + 2) : nullptr;
    const int64_t group = Hq / a.hkv, hk = h / group;
    const int lane = c.tid() % kWarp, warp = c.tid() / kWarp;
    float* q = c.template smem<1, float, kMaxD>();
    float* om = c.template smem<2, float, kAttnWarps*(kMaxD + 2)>();
    // The sequence of token t: the last s with query_start[s] <= t.
    int64_t lo_s = 0, hi_s = a.n_seqs - 1;
    while (lo_s < hi_s) {
      const int64_t mid = (lo_s + hi_s + 1) / 2;
      if (load_i32(a.query_start, mid) <= t) lo_s = mid;
      else hi_s = mid - 1;
    }
    const int64_t s = lo_s;
    const int64_t q0 = load_i32(a.query_start, s), q1 = load_i32(a.query_start, s + 1);
    const int64_t len = load_i32(a.seq_lens, s), n_new = q1 - q0;
    const int64_t max_blocks = a.block_tables.cols();
    const bool ok = load_i32(a.query_start, 0) == 0 && load_i32(a.query_start, a.n_seqs) == T && q0 <= t && t < q1 &&
                    len >= n_new && (len + a.block_size - 1) / a.block_size <= max_blocks;
    uint8_t* ro = a.out.row(t * Hq + h);
    const int64_t so = a.out.col_stride();
    if (!ok) {
      if (c.tid() == 0) c.set_error(a.err, KernelError::kAttnMetadata);
      if (part) {
        if (c.tid() == 0) {
          part[D] = -INFINITY;
          part[D + 1] = 0.0f;
        }  // the combine writes zeros
      } else {
        for (int64_t i = c.tid(); i < D; i += c.ntid()) store_f(ro + i * so, a.out.dtype, 0.0f);
      }
      return;
    }
    const int64_t pos = len - n_new + (t - q0);
    int64_t lo = a.sliding_window > 0 && pos - a.sliding_window + 1 > 0 ? pos - a.sliding_window + 1 : 0;
    int64_t hi = a.causal ? pos : len - 1;
    if (part) {  // this block's part of the keys (possibly none)
      const int64_t chunk = (hi - lo + 1 + a.splits - 1) / a.splits;
      lo += split * chunk;
      hi = hi < lo + chunk - 1 ? hi : lo + chunk - 1;
    }
    const uint8_t* rq = a.q.row(t * Hq + h);
    for (int64_t i = c.tid(); i < D; i += c.ntid()) q[i] = load_f(rq + i * a.q.col_stride(), a.q.dtype);
    c.sync();
    constexpr int kPer = kMaxD / kWarp;
    float o[kPer];
    for (int i = 0; i < kPer; ++i) o[i] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    bool bad = false;
    for (int64_t j = lo + warp; j <= hi; j += kAttnWarps) {
      const int32_t blk = load_i32(a.block_tables, s * max_blocks + j / a.block_size);
      if (blk < 0 || blk >= a.n_blocks) {
        bad = true;
        continue;
      }  // uniform over the warp
      const int64_t slot = int64_t(blk) * a.block_size + j % a.block_size;
      const uint8_t* rk = a.k_cache.row(slot * a.hkv + hk);
      const uint8_t* rv = a.v_cache.row(slot * a.hkv + hk);
      const float ks = kv_scale(rk, a.k_cache.dtype), vs = kv_scale(rv, a.v_cache.dtype);
      float d = 0.0f;
      for (int64_t i = lane; i < D; i += kWarp) d += q[i] * (kv_code(rk, a.k_cache.dtype, i) * ks);
      d = warp_sum(c, d) * a.scale;
      if (a.softcap > 0.0f) d = a.softcap * tanhf(d / a.softcap);
      const float m_new = fmaxf(m, d);
      const float corr = expf(m - m_new), p = expf(d - m_new);
      l = l * corr + p;
      for (int i = 0; i < kPer; ++i)
        if (lane + i * kWarp < D) o[i] = o[i] * corr + p * (kv_code(rv, a.v_cache.dtype, lane + i * kWarp) * vs);
      m = m_new;
    }
    if (bad && lane == 0) c.set_error(a.err, KernelError::kAttnMetadata);
    float* mine = om + warp * (kMaxD + 2);
    for (int i = 0; i < kPer; ++i)
      if (lane + i * kWarp < D) mine[lane + i * kWarp] = o[i];
    if (lane == 0) {
      mine[kMaxD] = m;
      mine[kMaxD + 1] = l;
    }
    c.sync();
    float M = -INFINITY;
    for (int w = 0; w < kAttnWarps; ++w) M = fmaxf(M, om[w * (kMaxD + 2) + kMaxD]);
    float L = 0.0f;
    for (int w = 0; w < kAttnWarps; ++w) {
      const float* ow = om + w * (kMaxD + 2);
      if (ow[kMaxD + 1] > 0.0f) L += ow[kMaxD + 1] * expf(ow[kMaxD] - M);
    }
    const float M0 = M;  // the accumulators are relative to the keys' max, before the sink
    const float corr = part ? 1.0f : fold_sink(a.sinks, h, M, L);  // split-K: the combine folds it
    for (int64_t i = c.tid(); i < D; i += c.ntid()) {
      float acc = 0.0f;
      for (int w = 0; w < kAttnWarps; ++w) {
        const float* ow = om + w * (kMaxD + 2);
        if (ow[kMaxD + 1] > 0.0f) acc += ow[i] * expf(ow[kMaxD] - M0);
      }
      if (part) part[i] = acc;  // unnormalised, relative to M
      else store_f(ro + i * so, a.out.dtype, L > 0.0f ? acc * corr / L : 0.0f);
    }
    if (part && c.tid() == 0) {
      part[D] = M;
      part[D + 1] = L;
    }
  }
};
// Heads up to 256 wide, and up to 512 (Gemma 4's global layers) with twice the registers and
// shared memory per block, so the narrower heads keep the smaller kernel.
using AttentionKernel = AttentionKernelT<kMaxHeadDim>;
using AttentionKernelWide = AttentionKernelT<kMaxHeadDimWide>;

// attention_combine: merges the split-K partials of one (row, head) per block: out = sum_s
// acc_s e^(M_s - M) / sum_s L_s e^(M_s - M), over the splits that saw keys (L_s > 0).
struct AttentionCombineKernel {
  using Args = AttentionCombineArgs;
  template <class C>
  TS_KFN static void run(C& c, const Args& a) {
    const int64_t r = c.bx(), D = a.out.cols();
    const float* base = a.partial + r * a.splits * (D + 2);
    float M = -INFINITY, L = 0.0f;
    for (int s = 0; s < a.splits; ++s)
      if (base[s * (D + 2) + D + 1] > 0.0f) M = fmaxf(M, base[s * (D + 2) + D]);
    for (int s = 0; s < a.splits; ++s) {
      const float* ps = base + s * (D + 2);
      if (ps[D + 1] > 0.0f) L += ps[D + 1] * expf(ps[D] - M);
    }
    const float M0 = M;  // the partials are combined relative to the keys' max, before the sink
    const float corr = fold_sink(a.sinks, r % a.out.shape[1], M, L);
    uint8_t* ro = a.out.row(r);
    const int64_t so = a.out.col_stride();
    for (int64_t i = c.tid(); i < D; i += c.ntid()) {
      float acc = 0.0f;
      for (int s = 0; s < a.splits; ++s) {
        const float* ps = base + s * (D + 2);
        if (ps[D + 1] > 0.0f) acc += ps[i] * expf(ps[D] - M0);
      }
      store_f(ro + i * so, a.out.dtype, L > 0.0f ? acc * corr / L : 0.0f);
    }
  }
};

}  // namespace tessera::gpu
