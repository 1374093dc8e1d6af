// Quantised GEMV/GEMM for Q8_0/Q4_0/Q4_1 weights against activations quantised per 32-block to
// int8 (ActQ8): integer dot products per block, one f32 multiply-add per block. The decode hot
// path: weights stream once per call, activations stay in L1.
//
// Per block b of weight row n and activation row m (qw: weight codes, qx: activation codes):
//   Q8_0: dw*dx * sum(qw*qx)
//   Q4_0: dw*dx * sum(qw*qx) - 8*dw * sx      (qw in 0..15, sx = dx*sum(qx))
//   Q4_1: dw*dx * sum(qw*qx) +  mw * sx
// x86: AVX2 uses maddubs (u8 x s8 -> i16 pairs) + madd (-> i32); AVX3_DL uses vpdpbusd (VNNI).
#include <algorithm>
#include <cstring>

#include "backends/cpu/kernels.h"
#include "quant/ggml_blocks.h"
#include "quant/half.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/matmul_q8.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "backends/cpu/simd-inl.h"

#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#include <immintrin.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace tessera::cpu::HWY_NAMESPACE {

#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#define TESSERA_Q8_X86 1

// Sum over 4-byte groups of u8(w) * s8(x), as 8 i32 lanes.
HWY_INLINE __m256i dot_u8s8(__m256i w, __m256i x) {
#if HWY_TARGET == HWY_AVX3_DL
  // NOTE: Highway 1.0.3's AVX3_DL target string enables the VEX-only "avxvnni" while its CPU
  // detection checks AVX512-VNNI, so the intrinsic would assemble to {vex} vpdpbusd and fault on
  // Ice Lake / Zen 4 (AVX512-VNNI without AVX-VNNI). Spell out the EVEX form.
  __m256i acc = _mm256_setzero_si256();
  asm("%{evex%} vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(w), "v"(x));
  return acc;
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1));
#endif
}
// f16 scale |h| broadcast to all 8 lanes as f32 (vpbroadcastw + vcvtph2ps).
HWY_INLINE __m256 f16_splat(uint16_t h) { return _mm256_cvtph_ps(_mm_set1_epi16(static_cast<short>(h))); }
HWY_INLINE float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

// Weight codes of one block as 32 u8 (Q4: low nibbles then high nibbles, the element order).
template <DType W>
HWY_INLINE __m256i unpack(const void* blk) {
  if constexpr (W == DType::kQ8_0) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const BlockQ8_0*>(blk)->qs));
  } else {
    const uint8_t* qs = W == DType::kQ4_0 ? static_cast<const BlockQ4_0*>(blk)->qs : static_cast<const BlockQ4_1*>(blk)->qs;
    // Both 128-bit halves get the 16 bytes; the upper half is shifted by 4 to expose the high nibbles.
    const __m256i both = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
    return _mm256_and_si256(_mm256_srlv_epi32(both, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)), _mm256_set1_epi8(0x0f));
  }
}

// Block |b| of one weight row against R activation rows, accumulated into acc/off. The
// per-block work is kept to ~11 instructions: this loop is the decode roofline.
template <DType W, int R, class Block>
HWY_INLINE void dot_block(const Block& wb, const ActQ8* const* x, int64_t b, __m256* acc, __m256* off) {
  const __m256 dw = f16_splat(wb.d);
  const __m256i w = unpack<W>(&wb);
  __m256i wabs = w;
  if constexpr (W == DType::kQ8_0) wabs = _mm256_sign_epi8(w, w);  // |w| with the signs moved onto x
  __m256 mw = _mm256_setzero_ps();
  if constexpr (W == DType::kQ4_1) mw = f16_splat(wb.m);
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    const ActQ8& xb = x[r][b];
    __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.qs));
    if constexpr (W == DType::kQ8_0) xq = _mm256_sign_epi8(xq, w);
    __m256i p = dot_u8s8(wabs, xq);
    // Q4_0 codes are w + 8: remove 8 * sum(x) per 4-byte group before the float conversion.
    if constexpr (W == DType::kQ4_0) p = _mm256_sub_epi32(p, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.c8)));
    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(dw, _mm256_broadcast_ss(&xb.d)), acc[r]);
    if constexpr (W == DType::kQ4_1) off[r] = _mm256_fmadd_ps(mw, _mm256_broadcast_ss(&xb.s), off[r]);
  }
}

// One weight row against R activation rows. Two blocks per step into separate accumulators,
// so the FMA latency chain does not bound a single-row GEMV.
template <DType W, int R>
HWY_INLINE void dot_row(const char* wrow, const ActQ8* const* x, int64_t nb, float* res) {
  using Block = std::conditional_t<W == DType::kQ8_0, BlockQ8_0, std::conditional_t<W == DType::kQ4_0, BlockQ4_0, BlockQ4_1>>;
  const Block* wb = reinterpret_cast<const Block*>(wrow);
  __m256 acc0[R], acc1[R], off0[R], off1[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = off0[r] = off1[r] = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    dot_block<W, R>(wb[b], x, b, acc0, off0);
    dot_block<W, R>(wb[b + 1], x, b + 1, acc1, off1);
  }
  if (b < nb) dot_block<W, R>(wb[b], x, b, acc0, off0);
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
    res[r] = hsum(_mm256_add_ps(acc0[r], acc1[r])) + _mm_cvtss_f32(_mm256_castps256_ps128(_mm256_add_ps(off0[r], off1[r])));
}

#else  // portable fallback (SCALAR and non-x86 targets)

template <DType W, int R>
HWY_INLINE void dot_row(const char* wrow, const ActQ8* const* x, int64_t nb, float* res) {
  for (int r = 0; r < R; ++r) res[r] = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    int8_t q[32];
    float dw, ocoef = 0.0f;
    if constexpr (W == DType::kQ8_0) {
      const auto* blk = reinterpret_cast<const BlockQ8_0*>(wrow) + b;
      dw = fp16_to_f32(blk->d);
      std::memcpy(q, blk->qs, 32);
    } else {
      const uint8_t* qs;
      if constexpr (W == DType::kQ4_0) {
        const auto* blk = reinterpret_cast<const BlockQ4_0*>(wrow) + b;
        dw = fp16_to_f32(blk->d);
        ocoef = -8.0f * dw;  // times s = dx * sum(qx)
        qs = blk->qs;
      } else {
        const auto* blk = reinterpret_cast<const BlockQ4_1*>(wrow) + b;
        dw = fp16_to_f32(blk->d);
        ocoef = fp16_to_f32(blk->m);
        qs = blk->qs;
      }
      for (int j = 0; j < 16; ++j) {
        q[j] = int8_t(qs[j] & 15);
        q[j + 16] = int8_t(qs[j] >> 4);
      }
    }
    for (int r = 0; r < R; ++r) {
      int32_t s = 0;
      for (int j = 0; j < 32; ++j) s += int32_t(q[j]) * x[r][b].qs[j];
      res[r] += dw * x[r][b].d * float(s) + ocoef * x[r][b].s;
    }
  }
}
#endif

template <DType W>
void tile(const ActQ8* x, int64_t ldx, int64_t m0, int64_t m1, const char* wbase, int64_t ldw, int64_t n0, int64_t n1,
          int64_t nb, float* out, int64_t ldo) {
  constexpr int R = 4;
  for (int64_t n = n0; n < n1; ++n) {
    const char* wrow = wbase + n * ldw;
    int64_t m = m0;
    for (; m + R <= m1; m += R) {
      const ActQ8* xr[R] = {x + m * ldx, x + (m + 1) * ldx, x + (m + 2) * ldx, x + (m + 3) * ldx};
      float res[R];
      dot_row<W, R>(wrow, xr, nb, res);
      for (int r = 0; r < R; ++r) out[(m + r) * ldo + n] = res[r];
    }
    for (; m < m1; ++m) {
      const ActQ8* xr[1] = {x + m * ldx};
      dot_row<W, 1>(wrow, xr, nb, &out[m * ldo + n]);
    }
  }
}

// Per 32-block: d = max|x| / 127, q = round(x / d), s = d * sum(q).
void QuantizeActQ8(const float* x, ActQ8* out, int64_t n) {
  const DF df;
  const hn::RebindToSigned<DF> di;
  const hn::Rebind<int8_t, DF> d8;
  const int64_t L = int64_t(hn::Lanes(df));
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* xb = x + b * 32;
    VF vmax = hn::Zero(df);
    for (int64_t j = 0; j < 32; j += L) vmax = hn::Max(vmax, hn::Abs(hn::LoadU(df, xb + j)));
    const float amax = hn::GetLane(hn::MaxOfLanes(df, vmax));
    const float d = amax / 127.0f;
    const VF vid = hn::Set(df, d != 0.0f ? 1.0f / d : 0.0f);
    auto vsum = hn::Zero(di);
    for (int64_t j = 0; j < 32; j += L) {
      const auto q = hn::NearestInt(hn::Mul(hn::LoadU(df, xb + j), vid));
      vsum = hn::Add(vsum, q);
      hn::StoreU(hn::DemoteTo(d8, q), d8, out[b].qs + j);
    }
    out[b].d = d;
    out[b].s = d * float(hn::GetLane(hn::SumOfLanes(di, vsum)));
    for (int i = 0; i < 8; ++i) {
      const int8_t* q = out[b].qs + 4 * i;
      out[b].c8[i] = 8 * (int32_t(q[0]) + q[1] + q[2] + q[3]);
    }
  }
}

void GemmQ8Tile(DType w, const ActQ8* x, int64_t ldx, int64_t m0, int64_t m1, const char* wbase, int64_t ldw,
                int64_t n0, int64_t n1, int64_t nb, float* out, int64_t ldo) {
  switch (w) {
    case DType::kQ8_0: return tile<DType::kQ8_0>(x, ldx, m0, m1, wbase, ldw, n0, n1, nb, out, ldo);
    case DType::kQ4_0: return tile<DType::kQ4_0>(x, ldx, m0, m1, wbase, ldw, n0, n1, nb, out, ldo);
    case DType::kQ4_1: return tile<DType::kQ4_1>(x, ldx, m0, m1, wbase, ldw, n0, n1, nb, out, ldo);
    default: return;  // callers only pass block formats (gemm checks)
  }
}

}  // namespace tessera::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tessera::cpu {

HWY_EXPORT(GemmQ8Tile);
HWY_EXPORT(QuantizeActQ8);

void quantize_act_q8(const float* x, ActQ8* out, int64_t n) { HWY_DYNAMIC_DISPATCH(QuantizeActQ8)(x, out, n); }

void gemm_q8_tile(DType w, const ActQ8* x, int64_t ldx, int64_t m0, int64_t m1, const char* wbase, int64_t ldw,
                  int64_t n0, int64_t n1, int64_t nb, float* out, int64_t ldo) {
  HWY_DYNAMIC_DISPATCH(GemmQ8Tile)(w, x, ldx, m0, m1, wbase, ldw, n0, n1, nb, out, ldo);
}

}  // namespace tessera::cpu
#endif  // HWY_ONCE
