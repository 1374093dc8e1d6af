// Int8-dot GEMV/GEMM for the super-block formats: the GGUF K-quants (256 elements with 6-bit or
// int8 sub-block scales and mins) and NVFP4 (64 elements, a UE4M3 scale per 16). The loops and
// the algebra are those of q8_dot-inl.h; only the block decoders differ.
//   Q4_K/Q5_K: per 32: (d * sc[i]) * q - (dmin * m[i]), the min through dx * sum(qx).
//   Q6_K:      per 16: (d * sc[j]) * (q - 32), the 32 removed in the integer domain.
//   NVFP4:     per 16: (ue4m3 / 2) * (2 * e2m1).
// Scales that change every 16 codes become a per-lane scale vector (i32 lanes 0-3 hold codes
// 0-15 of a 32-element sub-block, lanes 4-7 codes 16-31).
#include <cstring>
#include <type_traits>

#include "backends/cpu/kernels.h"
#include "quant/fp4.h"
#include "quant/kquants.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/matmul_kq.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "backends/cpu/simd-inl.h"
#include "backends/cpu/q8_dot-inl.h"

HWY_BEFORE_NAMESPACE();
namespace tessera::cpu::HWY_NAMESPACE {

// The eight 6-bit scales (low 8 bytes of the result) and mins of Q4_K/Q5_K, in the layout of
// quant/kquants.h's pack_k_scales, with word arithmetic instead of 16 byte-wise unpacks.
HWY_INLINE void k_scales(const uint8_t* in, uint64_t* sc, uint64_t* m) {
  uint32_t u[3];
  std::memcpy(u, in, 12);
  const uint32_t lo6 = 0x3f3f3f3fu, lo4 = 0x0f0f0f0fu, lo2 = 0x03030303u;
  *sc = (u[0] & lo6) | uint64_t((u[2] & lo4) | (((u[0] >> 6) & lo2) << 4)) << 32;
  *m = (u[1] & lo6) | uint64_t(((u[2] >> 4) & lo4) | (((u[1] >> 6) & lo2) << 4)) << 32;
}

// Q4_K (kBits = 4) and Q5_K (kBits = 5): chunk c of 64 elements is qs[32c..32c+31], low nibbles
// = sub-block 2c, high nibbles = 2c+1; Q5_K's bit 4 of element 32i + l is bit i of qh[l].
template <int kBits>
struct FmtQK : NoRowScale {
  static constexpr DType kDType = kBits == 4 ? DType::kQ4_K : DType::kQ5_K;
  using Block = std::conditional_t<kBits == 4, BlockQ4_K, BlockQ5_K>;
  static constexpr int kSub = 8;
  static constexpr int64_t kHeader = 0;
#ifdef TESSERA_Q8_X86
  // The eight sub-block scales d * sc[j] and mins dmin * m[j] as floats.
  static HWY_INLINE void scales(const Block& wb, __m256* scale, __m256* mins) {
    uint64_t sc8, m8;
    k_scales(wb.scales, &sc8, &m8);
    *scale = _mm256_mul_ps(f16_splat(wb.d), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(int64_t(sc8)))));
    *mins = _mm256_mul_ps(f16_splat(wb.dmin), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(int64_t(m8)))));
  }
  // Chunk c's unsigned codes of sub-blocks 2c (lo) and 2c+1 (hi). Q5_K: bits 2c and 2c+1 of every
  // qh byte move to bit 4; *qh (load32(wb.qh) before chunk 0) is shifted right 2 per chunk.
  static HWY_INLINE void codes(const Block& wb, int c, __m256i* qh, __m256i* lo, __m256i* hi) {
    const __m256i v = load32(wb.qs + 32 * c);
    *lo = low_nibbles(v);
    *hi = high_nibbles(v);
    if constexpr (kBits == 5) {
      const __m256i one = _mm256_set1_epi8(1);
      *lo = _mm256_or_si256(*lo, _mm256_slli_epi16(_mm256_and_si256(*qh, one), 4));
      *hi = _mm256_or_si256(*hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(*qh, 1), one), 4));
      *qh = _mm256_srli_epi16(*qh, 2);
    }
  }
  template <int R>
  static HWY_INLINE void block(const Block& wb, const ActQ8* const* x, int64_t b0, __m256* acc0, __m256* acc1,
                               float* off) {
    // The eight sub-block scales and mins as floats, once per super-block (vector converts; the
    // per-sub-block broadcasts then read them from the stack).
    __m256 scale_v, mins_v;
    scales(wb, &scale_v, &mins_v);
    alignas(32) float scale[8], mins[8];
    _mm256_store_ps(scale, scale_v);
    _mm256_store_ps(mins, mins_v);
    __m256i qh = _mm256_setzero_si256();
    if constexpr (kBits == 5) qh = load32(wb.qh);
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      __m256i lo, hi;
      codes(wb, c, &qh, &lo, &hi);
      accum<R, false, -1>(lo, _mm256_broadcast_ss(&scale[2 * c]), x, b0 + 2 * c, acc0);
      accum<R, false, -1>(hi, _mm256_broadcast_ss(&scale[2 * c + 1]), x, b0 + 2 * c + 1, acc1);
    }
    // The mins: off -= sum_i dmin * m[i] * dx_i * sum(qx_i).
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) accum_off<R>(-mins[i], x, b0 + i, off);
  }
  // Decode GEMV: the 8 sub-block scales times dx as one vector, the mins as one FMA.
  static constexpr bool kGroup = true;
  static constexpr int64_t kGroupBlocks = 1;
  static HWY_INLINE void group(const Block* wbp, const ActQ8* x, const ActPairs& xp, int64_t b0, __m256* acc,
                               __m256* off) {
    const Block& wb = *wbp;
    __m256 scale, mins;
    scales(wb, &scale, &mins);
    const __m256 sc = _mm256_mul_ps(scale, _mm256_loadu_ps(xp.dx + b0));
    *off = _mm256_fnmadd_ps(mins, _mm256_loadu_ps(xp.s + b0), *off);
    __m256i qh = _mm256_setzero_si256();
    if constexpr (kBits == 5) qh = load32(wb.qh);
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      __m256i lo, hi;
      codes(wb, c, &qh, &lo, &hi);
      const __m256i plo = dot_u8s8(lo, load32(x[b0 + 2 * c].qs)), phi = dot_u8s8(hi, load32(x[b0 + 2 * c + 1].qs));
      acc[(2 * c) & 3] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(plo), lane_splat(sc, 2 * c), acc[(2 * c) & 3]);
      acc[(2 * c + 1) & 3] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(phi), lane_splat(sc, 2 * c + 1), acc[(2 * c + 1) & 3]);
    }
  }
#endif
};

// Q6_K: sub-block j (32 elements) = half h = j / 4, quarter t = j % 4: low 4 bits in nibble
// t / 2 of ql[64h + 32(t % 2) + l], high 2 bits in bits 2t..2t+1 of qh[32h + l].
struct FmtQ6K : NoRowScale {
  static constexpr DType kDType = DType::kQ6_K;
  using Block = BlockQ6_K;
  static constexpr int kSub = 8;
  static constexpr int64_t kHeader = 0;
#ifdef TESSERA_Q8_X86
  // The unsigned 6-bit codes (0..63) of half h's four 32-element sub-blocks.
  static HWY_INLINE void codes(const Block& wb, int h, __m256i q[4]) {
    const __m256i three = _mm256_set1_epi8(3);
    const __m256i l0 = load32(wb.ql + 64 * h), l1 = load32(wb.ql + 64 * h + 32);
    const __m256i qh = load32(wb.qh + 32 * h);
    q[0] = _mm256_or_si256(low_nibbles(l0), _mm256_slli_epi16(_mm256_and_si256(qh, three), 4));
    q[1] = _mm256_or_si256(low_nibbles(l1), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), three), 4));
    q[2] = _mm256_or_si256(high_nibbles(l0), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), three), 4));
    q[3] = _mm256_or_si256(high_nibbles(l1), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), three), 4));
  }
  template <int R>
  static HWY_INLINE void block(const Block& wb, const ActQ8* const* x, int64_t b0, __m256* acc0, __m256* acc1,
                               float*) {
    // The 16 per-16 scales as floats, once per super-block; sub-block j needs scales 2j and
    // 2j+1 in lanes 0-3 and 4-7: one permute each.
    const __m256 d = f16_splat(wb.d);
    const __m128i sc16 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wb.scales));
    const __m256 scale[2] = {_mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc16))),
                             _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(sc16, sc16))))};
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m256i q[4];
      codes(wb, h, q);
#pragma GCC unroll 4
      for (int t = 0; t < 4; ++t) {
        const __m256i pick = _mm256_setr_epi32(2 * t, 2 * t, 2 * t, 2 * t, 2 * t + 1, 2 * t + 1, 2 * t + 1, 2 * t + 1);
        accum<R, false, 2>(q[t], _mm256_permutevar8x32_ps(scale[h], pick), x, b0 + 4 * h + t, t % 2 ? acc1 : acc0);
      }
    }
  }
  // Decode GEMV: the per-16 scales times dx once per super-block (two vectors), not per sub-block.
  static constexpr bool kGroup = true;
  static constexpr int64_t kGroupBlocks = 1;
  static HWY_INLINE void group(const Block* wbp, const ActQ8* x, const ActPairs& xp, int64_t b0, __m256* acc, __m256*) {
    const Block& wb = *wbp;
    const __m256 d = f16_splat(wb.d);
    const __m128i sc16 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wb.scales));
    const __m256 dx = _mm256_loadu_ps(xp.dx + b0);
    // Half h holds sub-blocks 4h..4h+3, two scales each: dx of sub-block 4h + t in lanes 2t, 2t+1.
    const __m256 scale[2] = {
        _mm256_mul_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc16))),
                      _mm256_permutevar8x32_ps(dx, _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3))),
        _mm256_mul_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(sc16, sc16)))),
                      _mm256_permutevar8x32_ps(dx, _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7)))};
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m256i q[4];
      codes(wb, h, q);
#pragma GCC unroll 4
      for (int t = 0; t < 4; ++t) {
        const ActQ8& xb = x[b0 + 4 * h + t];
        const __m256i p = _mm256_sub_epi32(dot_u8s8(q[t], load32(xb.qs)), _mm256_slli_epi32(load32(xb.c8), 2));
        const __m256i pick = _mm256_setr_epi32(2 * t, 2 * t, 2 * t, 2 * t, 2 * t + 1, 2 * t + 1, 2 * t + 1, 2 * t + 1);
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_permutevar8x32_ps(scale[h], pick), acc[t]);
      }
    }
  }
#endif
};

// NVFP4: sub-block s of 16 is qs[8s..8s+7] (elements 0-7 low nibbles, 8-15 high nibbles), so a
// 32-element sub-block j is the 16 bytes qs[16j..16j+15] reordered as lo(0..7), hi(0..7),
// lo(8..15), hi(8..15).
struct FmtNvfp4 : NoRowScale {
  static constexpr DType kDType = DType::kNVFP4;
  using Block = BlockNVFP4;
  static constexpr int kSub = 2;
  static constexpr int64_t kHeader = 0;
#ifdef TESSERA_Q8_X86
  template <int R>
  static HWY_INLINE void block(const Block& wb, const ActQ8* const* x, int64_t b0, __m256* acc0, __m256* acc1,
                               float*) {
    // lo/hi nibbles of all 32 bytes; per 128-bit lane, unpack{lo,hi}_epi64 yields the element
    // order of 16 bytes, and the two lanes hold sub-blocks 0 and 1 halves: recombine them.
    const __m256i v = load32(wb.qs);
    const __m256i lo = low_nibbles(v), hi = high_nibbles(v);
    const __m256i a = _mm256_unpacklo_epi64(lo, hi), b = _mm256_unpackhi_epi64(lo, hi);
    const __m256i sub0 = _mm256_permute2x128_si256(a, b, 0x20), sub1 = _mm256_permute2x128_si256(a, b, 0x31);
    accum<R, true, -1>(e2m1x2(sub0), split_scale(kUe4m3Half[wb.d[0]], kUe4m3Half[wb.d[1]]), x, b0, acc0);
    accum<R, true, -1>(e2m1x2(sub1), split_scale(kUe4m3Half[wb.d[2]], kUe4m3Half[wb.d[3]]), x, b0 + 1, acc1);
  }

  // Decode GEMV. The activations are rearranged once per call to the weights' nibble order:
  // for block i, lo[j] = x[64i + 16(j/8) + j%8] and hi[j] = that + 8, so the low and the high
  // nibbles of the block's 32 bytes each meet their activations with one maddubs, and i32 lane
  // k of the dot holds scale group k/2 (one f32 multiply-add per 64 weights). Codes go in as
  // unsigned 2 * e2m1 + 12 (0..24); the 12 is removed through per-16 activation sums. The UE4M3
  // scales of two blocks convert at once: shifted into an f16 they read 2^-8 times their value
  // (subnormals included), a factor folded with the 1/2 of the doubled codes into |dx|.
  static constexpr bool kOwnDecode = true;
  struct Act {
    const int8_t* q;   // [nb/2][64]: lo[32], hi[32]
    const float* dx;   // [nb/2][4]: 128 * dx of scale group g's 32-block
    const float* s16;  // [nb/2][4]: 128 * dx * sum(qx) over scale group g
  };
  static HWY_INLINE Act prepare_act(const ActQ8* x, int64_t nb) {
    const int64_t nblk = nb / 2;
    // NOTE: slot 5 (slot 4 is make_act_pairs', 0 and 1 pack_activations' and the fallback's).
    float* buf = thread_scratch(5, nblk * 24 + 16);
    auto* q = reinterpret_cast<int8_t*>(buf);
    float* dx = buf + nblk * 16;
    float* s16 = dx + nblk * 4;
    for (int64_t i = 0; i < nblk; ++i) {
      // 64-bit quarters of the two 32-blocks: lo = [a0 a2 | b0 b2], hi = [a1 a3 | b1 b3].
      const __m256i a = _mm256_permute4x64_epi64(load32(x[2 * i].qs), 0xd8);
      const __m256i b = _mm256_permute4x64_epi64(load32(x[2 * i + 1].qs), 0xd8);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 64 * i), _mm256_permute2x128_si256(a, b, 0x20));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 64 * i + 32), _mm256_permute2x128_si256(a, b, 0x31));
      for (int g = 0; g < 4; ++g) {
        const ActQ8& xb = x[2 * i + g / 2];
        const int32_t* c8 = xb.c8 + 4 * (g % 2);  // 8 * the sums of 4 codes
        dx[4 * i + g] = 128.0f * xb.d;
        s16[4 * i + g] = 16.0f * xb.d * float(c8[0] + c8[1] + c8[2] + c8[3]);
      }
    }
    return {q, dx, s16};
  }
  // The UE4M3 scales of blocks |a| and |b| (4 each) as 8 floats, 2^-8 times their value; the
  // code 0x7F (NaN in E4M3FN) reads as 0 and bit 7 is otherwise ignored (0xFF reads as 480), as
  // in quant/fp4.cpp.
  static HWY_INLINE __m256 scales2(const Block& a, const Block& b) {
    uint32_t ua, ub;
    std::memcpy(&ua, a.d, 4);
    std::memcpy(&ub, b.d, 4);
    const __m128i m7f = _mm_set1_epi8(0x7f);
    const __m128i raw = _mm_cvtsi64_si128(static_cast<long long>(ua | uint64_t(ub) << 32));
    const __m128i v = _mm_andnot_si128(_mm_cmpeq_epi8(raw, m7f), _mm_and_si128(raw, m7f));
    return _mm256_cvtph_ps(_mm_slli_epi16(_mm_cvtepu8_epi16(v), 7));
  }
  static HWY_INLINE __m256i block_dot(const Block& wb, const int8_t* q) {
    const __m256i lut = _mm256_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0,  //
                                         12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0);
    const __m256i v = load32(wb.qs);
    const __m256i lo = _mm256_shuffle_epi8(lut, low_nibbles(v)), hi = _mm256_shuffle_epi8(lut, high_nibbles(v));
    const __m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(lo, load32(q)), _mm256_maddubs_epi16(hi, load32(q + 32)));
    return _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
  }
  static HWY_INLINE float decode_row(const char* wrow, const Act& xa, int64_t nb) {
    const auto* wb = reinterpret_cast<const Block*>(wrow);
    const int64_t nblk = nb / 2;
    const __m256i first = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3), second = _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, off = acc0;
    int64_t i = 0;
    for (; i + 2 <= nblk; i += 2) {
      const __m256 d = scales2(wb[i], wb[i + 1]);
      const __m256 sc = _mm256_mul_ps(d, _mm256_loadu_ps(xa.dx + 4 * i));
      off = _mm256_fmadd_ps(d, _mm256_loadu_ps(xa.s16 + 4 * i), off);
      acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(block_dot(wb[i], xa.q + 64 * i)), _mm256_permutevar8x32_ps(sc, first), acc0);
      acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(block_dot(wb[i + 1], xa.q + 64 * i + 64)), _mm256_permutevar8x32_ps(sc, second),
                             acc1);
    }
    float tail = 0.0f;
    if (i < nblk) {  // an odd last block: only lanes 0-3 (its own scales) are read
      const __m256 d = scales2(wb[i], wb[i]);
      const __m256 sc = _mm256_mul_ps(d, _mm256_castps128_ps256(_mm_loadu_ps(xa.dx + 4 * i)));
      const __m128 o = _mm_mul_ps(_mm256_castps256_ps128(d), _mm_loadu_ps(xa.s16 + 4 * i));
      acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(block_dot(wb[i], xa.q + 64 * i)), _mm256_permutevar8x32_ps(sc, first), acc0);
      alignas(16) float ov[4];
      _mm_store_ps(ov, o);
      tail = ov[0] + ov[1] + ov[2] + ov[3];
    }
    return hsum(_mm256_add_ps(acc0, acc1)) - 12.0f * (hsum(off) + tail);
  }
#endif
};

void GemmQ8TileKq(DType w, const ActQ8* x, int64_t ldx, int64_t m0, int64_t m1, const char* wbase, int64_t ldw,
                  int64_t n0, int64_t n1, int64_t nb, float* out, int64_t ldo) {
#define TESSERA_Q8_CASE(F) return q8_tile<F>(x, ldx, m0, m1, wbase, ldw, n0, n1, nb, out, ldo)
  switch (w) {
    case DType::kQ4_K: TESSERA_Q8_CASE(FmtQK<4>);
    case DType::kQ5_K: TESSERA_Q8_CASE(FmtQK<5>);
    case DType::kQ6_K: TESSERA_Q8_CASE(FmtQ6K);
    case DType::kNVFP4: TESSERA_Q8_CASE(FmtNvfp4);
    default: return;  // gemm_q8_tile routes only these formats here
  }
#undef TESSERA_Q8_CASE
}

}  // namespace tessera::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tessera::cpu {

HWY_EXPORT(GemmQ8TileKq);

void gemm_q8_tile_kq(DType w, const ActQ8* x, int64_t ldx, int64_t m0, int64_t m1, const char* wbase, int64_t ldw,
                     int64_t n0, int64_t n1, int64_t nb, float* out, int64_t ldo) {
  HWY_DYNAMIC_DISPATCH(GemmQ8TileKq)(w, x, ldx, m0, m1, wbase, ldw, n0, n1, nb, out, ldo);
}

}  // namespace tessera::cpu
#endif  // HWY_ONCE
