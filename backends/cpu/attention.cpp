// Paged varlen attention: store the new K/V into their slot_mapping slots, then causal GQA
// attention of every query row over its sequence's keys read through the block table, with an
// optional sliding window and logit softcap. Online (flash-style) softmax over chunks of keys,
// f32 accumulation; threads take (token, kv head) items dynamically (causal rows differ in
// length, so static splits would leave one thread idle).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <string>
#include <vector>

#include "backends/cpu/kernels.h"
#include "core/reference/reference.h"

#ifndef TESSERA_CPU_ATTN_ITEM_
#define TESSERA_CPU_ATTN_ITEM_
namespace tessera::cpu {
// One work item: the G query heads sharing kv head |hk| for one token, over keys [lo, hi].
struct AttnItem {
  const float* q;             // [G, D] f32, already multiplied by the softmax scale
  float* out;                 // [G, D] f32
  int64_t G, D;
  DType cache;                // f32/f16/bf16, or fp8_e4m3/int8_pc (a row = f32 scale + D codes)
  const char* const* k_blocks;  // per logical block of the sequence: its first byte in k_cache
  const char* const* v_blocks;
  int64_t block_size;
  int64_t k_slot_stride, v_slot_stride;  // bytes between slots of a block
  int64_t k_head_off, v_head_off;        // bytes to kv head hk within a slot
  int64_t lo, hi;             // key positions, inclusive
  float softcap;
  float* scratch;             // [G * (kChunk + 2) + G * D + 2 * D]
};
inline constexpr int64_t kAttnChunk = 32;
}  // namespace tessera::cpu
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/attention.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "backends/cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace tessera::cpu::HWY_NAMESPACE {

template <DType T>
HWY_INLINE float dot_q_k(const float* q, const char* k, int64_t D) {
  const DF df;
  const int64_t L = int64_t(hn::Lanes(df));
  VF a0 = hn::Zero(df), a1 = hn::Zero(df);
  int64_t i = 0;
  for (; i + 2 * L <= D; i += 2 * L) {
    a0 = hn::MulAdd(hn::LoadU(df, q + i), load_as_f32<T>(df, k + i * elem_bytes<T>()), a0);
    a1 = hn::MulAdd(hn::LoadU(df, q + i + L), load_as_f32<T>(df, k + (i + L) * elem_bytes<T>()), a1);
  }
  for (; i + L <= D; i += L) a0 = hn::MulAdd(hn::LoadU(df, q + i), load_as_f32<T>(df, k + i * elem_bytes<T>()), a0);
  float s = reduce_sum(df, hn::Add(a0, a1));
  for (; i < D; ++i) s += q[i] * scalar_as_f32<T>(k + i * elem_bytes<T>());
  return s;
}

// acc[0..D) = acc * c + p * v
template <DType T>
HWY_INLINE void axpy_v(float p, const char* v, float* acc, int64_t D) {
  const DF df;
  const int64_t L = int64_t(hn::Lanes(df));
  const VF vp = hn::Set(df, p);
  int64_t i = 0;
  for (; i + L <= D; i += L)
    hn::StoreU(hn::MulAdd(vp, load_as_f32<T>(df, v + i * elem_bytes<T>()), hn::LoadU(df, acc + i)), df, acc + i);
  for (; i < D; ++i) acc[i] += p * scalar_as_f32<T>(v + i * elem_bytes<T>());
}

// 8-bit rows are dequantised once per key (shared by the G query heads) into f32.
constexpr bool is_row_scaled(DType t) { return t == DType::kFP8_E4M3 || t == DType::kINT8_PC; }

template <DType T>
HWY_INLINE const char* cache_row(const char* p, float* tmp, int64_t D) {
  if constexpr (is_row_scaled(T)) {
    dtype_traits(T).dequantize_row(p, tmp, D);
    return reinterpret_cast<const char*>(tmp);
  } else {
    return p;
  }
}

template <DType T>
void attend(const AttnItem& a) {
  // The element type the dot products read: 8-bit rows arrive as f32 from cache_row.
  constexpr DType E = is_row_scaled(T) ? DType::kF32 : T;
  const int64_t G = a.G, D = a.D, C = kAttnChunk;
  float* s = a.scratch;        // [G, C] scores, then probabilities
  float* m = s + G * C;        // [G] running max
  float* l = m + G;            // [G] running sum
  float* acc = l + G;          // [G, D]
  float* krow = acc + G * D;   // [D] a dequantised key or value row

  for (int64_t g = 0; g < G; ++g) { m[g] = -INFINITY; l[g] = 0.0f; }
  std::fill(acc, acc + G * D, 0.0f);
  auto key = [&](const char* const* blocks, int64_t stride, int64_t off, int64_t j) {
    return blocks[j / a.block_size] + (j % a.block_size) * stride + off;
  };
  for (int64_t j0 = a.lo; j0 <= a.hi; j0 += C) {
    const int64_t n = std::min(C, a.hi + 1 - j0);
    for (int64_t j = 0; j < n; ++j) {
      const char* k = cache_row<T>(key(a.k_blocks, a.k_slot_stride, a.k_head_off, j0 + j), krow, D);
      for (int64_t g = 0; g < G; ++g) {
        float d = dot_q_k<E>(a.q + g * D, k, D);
        if (a.softcap > 0.0f) d = a.softcap * std::tanh(d / a.softcap);
        s[g * C + j] = d;
      }
    }
    for (int64_t g = 0; g < G; ++g) {
      float mx = m[g];
      for (int64_t j = 0; j < n; ++j) mx = std::max(mx, s[g * C + j]);
      const float corr = std::exp(m[g] - mx);  // 0 on the first chunk (m = -inf)
      float sum = 0.0f;
      for (int64_t j = 0; j < n; ++j) sum += (s[g * C + j] = std::exp(s[g * C + j] - mx));
      l[g] = l[g] * corr + sum;
      m[g] = mx;
      if (corr != 1.0f)
        for (int64_t i = 0; i < D; ++i) acc[g * D + i] *= corr;
    }
    for (int64_t j = 0; j < n; ++j) {
      const char* v = cache_row<T>(key(a.v_blocks, a.v_slot_stride, a.v_head_off, j0 + j), krow, D);
      for (int64_t g = 0; g < G; ++g) axpy_v<E>(s[g * C + j], v, acc + g * D, D);
    }
  }
  for (int64_t g = 0; g < G; ++g) {
    const float inv = 1.0f / l[g];
    for (int64_t i = 0; i < D; ++i) a.out[g * D + i] = acc[g * D + i] * inv;
  }
}

void AttendItem(const AttnItem& a) {
  switch (a.cache) {
    case DType::kF16: return attend<DType::kF16>(a);
    case DType::kBF16: return attend<DType::kBF16>(a);
    case DType::kFP8_E4M3: return attend<DType::kFP8_E4M3>(a);
    case DType::kINT8_PC: return attend<DType::kINT8_PC>(a);
    default: return attend<DType::kF32>(a);
  }
}

}  // namespace tessera::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tessera::cpu {

HWY_EXPORT(AttendItem);

namespace {
// One (slot, head) row of a cache: 8-bit formats quantise the row with its own scale.
void store_cache_row(const Tensor& c, int64_t row, const float* src) {
  const auto& tr = dtype_traits(c.dtype);
  if (!tr.is_quantized) return store_row_f32(c, row, src);
  tr.quantize_row(src, static_cast<char*>(c.host_data()) + c.row_offset(row), c.cols());
}

// Step 1: the new tokens' K and V go into their cache slots (-1: padding, not stored). Serial:
// duplicate slots then behave like the reference (the last token wins).
void store_new_kv(const Graph& g, const Node& n) {
  const Tensor& k = g.input_tensor(n, in::kAttnK);
  const Tensor& v = g.input_tensor(n, in::kAttnV);
  const Tensor& kc = g.input_tensor(n, in::kAttnKCache);
  const Tensor& vc = g.input_tensor(n, in::kAttnVCache);
  const Tensor& slots = g.input_tensor(n, in::kAttnSlotMapping);
  const int64_t T = k.shape[0], Hkv = k.shape[1], D = k.shape[2];
  float* tmp = thread_scratch(0, D);
  for (int64_t t = 0; t < T; ++t) {
    const int32_t slot = ref::load_i32(slots, t);
    if (slot < 0) continue;
    for (int64_t h = 0; h < Hkv; ++h) {
      store_cache_row(kc, int64_t(slot) * Hkv + h, load_row_f32(k, t * Hkv + h, tmp));
      store_cache_row(vc, int64_t(slot) * Hkv + h, load_row_f32(v, t * Hkv + h, tmp));
    }
  }
}
}  // namespace

Status attention(ThreadPool& pool, const Graph& g, const Node& n) {
  TS_RETURN_IF_ERROR(ref::check_attention_metadata(g, n));
  const Tensor& q = g.input_tensor(n, in::kAttnQ);
  const Tensor& kc = g.input_tensor(n, in::kAttnKCache);
  const Tensor& vc = g.input_tensor(n, in::kAttnVCache);
  const Tensor& qs = g.input_tensor(n, in::kAttnQueryStart);
  const Tensor& sl = g.input_tensor(n, in::kAttnSeqLens);
  const Tensor& bt = g.input_tensor(n, in::kAttnBlockTables);
  const Tensor& out = g.output_tensor(n);
  if (!last_dim_dense(kc) || !last_dim_dense(vc))
    return Unimplemented("attention: caches with a strided head dim: " + kc.shape_string());
  const auto& p = n.param<AttentionParams>();
  const int64_t T = q.shape[0], Hq = q.shape[1], D = q.shape[2], Hkv = kc.shape[2];
  const int64_t G = Hq / Hkv, bs = kc.shape[1], S = sl.shape[0], max_blocks = bt.shape[1];
  const float scale = p.scale > 0.0f ? p.scale : float(1.0 / std::sqrt(double(D)));
  store_new_kv(g, n);
  // Per sequence: block base pointers; per token: its sequence (metadata validated above).
  std::vector<const char*> kblk(static_cast<size_t>(S * max_blocks)), vblk(static_cast<size_t>(S * max_blocks));
  std::vector<int64_t> seq_of(static_cast<size_t>(T)), pos_of(static_cast<size_t>(T));
  for (int64_t s = 0; s < S; ++s) {
    const int64_t q0 = ref::load_i32(qs, s), q1 = ref::load_i32(qs, s + 1), len = ref::load_i32(sl, s);
    for (int64_t j = 0; j < (len + bs - 1) / bs; ++j) {
      const int64_t blk = ref::load_i32(bt, s * max_blocks + j);
      kblk[size_t(s * max_blocks + j)] = static_cast<const char*>(kc.host_data()) + blk * kc.stride[0];
      vblk[size_t(s * max_blocks + j)] = static_cast<const char*>(vc.host_data()) + blk * vc.stride[0];
    }
    for (int64_t t = q0; t < q1; ++t) {
      seq_of[size_t(t)] = s;
      pos_of[size_t(t)] = len - (q1 - q0) + (t - q0);
    }
  }
  std::atomic<int64_t> next{0};
  const int64_t items = T * Hkv;
  auto work = [&](int) {
    float* qbuf = thread_scratch(0, G * D);
    float* obuf = thread_scratch(1, G * D);
    float* row = thread_scratch(2, D);
    float* scratch = thread_scratch(3, G * (kAttnChunk + 2) + G * D + 2 * D);
    for (int64_t it = next.fetch_add(1); it < items; it = next.fetch_add(1)) {
      const int64_t t = it / Hkv, hk = it % Hkv, s = seq_of[size_t(t)], pos = pos_of[size_t(t)];
      for (int64_t gi = 0; gi < G; ++gi) {
        const float* qr = load_row_f32(q, t * Hq + hk * G + gi, row);
        for (int64_t i = 0; i < D; ++i) qbuf[gi * D + i] = qr[i] * scale;
      }
      AttnItem a{qbuf, obuf, G, D, kc.dtype, &kblk[size_t(s * max_blocks)], &vblk[size_t(s * max_blocks)], bs,
                 kc.stride[1], vc.stride[1], hk * kc.stride[2], hk * vc.stride[2],
                 p.sliding_window > 0 ? std::max<int64_t>(0, pos - p.sliding_window + 1) : 0, pos, p.softcap, scratch};
      HWY_DYNAMIC_DISPATCH(AttendItem)(a);
      for (int64_t gi = 0; gi < G; ++gi) store_row_f32(out, t * Hq + hk * G + gi, obuf + gi * D);
    }
  };
  // Small batches are not worth waking the workers.
  if (items * D * (pos_of.empty() ? 1 : pos_of.back() + 1) < kParallelMinElems) work(0);
  else pool.run_on_all(work);
  return OkStatus();
}

}  // namespace tessera::cpu
#endif  // HWY_ONCE
