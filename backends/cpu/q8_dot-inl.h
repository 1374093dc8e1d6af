// Per-target building blocks of the int8-dot GEMV/GEMM (matmul_q8.cpp, matmul_kq.cpp): a weight
// format is a small struct that decodes one weight block into 32-element sub-blocks of integer
// codes plus scales, and the shared row/tile loops here do the rest. Included from inside each
// family's HWY_TARGET_INCLUDE pass (Highway's -inl.h convention).
//
// For one 32-element sub-block b of weight row n and activation row m (ActQ8: x ~= dx * qx):
//   dot = dx * sum_lanes(ws[lane] * sum4(qw * qx)) - off * dx * sum(qx)
// where ws is the weight's scale per group of 4 codes (one value for most formats; Q6_K and
// NVFP4 change it every 16 codes), the integer offset of unsigned codes (Q4_0's 8, Q5_0's 16,
// Q6_K's 32) is removed in the integer domain, and a float min or zero point (Q4_1, Q5_1, K-quant
// mins, INT4 zero points) goes through the per-block activation sum s = dx * sum(qx).
#if defined(TESSERA_CPU_Q8_DOT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef TESSERA_CPU_Q8_DOT_INL_H_
#undef TESSERA_CPU_Q8_DOT_INL_H_
#else
#define TESSERA_CPU_Q8_DOT_INL_H_
#endif

#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels.h"
#include "hwy/highway.h"
#include "quant/dtype.h"

#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#include <immintrin.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace tessera::cpu::HWY_NAMESPACE {

// The finish of formats without a per-row scale (all but INT8_PC).
struct NoRowScale {
  static float finish(const char*, float v) { return v; }
};

#undef TESSERA_Q8_X86
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
// Defined in this target's pass only: the format structs compile their block decoders under it.
#define TESSERA_Q8_X86 1

// Sum over 4-byte groups of u8(w) * s8(x), as 8 i32 lanes. maddubs saturates its i16 pair sums:
// every format keeps |w| * 127 * 2 below 32768 (|w| <= 128).
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
HWY_INLINE float f16_scalar(uint16_t h) { return _cvtsh_ss(h); }
// Lanes 0-3 (codes 0-15) scaled by |lo|, lanes 4-7 (codes 16-31) by |hi|.
HWY_INLINE __m256 split_scale(float lo, float hi) { return _mm256_set_m128(_mm_set1_ps(hi), _mm_set1_ps(lo)); }
HWY_INLINE float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}
HWY_INLINE __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
HWY_INLINE __m256i low_nibbles(__m256i v) { return _mm256_and_si256(v, _mm256_set1_epi8(0x0f)); }
HWY_INLINE __m256i high_nibbles(__m256i v) { return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0f)); }
// 16 packed bytes as 32 codes in element order: the low nibbles, then the high nibbles (Q4_0's
// layout, shared by Q4_1, Q5_*, INT4_G32 and MXFP4).
HWY_INLINE __m256i nibbles16(const uint8_t* qs) {
  // Both 128-bit halves get the 16 bytes; the upper half is shifted by 4 to expose the high nibbles.
  const __m256i both = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
  return low_nibbles(_mm256_srlv_epi32(both, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)));
}
// The 32 bits of |bits| (little endian, bit j for byte j) as bytes 0x10 or 0: the 5th bit of Q5_0/Q5_1.
HWY_INLINE __m256i bit4_from_mask(uint32_t bits) {
  const __m256i v = _mm256_set1_epi32(static_cast<int>(bits));
  const __m256i bytes = _mm256_shuffle_epi8(v, _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                                                 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i sel = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(bytes, sel), sel), _mm256_set1_epi8(0x10));
}
// E2M1 codes (0..15) to twice their value as int8 (0, 1, 2, 3, 4, 6, 8, 12 and negatives):
// integers, so MXFP4/NVFP4 run on the same int8 dot with half the block scale.
HWY_INLINE __m256i e2m1x2(__m256i codes) {
  const __m256i lut = _mm256_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12,  //
                                       0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
  return _mm256_shuffle_epi8(lut, codes);
}

// Accumulates sub-block |b| of R activation rows against weight codes |w| with per-lane scales
// |ws|. kSigned: |w| holds int8 (the signs move onto x so maddubs sees |w|); else u8 codes from
// which (8 << kOffShift) is subtracted when kOffShift >= 0.
template <int R, bool kSigned, int kOffShift>
HWY_INLINE void accum(__m256i w, __m256 ws, const ActQ8* const* x, int64_t b, __m256* acc) {
  const __m256i wabs = kSigned ? _mm256_sign_epi8(w, w) : w;
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    const ActQ8& xb = x[r][b];
    __m256i xq = load32(xb.qs);
    if constexpr (kSigned) xq = _mm256_sign_epi8(xq, w);
    __m256i p = dot_u8s8(wabs, xq);
    if constexpr (kOffShift >= 0)
      p = _mm256_sub_epi32(p, _mm256_slli_epi32(load32(xb.c8), kOffShift));
    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(ws, _mm256_broadcast_ss(&xb.d)), acc[r]);
  }
}
// off[r] += coef * dx * sum(qx) of sub-block |b|: a min or zero-point term.
template <int R>
HWY_INLINE void accum_off(float coef, const ActQ8* const* x, int64_t b, float* off) {
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) off[r] += coef * x[r][b].s;
}

// One weight row against R activation rows. F::block decodes one weight block (F::kSub
// sub-blocks of 32) starting at activation block b0; it may alternate sub-blocks between two
// accumulator sets so the FMA latency chain does not bound a single-row GEMV. For one-sub-block
// formats the loop alternates whole blocks instead.
template <class F, int R>
HWY_INLINE void dot_row(const char* wrow, const ActQ8* const* x, int64_t nb, float* res) {
  const auto* wb = reinterpret_cast<const typename F::Block*>(wrow + F::kHeader);
  const int64_t nwb = nb / F::kSub;
  __m256 acc0[R], acc1[R];
  float off[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = _mm256_setzero_ps(), off[r] = 0.0f;
  int64_t i = 0;
  if constexpr (F::kSub == 1) {
    for (; i + 2 <= nwb; i += 2) {
      F::template block<R>(wb[i], x, i, acc0, acc1, off);
      F::template block<R>(wb[i + 1], x, i + 1, acc1, acc0, off);
    }
  }
  for (; i < nwb; ++i) F::template block<R>(wb[i], x, i * F::kSub, acc0, acc1, off);
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) res[r] = F::finish(wrow, hsum(_mm256_add_ps(acc0[r], acc1[r])) + off[r]);
}

#else  // portable fallback (SCALAR and non-x86 targets): the reference dequantisation, then a dot
       // with the int8 activations (so every target sees the same activation rounding).

template <class F, int R>
HWY_INLINE void dot_row(const char* wrow, const ActQ8* const* x, int64_t nb, float* res) {
  float* w = thread_scratch(1, nb * 32);
  dtype_traits(F::kDType).dequantize_row(wrow, w, nb * 32);
  for (int r = 0; r < R; ++r) {
    double acc = 0.0;
    for (int64_t b = 0; b < nb; ++b) {
      float s = 0.0f;
      for (int j = 0; j < 32; ++j) s += w[b * 32 + j] * float(x[r][b].qs[j]);
      acc += double(x[r][b].d) * s;
    }
    res[r] = float(acc);
  }
}

#endif

// out[m, n] for m in [m0, m1), n in [n0, n1): each weight row is decoded once per 4 activation
// rows, so a prefill tile amortises the decode over its rows.
template <class F>
void q8_tile(const ActQ8* x, int64_t ldx, int64_t m0, int64_t m1, const char* wbase, int64_t ldw, int64_t n0,
             int64_t n1, int64_t nb, float* out, int64_t ldo) {
  constexpr int R = 4;
  for (int64_t n = n0; n < n1; ++n) {
    const char* wrow = wbase + n * ldw;
    int64_t m = m0;
    for (; m + R <= m1; m += R) {
      const ActQ8* xr[R] = {x + m * ldx, x + (m + 1) * ldx, x + (m + 2) * ldx, x + (m + 3) * ldx};
      float res[R];
      dot_row<F, R>(wrow, xr, nb, res);
      for (int r = 0; r < R; ++r) out[(m + r) * ldo + n] = res[r];
    }
    for (; m < m1; ++m) {
      const ActQ8* xr[1] = {x + m * ldx};
      dot_row<F, 1>(wrow, xr, nb, &out[m * ldo + n]);
    }
  }
}

}  // namespace tessera::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // TESSERA_CPU_Q8_DOT_INL_H_
