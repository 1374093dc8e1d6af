// Paged varlen attention: store the new K/V into their slot_mapping slots, then GQA
// attention (causal, or bidirectional for encoders) of every query row over its sequence's keys read through the block
// table, with an optional sliding window, logit softcap and per-head sink logit. Flash-style: a work item is a block of
// consecutive query tokens of one sequence times the G query heads of one kv head; each chunk of keys and values is
// converted to f32 once per item and shared by all its rows (R = tokens x G), then scores (4 rows per key load), a
// vectorised online softmax and P x V with the output rows held in registers across the chunk. Threads take items
// dynamically, longest first (causal rows differ in length, so static splits would leave one thread idle).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cpu/kernels.h"
#include "core/reference/reference.h"

#ifndef TESSERA_CPU_ATTN_ITEM_
#define TESSERA_CPU_ATTN_ITEM_
namespace tessera::cpu {
// One work item: tokens [0, n_tok) of a query block (consecutive positions of one sequence),
// each with the G query heads sharing kv head hk; row r = token r / G, head r % G.
struct AttnItem {
  const float* q;             // [n_tok * G, D] f32, already multiplied by the softmax scale
  float* out;                 // [n_tok * G, D] f32
  int64_t n_tok, G, D;
  DType cache;                // f32/f16/bf16, or fp8_e4m3/int8_pc (a row = f32 scale + D codes)
  const char* const* k_blocks;  // per logical block of the sequence: its first byte in k_cache
  const char* const* v_blocks;
  int64_t block_size;
  int64_t k_slot_stride, v_slot_stride;  // bytes between slots of a block
  int64_t k_head_off, v_head_off;        // bytes to kv head hk within a slot
  int64_t pos0;               // position of token 0: token i sees keys up to pos0 + i
  int64_t window;             // > 0: token i sees keys from pos0 + i - window + 1
  int64_t key_end;            // > 0 (not causal): every token sees keys [0, key_end)
  float softcap;
  const float* sinks;         // [G] sink logits of this kv head's q heads (gpt-oss), or null
  float* scratch;             // attn_scratch_floats(n_tok * G, D)
};
// Keys per chunk (a multiple of every target's f32 lane count) and query rows per item.
inline constexpr int64_t kAttnChunk = 32;
inline constexpr int64_t kAttnRows = 32;
// Scores [R, C], max and sum [R] each, accumulators [R, D], K and V chunks [C, D] each.
inline int64_t attn_scratch_floats(int64_t R, int64_t D) { return R * (kAttnChunk + 2 + D) + 2 * kAttnChunk * D; }
}  // namespace tessera::cpu
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/attention.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"
#include "backends/cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace tessera::cpu::HWY_NAMESPACE {

// One cache row of D elements as f32 (8-bit rows: codes times the row's scale).
template <DType T>
HWY_INLINE void convert_row(const char* row, float* dst, int64_t D) {
  const DF df;
  const int64_t L = int64_t(hn::Lanes(df));
  constexpr int64_t eb = elem_bytes<T>();
  const char* p = row + row_header_bytes<T>();
  const float scale = row_scale<T>(row);
  const VF vs = hn::Set(df, scale);
  int64_t i = 0;
  for (; i + L <= D; i += L) {
    const VF v = load_as_f32<T>(df, p + i * eb);
    hn::StoreU(is_row_scaled<T>() ? hn::Mul(v, vs) : v, df, dst + i);
  }
  for (; i < D; ++i) dst[i] = is_row_scaled<T>() ? scalar_as_f32<T>(p + i * eb) * scale : scalar_as_f32<T>(p + i * eb);
}

// Keys [j0, j0 + n) of one cache as f32 rows of |dst| [kAttnChunk, D]; rows past n are zero so
// that masked (zero-probability) columns add exactly nothing.
template <DType T>
HWY_INLINE void load_chunk(const AttnItem& a, const char* const* blocks, int64_t stride, int64_t off, int64_t j0,
                           int64_t n, float* dst) {
  for (int64_t j = 0; j < n; ++j)
    convert_row<T>(blocks[(j0 + j) / a.block_size] + ((j0 + j) % a.block_size) * stride + off, dst + j * a.D, a.D);
  std::fill(dst + n * a.D, dst + kAttnChunk * a.D, 0.0f);
}

HWY_INLINE float dot_tail(const float* q, const float* k, int64_t i, int64_t D) {
  float s = 0.0f;
  for (; i < D; ++i) s += q[i] * k[i];
  return s;
}

// s[r, j] = q_r . k_j for rows [0, R) and keys [0, n); four rows share each key load.
HWY_INLINE void scores(const float* q, const float* k, float* s, int64_t R, int64_t n, int64_t D) {
  const DF df;
  const int64_t L = int64_t(hn::Lanes(df)), Dv = D / L * L, C = kAttnChunk;
  int64_t r = 0;
  for (; r + 4 <= R; r += 4) {
    const float *q0 = q + r * D, *q1 = q0 + D, *q2 = q1 + D, *q3 = q2 + D;
    for (int64_t j = 0; j < n; ++j) {
      const float* kj = k + j * D;
      VF a0 = hn::Zero(df), a1 = a0, a2 = a0, a3 = a0;
      for (int64_t i = 0; i < Dv; i += L) {
        const VF kv = hn::LoadU(df, kj + i);
        a0 = hn::MulAdd(hn::LoadU(df, q0 + i), kv, a0);
        a1 = hn::MulAdd(hn::LoadU(df, q1 + i), kv, a1);
        a2 = hn::MulAdd(hn::LoadU(df, q2 + i), kv, a2);
        a3 = hn::MulAdd(hn::LoadU(df, q3 + i), kv, a3);
      }
      s[(r + 0) * C + j] = reduce_sum(df, a0) + dot_tail(q0, kj, Dv, D);
      s[(r + 1) * C + j] = reduce_sum(df, a1) + dot_tail(q1, kj, Dv, D);
      s[(r + 2) * C + j] = reduce_sum(df, a2) + dot_tail(q2, kj, Dv, D);
      s[(r + 3) * C + j] = reduce_sum(df, a3) + dot_tail(q3, kj, Dv, D);
    }
  }
  for (; r < R; ++r)
    for (int64_t j = 0; j < n; ++j) {
      const float *qr = q + r * D, *kj = k + j * D;
      VF a0 = hn::Zero(df);
      for (int64_t i = 0; i < Dv; i += L) a0 = hn::MulAdd(hn::LoadU(df, qr + i), hn::LoadU(df, kj + i), a0);
      s[r * C + j] = reduce_sum(df, a0) + dot_tail(qr, kj, Dv, D);
    }
}

// acc[0, D) += sum_j p[j] * v[j, 0, D) over n keys, up to four vectors of acc in registers.
HWY_INLINE void accumulate_pv(const float* p, const float* v, float* acc, int64_t n, int64_t D) {
  const DF df;
  const int64_t L = int64_t(hn::Lanes(df));
  int64_t d = 0;
  for (; d + 4 * L <= D; d += 4 * L) {
    VF c0 = hn::LoadU(df, acc + d), c1 = hn::LoadU(df, acc + d + L), c2 = hn::LoadU(df, acc + d + 2 * L),
       c3 = hn::LoadU(df, acc + d + 3 * L);
    for (int64_t j = 0; j < n; ++j) {
      const VF pj = hn::Set(df, p[j]);
      const float* vj = v + j * D + d;
      c0 = hn::MulAdd(pj, hn::LoadU(df, vj), c0);
      c1 = hn::MulAdd(pj, hn::LoadU(df, vj + L), c1);
      c2 = hn::MulAdd(pj, hn::LoadU(df, vj + 2 * L), c2);
      c3 = hn::MulAdd(pj, hn::LoadU(df, vj + 3 * L), c3);
    }
    hn::StoreU(c0, df, acc + d), hn::StoreU(c1, df, acc + d + L);
    hn::StoreU(c2, df, acc + d + 2 * L), hn::StoreU(c3, df, acc + d + 3 * L);
  }
  for (; d + L <= D; d += L) {
    VF c0 = hn::LoadU(df, acc + d);
    for (int64_t j = 0; j < n; ++j) c0 = hn::MulAdd(hn::Set(df, p[j]), hn::LoadU(df, v + j * D + d), c0);
    hn::StoreU(c0, df, acc + d);
  }
  for (; d < D; ++d)
    for (int64_t j = 0; j < n; ++j) acc[d] += p[j] * v[j * D + d];
}

// Row r's scores over keys [j0, j0 + n) become probabilities against the running max m; the
// running sum l and the accumulator row are rescaled. Masked keys (causal, window, padding
// columns) get probability exactly 0.
HWY_INLINE void softmax_row(const AttnItem& a, int64_t r, int64_t j0, int64_t n, float* s, float& m, float& l,
                            float* acc) {
  const DF df;
  const int64_t L = int64_t(hn::Lanes(df)), C = kAttnChunk;
  const int64_t pos = a.key_end > 0 ? a.key_end - 1 : a.pos0 + r / a.G;
  const int64_t lo = a.window > 0 ? pos - a.window + 1 : 0;
  if (a.softcap > 0.0f)
    for (int64_t j = 0; j < n; ++j) s[j] = a.softcap * std::tanh(s[j] / a.softcap);
  // Most chunks of a long context are fully visible: only the edges need the per-key mask.
  if (n < C || j0 + C - 1 > pos || j0 < lo)
    for (int64_t j = 0; j < C; ++j)
      if (j >= n || j0 + j > pos || j0 + j < lo) s[j] = -INFINITY;
  VF vmax = hn::Set(df, -INFINITY);
  for (int64_t j = 0; j < C; j += L) vmax = hn::Max(vmax, hn::LoadU(df, s + j));
  const float mx = std::max(m, hn::GetLane(hn::MaxOfLanes(df, vmax)));
  if (mx == -INFINITY) {  // nothing visible yet: this chunk adds nothing
    std::fill(s, s + C, 0.0f);
    return;
  }
  const VF vmx = hn::Set(df, mx), floor = hn::Set(df, -87.0f);
  VF vsum = hn::Zero(df);
  for (int64_t j = 0; j < C; j += L) {
    const VF x = hn::Sub(hn::LoadU(df, s + j), vmx);
    // exp underflows to 0 below -87 (and Exp is not defined at -inf): masked keys give 0.
    const VF e = hn::IfThenZeroElse(hn::Lt(x, floor), hn::Exp(df, hn::Max(x, floor)));
    hn::StoreU(e, df, s + j);
    vsum = hn::Add(vsum, e);
  }
  const float corr = std::exp(m - mx);  // 0 on the first visible chunk (m = -inf)
  l = l * corr + reduce_sum(df, vsum);
  m = mx;
  if (corr != 1.0f)
    for (int64_t i = 0; i < a.D; ++i) acc[i] *= corr;
}

template <DType T>
void attend(const AttnItem& a) {
  const int64_t R = a.n_tok * a.G, D = a.D, C = kAttnChunk;
  float* s = a.scratch;       // [R, C] scores, then probabilities
  float* m = s + R * C;       // [R] running max
  float* l = m + R;           // [R] running sum
  float* acc = l + R;         // [R, D]
  float* kch = acc + R * D;   // [C, D]
  float* vch = kch + C * D;   // [C, D]
  std::fill(m, m + R, -INFINITY);
  std::fill(l, l + R, 0.0f);
  std::fill(acc, acc + R * D, 0.0f);
  const int64_t hi = a.key_end > 0 ? a.key_end - 1 : a.pos0 + a.n_tok - 1;
  const int64_t lo = a.window > 0 ? std::max<int64_t>(0, a.pos0 - a.window + 1) : 0;
  for (int64_t j0 = lo; j0 <= hi; j0 += C) {
    const int64_t n = std::min(C, hi + 1 - j0);
    load_chunk<T>(a, a.k_blocks, a.k_slot_stride, a.k_head_off, j0, n, kch);
    load_chunk<T>(a, a.v_blocks, a.v_slot_stride, a.v_head_off, j0, n, vch);
    scores(a.q, kch, s, R, n, D);
    for (int64_t r = 0; r < R; ++r) {
      softmax_row(a, r, j0, n, s + r * C, m[r], l[r], acc + r * D);
      accumulate_pv(s + r * C, vch, acc + r * D, n, D);
    }
  }
  for (int64_t r = 0; r < R; ++r) {
    float corr = 1.0f, den = l[r];
    if (a.sinks) {  // the sink: one more term of the denominator, with no value row
      const float sink = a.sinks[r % a.G], mx = std::max(m[r], sink);
      corr = std::exp(m[r] - mx);  // 0 when no key was visible
      den = l[r] * corr + std::exp(sink - mx);
    }
    const float inv = corr / den;
    for (int64_t i = 0; i < D; ++i) a.out[r * D + i] = acc[r * D + i] * inv;
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
  const float* sinks = g.has_input(n, in::kAttnSinks)
                           ? static_cast<const float*>(g.input_tensor(n, in::kAttnSinks).host_data())
                           : nullptr;  // [Hq] f32, contiguous (checked by the graph builder)
  // Per sequence: block base pointers; per token: its sequence (metadata validated above).
  std::vector<const char*> kblk(static_cast<size_t>(S * max_blocks)), vblk(static_cast<size_t>(S * max_blocks));
  std::vector<int64_t> seq_of(static_cast<size_t>(T)), pos_of(static_cast<size_t>(T)), len_of(static_cast<size_t>(S));
  for (int64_t s = 0; s < S; ++s) {
    const int64_t q0 = ref::load_i32(qs, s), q1 = ref::load_i32(qs, s + 1), len = ref::load_i32(sl, s);
    len_of[size_t(s)] = len;
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
  // Items: blocks of up to kAttnRows / G consecutive tokens of one sequence, per kv head,
  // longest key range first so that the last items to start are the short ones.
  struct Item { int64_t t0, n_tok, s, hk; };
  std::vector<Item> items;
  const int64_t tok_per_item = std::max<int64_t>(1, kAttnRows / G);
  for (int64_t s = 0; s < S; ++s) {
    const int64_t q0 = ref::load_i32(qs, s), q1 = ref::load_i32(qs, s + 1);
    for (int64_t t0 = q0; t0 < q1; t0 += tok_per_item)
      for (int64_t hk = 0; hk < Hkv; ++hk) items.push_back({t0, std::min(tok_per_item, q1 - t0), s, hk});
  }
  std::stable_sort(items.begin(), items.end(), [&](const Item& x, const Item& y) {
    return pos_of[size_t(x.t0 + x.n_tok - 1)] > pos_of[size_t(y.t0 + y.n_tok - 1)];
  });
  std::atomic<size_t> next{0};
  auto work = [&](int) {
    const int64_t R = tok_per_item * G;
    float* qbuf = thread_scratch(0, R * D);
    float* obuf = thread_scratch(1, R * D);
    float* row = thread_scratch(2, D);
    float* scratch = thread_scratch(3, attn_scratch_floats(R, D));
    for (size_t it = next.fetch_add(1); it < items.size(); it = next.fetch_add(1)) {
      const Item& w = items[it];
      for (int64_t ti = 0; ti < w.n_tok; ++ti)
        for (int64_t gi = 0; gi < G; ++gi) {
          const float* qr = load_row_f32(q, (w.t0 + ti) * Hq + w.hk * G + gi, row);
          float* dst = qbuf + (ti * G + gi) * D;
          for (int64_t i = 0; i < D; ++i) dst[i] = qr[i] * scale;
        }
      AttnItem a{qbuf,
                 obuf,
                 w.n_tok,
                 G,
                 D,
                 kc.dtype,
                 &kblk[size_t(w.s * max_blocks)],
                 &vblk[size_t(w.s * max_blocks)],
                 bs,
                 kc.stride[1],
                 vc.stride[1],
                 w.hk * kc.stride[2],
                 w.hk * vc.stride[2],
                 pos_of[size_t(w.t0)],
                 p.sliding_window,
                 p.causal ? 0 : len_of[size_t(w.s)],
                 p.softcap,
                 sinks ? sinks + w.hk * G : nullptr,
                 scratch};
      HWY_DYNAMIC_DISPATCH(AttendItem)(a);
      for (int64_t ti = 0; ti < w.n_tok; ++ti)
        for (int64_t gi = 0; gi < G; ++gi)
          store_row_f32(out, (w.t0 + ti) * Hq + w.hk * G + gi, obuf + (ti * G + gi) * D);
    }
  };
  // Small batches are not worth waking the workers.
  if (T * Hkv * D * (pos_of.empty() ? 1 : pos_of.back() + 1) < kParallelMinElems) work(0);
  else pool.run_on_all(work);
  return OkStatus();
}

}  // namespace tessera::cpu
#endif  // HWY_ONCE
