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

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels.h"
#include "hwy/highway.h"
#include "quant/dtype.h"
#if HWY_ARCH_ARM_A64
#include "backends/cpu/arm_dot.h"
#endif

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

// ---- decode GEMV (one activation row) for formats with one scale per 32-element block ------
// The row loop above spends ~12 vector instructions per block, mostly on the block's scale (f16
// broadcast and convert, times dx) and the float accumulate; on AVX2 that, not DRAM, bounds a
// 4-bit GEMV. This path, for formats that define kPairs, does per 8 blocks one gather of the 8
// f16 scales (integer loads, one convert) and one multiply by the 8 dx, and per PAIR of blocks
// one integer dot: the two blocks' 16 packed bytes sit in the two 128-bit halves of one register,
// so the low/high nibbles of both come out of one shift and two ANDs, and the activations are
// pre-arranged to match (ActPairs). The zero offset of unsigned codes and the float mins go
// through c * s per block (s = dx * sum(qx)), one FMA per 8 blocks. About 6 instructions per
// block instead of 12.
//
// F::scales8(wb, &d, &c): the 8 blocks' scales d and offset coefficients c (w = d * code + c).
// F::pair_codes(a, b, &lo, &hi): u8 codes, lo = [a 0-15 | b 0-15], hi = [a 16-31 | b 16-31];
// every code <= 31 so the two maddubs sums added in i16 stay below 2 * 2 * 31 * 127 < 32768.
template <class F>
concept PairFormat = F::kPairs;


// Eight f16 fields at byte |offset| of consecutive blocks as 8 f32 (scalar loads, one convert).
template <class B>
HWY_INLINE __m256 f16x8(const B* wb, size_t offset) {
  const auto h = [&](int j) {
    uint16_t v;
    std::memcpy(&v, reinterpret_cast<const char*>(wb + j) + offset, 2);
    uint64_t w = v;
    // NOTE: keeps the gather in integer registers (idle ALUs); GCC's SLP vectoriser otherwise
    // turns it into ~20 vector shuffles per 8 blocks, on the pipes the dot products need.
    asm("" : "+r"(w));
    return w;
  };
  const uint64_t lo = h(0) | h(1) << 16 | h(2) << 32 | h(3) << 48, hi = h(4) | h(5) << 16 | h(6) << 32 | h(7) << 48;
  return _mm256_cvtph_ps(_mm_set_epi64x(static_cast<long long>(hi), static_cast<long long>(lo)));
}
// The first 4 bytes of 8 consecutive blocks as 8 u32 lanes, from 8 integer loads (vpgatherdd
// measured 25% slower on Zen 3): INT4_G32 reads its f16 scale and u8 zero point from it.
template <class B>
HWY_INLINE __m256i head32x8(const B* wb) {
  const auto w = [&](int j) {
    uint32_t v;
    std::memcpy(&v, wb + j, 4);
    uint64_t x = v;
    asm("" : "+r"(x));  // integer registers, as in f16x8
    return x;
  };
  const __m128i a = _mm_set_epi64x(static_cast<long long>(w(2) | w(3) << 32), static_cast<long long>(w(0) | w(1) << 32));
  const __m128i b = _mm_set_epi64x(static_cast<long long>(w(6) | w(7) << 32), static_cast<long long>(w(4) | w(5) << 32));
  return _mm256_inserti128_si256(_mm256_castsi128_si256(a), b, 1);
}
// The two blocks' 16 nibble bytes as lo/hi codes (Q4_0's element order in each half).
HWY_INLINE void nibble_pair(const uint8_t* qa, const uint8_t* qb, __m256i* lo, __m256i* hi) {
  const __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qa))),
                                            _mm_loadu_si128(reinterpret_cast<const __m128i*>(qb)), 1);
  *lo = low_nibbles(v);
  *hi = high_nibbles(v);
}
// Q5's fifth bits (bit j of qh = element j) of a pair into the lo/hi halves' layout.
HWY_INLINE void fifth_bit_pair(const uint8_t* qha, const uint8_t* qhb, __m256i* lo, __m256i* hi) {
  uint32_t a, b;
  std::memcpy(&a, qha, 4);
  std::memcpy(&b, qhb, 4);
  *lo = _mm256_or_si256(*lo, bit4_from_mask((a & 0xffffu) | (b << 16)));
  *hi = _mm256_or_si256(*hi, bit4_from_mask((a >> 16) | (b & 0xffff0000u)));
}

// The activation row rearranged for the pair path, once per GEMV call: for blocks 2p, 2p+1,
// qs[64p..64p+31] = [a 0-15 | b 0-15] and qs[64p+32..64p+63] = [a 16-31 | b 16-31].
struct ActPairs {
  const int8_t* qs;
  const float* dx;  // [nb]
  const float* s;   // [nb] dx * sum(qx)
};
HWY_INLINE ActPairs make_act_pairs(const ActQ8* x, int64_t nb) {
  // NOTE: slot 4: pack_activations holds slot 0 and the portable fallback slot 1 in this thread.
  float* buf = thread_scratch(4, nb * 10 + 16);
  auto* qs = reinterpret_cast<int8_t*>(buf);
  float* dx = buf + nb * 8;
  float* s = dx + nb;
  for (int64_t b = 0; b + 2 <= nb; b += 2) {
    const __m256i xa = load32(x[b].qs), xb = load32(x[b + 1].qs);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs + 32 * b), _mm256_permute2x128_si256(xa, xb, 0x20));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs + 32 * b + 32), _mm256_permute2x128_si256(xa, xb, 0x31));
  }
  for (int64_t b = 0; b < nb; ++b) dx[b] = x[b].d, s[b] = x[b].s;
  return {qs, dx, s};
}

template <PairFormat F>
HWY_INLINE float dot_row_pairs(const char* wrow, const ActQ8* x, const ActPairs& xp, int64_t nb) {
  const auto* wb = reinterpret_cast<const typename F::Block*>(wrow + F::kHeader);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  __m256 off = _mm256_setzero_ps();
  int64_t b0 = 0;
  for (; b0 + 8 <= nb; b0 += 8) {
    __m256 d, c;
    F::scales8(wb + b0, &d, &c);
    const __m256 sc = _mm256_mul_ps(d, _mm256_loadu_ps(xp.dx + b0));
    off = _mm256_fmadd_ps(c, _mm256_loadu_ps(xp.s + b0), off);
#pragma GCC unroll 4
    for (int u = 0; u < 4; ++u) {
      __m256i lo, hi;
      F::pair_codes(wb[b0 + 2 * u], wb[b0 + 2 * u + 1], &lo, &hi);
      const int8_t* q = xp.qs + 32 * (b0 + 2 * u);
      const __m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(lo, load32(q)), _mm256_maddubs_epi16(hi, load32(q + 32)));
      const __m256 s = _mm256_permutevar8x32_ps(sc, _mm256_setr_epi32(2 * u, 2 * u, 2 * u, 2 * u, 2 * u + 1, 2 * u + 1,
                                                                      2 * u + 1, 2 * u + 1));
      acc[u] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(s16, ones)), s, acc[u]);
    }
  }
  // The last nb % 8 blocks through the general per-block decoder.
  const ActQ8* xr[1] = {x};
  float tail_off = 0.0f;
  for (; b0 < nb; ++b0) F::template block<1>(wb[b0], xr, b0, &acc[0], &acc[1], &tail_off);
  const __m256 sum = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
  return F::finish(wrow, hsum(sum) + hsum(off) + tail_off);
}

// The same idea for the formats whose blocks do not pair up (Q8_0's signed bytes, the K-quants'
// 256-element super-blocks): F::group(wb, x, xp, b0, acc, &off) consumes 256 elements (8
// sub-blocks of 32 starting at activation block b0, F::kGroupBlocks weight blocks) with the
// sub-block scales times dx computed as one vector, and 4 accumulators.
template <class F>
concept GroupFormat = F::kGroup;

// Lane u of |v| in all 8 lanes.
HWY_INLINE __m256 lane_splat(__m256 v, int u) { return _mm256_permutevar8x32_ps(v, _mm256_set1_epi32(u)); }

template <GroupFormat F>
HWY_INLINE float dot_row_groups(const char* wrow, const ActQ8* x, const ActPairs& xp, int64_t nb) {
  const auto* wb = reinterpret_cast<const typename F::Block*>(wrow + F::kHeader);
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  __m256 off = _mm256_setzero_ps();
  constexpr int64_t kG = F::kGroupBlocks;
  int64_t i = 0;
  for (; (i + kG) * F::kSub <= nb; i += kG) F::group(wb + i, x, xp, i * F::kSub, acc, &off);
  const ActQ8* xr[1] = {x};
  float tail_off = 0.0f;
  for (; i * F::kSub < nb; ++i) F::template block<1>(wb[i], xr, i * F::kSub, &acc[0], &acc[1], &tail_off);
  const __m256 sum = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
  return F::finish(wrow, hsum(sum) + hsum(off) + tail_off);
}

// A format with its own decode GEMV (its own activation layout): F::prepare_act(x, nb) once per
// call, then F::decode_row(wrow, act, nb) per weight row.
template <class F>
concept OwnDecodeFormat = F::kOwnDecode;

#else  // portable fallback (SCALAR and non-x86 targets): the reference dequantisation, then a dot
       // with the int8 activations (so every target sees the same activation rounding).

template <class F, int R>
HWY_INLINE void dot_row(const char* wrow, const ActQ8* const* x, int64_t nb, float* res) {
#if HWY_ARCH_ARM_A64
  // Plain int8 codes: integer dot products (sdot where the CPU has it; arm_dot.h).
  if constexpr (F::kDType == DType::kQ8_0 || F::kDType == DType::kINT8_PC) {
    constexpr bool kF16Scale = F::kDType == DType::kQ8_0;
    constexpr int64_t kCodesAt = kF16Scale ? 2 : 0;
    for (int r = 0; r < R; ++r)
      res[r] = F::finish(wrow, arm_dot_s8_blocks(wrow + F::kHeader, sizeof(typename F::Block), kCodesAt, kF16Scale,
                                                 x[r], nb));
    return;
  }
#endif
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
#ifdef TESSERA_Q8_X86
  if constexpr (PairFormat<F> || GroupFormat<F> || OwnDecodeFormat<F>) {
    if (m1 - m0 == 1) {  // decode: one activation row
      const ActQ8* xr = x + m0 * ldx;
      const auto rows = [&](auto&& dot) {
        const int64_t ahead_rows = std::max<int64_t>(1, kGemvPrefetchBytes / ldw);
        for (int64_t n = n0; n < n1; ++n) {
          if (n + ahead_rows < n1) {
            const char* ahead = wbase + (n + ahead_rows) * ldw;
            for (int64_t o = 0; o < ldw; o += 64) _mm_prefetch(ahead + o, _MM_HINT_T0);
          }
          out[m0 * ldo + n] = dot(wbase + n * ldw);
        }
      };
      if constexpr (OwnDecodeFormat<F>) {
        const auto xa = F::prepare_act(xr, nb);
        rows([&](const char* w) { return F::decode_row(w, xa, nb); });
      } else {
        const ActPairs xp = make_act_pairs(xr, nb);
        if constexpr (PairFormat<F>)
          rows([&](const char* w) { return dot_row_pairs<F>(w, xr, xp, nb); });
        else
          rows([&](const char* w) { return dot_row_groups<F>(w, xr, xp, nb); });
      }
      return;
    }
  }
#endif
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
