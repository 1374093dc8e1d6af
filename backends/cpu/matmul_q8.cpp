// Quantised GEMV/GEMM against activations quantised per 32-block to int8 (ActQ8): integer dot
// products per 32-element sub-block, one f32 multiply-add per sub-block (q8_dot-inl.h has the
// shared loops and the algebra). This file: the formats with 32-element scale groups -- Q8_0,
// Q4_0, Q4_1, Q5_0, Q5_1, INT8_PC, INT4_G32/64/128, MXFP4 -- plus the activation quantiser and
// the dispatch; the K-quants and NVFP4 are in matmul_kq.cpp. The decode hot path: weights stream
// once per call, activations stay in L1.
// x86: AVX2 uses maddubs (u8 x s8 -> i16 pairs) + madd (-> i32); AVX3_DL uses vpdpbusd (VNNI).
#include <algorithm>
#include <cstddef>
#include <cstring>

#include "backends/cpu/kernels.h"
#include "quant/fp4.h"
#include "quant/ggml_blocks.h"
#include "quant/half.h"
#include "quant/int_group.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/matmul_q8.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "backends/cpu/simd-inl.h"
#include "backends/cpu/q8_dot-inl.h"

HWY_BEFORE_NAMESPACE();
namespace tessera::cpu::HWY_NAMESPACE {

#ifdef TESSERA_Q8_X86
// Decode GEMV group of Q8_0 and INT8_PC: 8 blocks of 32 signed codes (Block::qs), |sc| the
// per-block scales times dx as one vector (lane u = block u).
template <class Block>
HWY_INLINE void group_s8x8(const Block* wb, const ActQ8* x, int64_t b0, __m256 sc, __m256* acc) {
#pragma GCC unroll 8
  for (int u = 0; u < 8; ++u) {
    const __m256i w = load32(wb[u].qs);
    const __m256i p = dot_u8s8(_mm256_sign_epi8(w, w), _mm256_sign_epi8(load32(x[b0 + u].qs), w));
    acc[u & 3] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), lane_splat(sc, u), acc[u & 3]);
  }
}
#endif

// Each format: its DType, block struct, sub-blocks of 32 per block, row header bytes, the block
// decoder (x86) and the per-row finish (the row scale of INT8_PC). See q8_dot-inl.h.
struct FmtQ8_0 : NoRowScale {
  static constexpr DType kDType = DType::kQ8_0;
  using Block = BlockQ8_0;
  static constexpr int kSub = 1;
  static constexpr int64_t kHeader = 0;
#ifdef TESSERA_Q8_X86
  // Decode GEMV: 8 blocks per group, their scales times dx as one vector.
  static constexpr bool kGroup = true;
  static constexpr int64_t kGroupBlocks = 8;
  static HWY_INLINE void group(const Block* wb, const ActQ8* x, const ActPairs& xp, int64_t b0, __m256* acc, __m256*) {
    group_s8x8(wb, x, b0, _mm256_mul_ps(f16x8(wb, offsetof(Block, d)), _mm256_loadu_ps(xp.dx + b0)), acc);
  }
  template <int R>
  static HWY_INLINE void block(const Block& wb, const ActQ8* const* x, int64_t b, __m256* acc, __m256*, float*) {
    accum<R, true, -1>(load32(wb.qs), f16_splat(wb.d), x, b, acc);
  }
#endif
};

struct FmtQ4_0 : NoRowScale {  // codes w + 8
  static constexpr DType kDType = DType::kQ4_0;
  using Block = BlockQ4_0;
  static constexpr int kSub = 1;
  static constexpr int64_t kHeader = 0;
#ifdef TESSERA_Q8_X86
  static constexpr bool kPairs = true;
  static HWY_INLINE void scales8(const Block* wb, __m256* d, __m256* c) {
    *d = f16x8(wb, offsetof(Block, d));
    *c = _mm256_mul_ps(*d, _mm256_set1_ps(-8.0f));
  }
  static HWY_INLINE void pair_codes(const Block& a, const Block& b, __m256i* lo, __m256i* hi) {
    nibble_pair(a.qs, b.qs, lo, hi);
  }
  template <int R>
  static HWY_INLINE void block(const Block& wb, const ActQ8* const* x, int64_t b, __m256* acc, __m256*, float*) {
    accum<R, false, 0>(nibbles16(wb.qs), f16_splat(wb.d), x, b, acc);
  }
#endif
};

struct FmtQ4_1 : NoRowScale {  // d * q + m
  static constexpr DType kDType = DType::kQ4_1;
  using Block = BlockQ4_1;
  static constexpr int kSub = 1;
  static constexpr int64_t kHeader = 0;
#ifdef TESSERA_Q8_X86
  static constexpr bool kPairs = true;
  static HWY_INLINE void scales8(const Block* wb, __m256* d, __m256* c) {
    *d = f16x8(wb, offsetof(Block, d));
    *c = f16x8(wb, offsetof(Block, m));
  }
  static HWY_INLINE void pair_codes(const Block& a, const Block& b, __m256i* lo, __m256i* hi) {
    nibble_pair(a.qs, b.qs, lo, hi);
  }
  template <int R>
  static HWY_INLINE void block(const Block& wb, const ActQ8* const* x, int64_t b, __m256* acc, __m256*, float* off) {
    accum<R, false, -1>(nibbles16(wb.qs), f16_splat(wb.d), x, b, acc);
    accum_off<R>(f16_scalar(wb.m), x, b, off);
  }
#endif
};

struct FmtQ5_0 : NoRowScale {  // d * (q - 16), q = nibble | 5th bit
  static constexpr DType kDType = DType::kQ5_0;
  using Block = BlockQ5_0;
  static constexpr int kSub = 1;
  static constexpr int64_t kHeader = 0;
#ifdef TESSERA_Q8_X86
  static constexpr bool kPairs = true;
  static HWY_INLINE void scales8(const Block* wb, __m256* d, __m256* c) {
    *d = f16x8(wb, offsetof(Block, d));
    *c = _mm256_mul_ps(*d, _mm256_set1_ps(-16.0f));
  }
  static HWY_INLINE void pair_codes(const Block& a, const Block& b, __m256i* lo, __m256i* hi) {
    nibble_pair(a.qs, b.qs, lo, hi);
    fifth_bit_pair(a.qh, b.qh, lo, hi);
  }
  template <int R>
  static HWY_INLINE void block(const Block& wb, const ActQ8* const* x, int64_t b, __m256* acc, __m256*, float*) {
    uint32_t qh;
    std::memcpy(&qh, wb.qh, 4);
    accum<R, false, 1>(_mm256_or_si256(nibbles16(wb.qs), bit4_from_mask(qh)), f16_splat(wb.d), x, b, acc);
  }
#endif
};

struct FmtQ5_1 : NoRowScale {  // d * q + m
  static constexpr DType kDType = DType::kQ5_1;
  using Block = BlockQ5_1;
  static constexpr int kSub = 1;
  static constexpr int64_t kHeader = 0;
#ifdef TESSERA_Q8_X86
  static constexpr bool kPairs = true;
  static HWY_INLINE void scales8(const Block* wb, __m256* d, __m256* c) {
    *d = f16x8(wb, offsetof(Block, d));
    *c = f16x8(wb, offsetof(Block, m));
  }
  static HWY_INLINE void pair_codes(const Block& a, const Block& b, __m256i* lo, __m256i* hi) {
    nibble_pair(a.qs, b.qs, lo, hi);
    fifth_bit_pair(a.qh, b.qh, lo, hi);
  }
  template <int R>
  static HWY_INLINE void block(const Block& wb, const ActQ8* const* x, int64_t b, __m256* acc, __m256*, float* off) {
    uint32_t qh;
    std::memcpy(&qh, wb.qh, 4);
    accum<R, false, -1>(_mm256_or_si256(nibbles16(wb.qs), bit4_from_mask(qh)), f16_splat(wb.d), x, b, acc);
    accum_off<R>(f16_scalar(wb.m), x, b, off);
  }
#endif
};

struct FmtMxfp4 : NoRowScale {  // 2^(e-127) * e2m1 = 2^(e-128) * (2 * e2m1)
  static constexpr DType kDType = DType::kMXFP4;
  using Block = BlockMXFP4;
  static constexpr int kSub = 1;
  static constexpr int64_t kHeader = 0;
#ifdef TESSERA_Q8_X86
  // Pair path: 2 * e2m1 + 12 as unsigned codes (0..24), the 12 removed through c = -12 * d.
  static constexpr bool kPairs = true;
  static HWY_INLINE void scales8(const Block* wb, __m256* d, __m256* c) {
    *d = _mm256_setr_ps(kE8m0Half[wb[0].e], kE8m0Half[wb[1].e], kE8m0Half[wb[2].e], kE8m0Half[wb[3].e],
                        kE8m0Half[wb[4].e], kE8m0Half[wb[5].e], kE8m0Half[wb[6].e], kE8m0Half[wb[7].e]);
    *c = _mm256_mul_ps(*d, _mm256_set1_ps(-12.0f));
  }
  static HWY_INLINE void pair_codes(const Block& a, const Block& b, __m256i* lo, __m256i* hi) {
    const __m256i lut = _mm256_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0,  //
                                         12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0);
    nibble_pair(a.qs, b.qs, lo, hi);
    *lo = _mm256_shuffle_epi8(lut, *lo);
    *hi = _mm256_shuffle_epi8(lut, *hi);
  }
  template <int R>
  static HWY_INLINE void block(const Block& wb, const ActQ8* const* x, int64_t b, __m256* acc, __m256*, float*) {
    accum<R, true, -1>(e2m1x2(nibbles16(wb.qs)), _mm256_set1_ps(kE8m0Half[wb.e]), x, b, acc);
  }
#endif
};

// W8A8: [f32 row scale][K int8]; the row scale multiplies the finished dot.
struct FmtInt8Pc {
  static constexpr DType kDType = DType::kINT8_PC;
  struct Block { int8_t qs[32]; };
  static constexpr int kSub = 1;
  static constexpr int64_t kHeader = 4;
#ifdef TESSERA_Q8_X86
  // Decode GEMV: 8 blocks per group, dx as one vector (no weight scale per block).
  static constexpr bool kGroup = true;
  static constexpr int64_t kGroupBlocks = 8;
  static HWY_INLINE void group(const Block* wb, const ActQ8* x, const ActPairs& xp, int64_t b0, __m256* acc, __m256*) {
    group_s8x8(wb, x, b0, _mm256_loadu_ps(xp.dx + b0), acc);
  }
  template <int R>
  static HWY_INLINE void block(const Block& wb, const ActQ8* const* x, int64_t b, __m256* acc, __m256*, float*) {
    accum<R, true, -1>(load32(wb.qs), _mm256_set1_ps(1.0f), x, b, acc);
  }
#endif
  static float finish(const char* row, float v) {
    float scale;
    std::memcpy(&scale, row, 4);
    return v * scale;
  }
};

// (q - zero) * d per group of G: the zero point is a float term (it varies per group). Codes
// are packed like Q4_0 over the whole group: element j low nibble of qs[j], j + G/2 high.
template <int G>
struct FmtInt4 : NoRowScale {
  static constexpr DType kDType = G == 32 ? DType::kINT4_G32 : G == 64 ? DType::kINT4_G64 : DType::kINT4_G128;
  using Block = BlockInt4<G>;
  static constexpr int kSub = G / 32;
  static constexpr int64_t kHeader = 0;
#ifdef TESSERA_Q8_X86
  // Pair path for G = 32 only (one scale per 32-element block).
  static constexpr bool kPairs = G == 32;
  static HWY_INLINE void scales8(const Block* wb, __m256* d, __m256* c) {
    // The head word: f16 d, u8 zero, a reserved byte (ignored, as the reference does).
    const __m256i h = head32x8(wb);
    *d = _mm256_cvtph_ps(_mm256_castsi256_si128(_mm256_permute4x64_epi64(
        _mm256_shuffle_epi8(h, _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1,  //
                                                0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1)),
        0x08)));
    *c = _mm256_mul_ps(*d, _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_setzero_si256(), _mm256_and_si256(_mm256_srli_epi32(h, 16), _mm256_set1_epi32(0xff)))));
  }
  static HWY_INLINE void pair_codes(const Block& a, const Block& b, __m256i* lo, __m256i* hi) {
    nibble_pair(a.qs, b.qs, lo, hi);
  }
  // Decode GEMV for G = 64/128: 256 elements (256 / G blocks) per group; the per-sub-block
  // scales d * dx and zero terms d * zero * s as vectors (lane = sub-block of the group).
  static constexpr bool kGroup = G != 32;
  static constexpr int64_t kGroupBlocks = 256 / G;
  static HWY_INLINE void group(const Block* wb, const ActQ8* x, const ActPairs& xp, int64_t b0, __m256* acc,
                               __m256* off) {
    uint64_t dd = 0, zz = 0;
    for (int j = 0; j < kGroupBlocks; ++j) {
      uint64_t dj = wb[j].d, zj = wb[j].zero;
      asm("" : "+r"(dj), "+r"(zj));  // integer registers, as in f16x8
      dd |= dj << (16 * j);
      zz |= zj << (8 * j);
    }
    const __m256i lane_block = kSub == 2 ? _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3) : _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
    const __m256 d = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<long long>(dd)))), lane_block);
    const __m256 z = _mm256_permutevar8x32_ps(
        _mm256_castps128_ps256(_mm_cvtepi32_ps(_mm_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(zz))))), lane_block);
    const __m256 sc = _mm256_mul_ps(d, _mm256_loadu_ps(xp.dx + b0));
    *off = _mm256_fnmadd_ps(_mm256_mul_ps(d, z), _mm256_loadu_ps(xp.s + b0), *off);
    constexpr int kHalf = G / 64;
#pragma GCC unroll 4
    for (int j = 0; j < kGroupBlocks; ++j) {
#pragma GCC unroll 2
      for (int c = 0; c < kHalf; ++c) {
        const __m256i v = load32(wb[j].qs + 32 * c);
        const int lo = j * kSub + c, hi = j * kSub + kHalf + c;
        const __m256i plo = dot_u8s8(low_nibbles(v), load32(x[b0 + lo].qs));
        const __m256i phi = dot_u8s8(high_nibbles(v), load32(x[b0 + hi].qs));
        acc[lo & 3] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(plo), lane_splat(sc, lo), acc[lo & 3]);
        acc[hi & 3] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(phi), lane_splat(sc, hi), acc[hi & 3]);
      }
    }
  }
  template <int R>
  static HWY_INLINE void block(const Block& wb, const ActQ8* const* x, int64_t b0, __m256* acc0, __m256* acc1,
                               float* off) {
    const __m256 d = f16_splat(wb.d);
    const float zc = -f16_scalar(wb.d) * float(wb.zero);
    if constexpr (G == 32) {
      accum<R, false, -1>(nibbles16(wb.qs), d, x, b0, acc0);
      accum_off<R>(zc, x, b0, off);
    } else {
      constexpr int kHalf = G / 64;  // sub-blocks in each nibble half
#pragma GCC unroll 2
      for (int c = 0; c < kHalf; ++c) {
        const __m256i v = load32(wb.qs + 32 * c);
        accum<R, false, -1>(low_nibbles(v), d, x, b0 + c, acc0);
        accum<R, false, -1>(high_nibbles(v), d, x, b0 + kHalf + c, acc1);
        accum_off<R>(zc, x, b0 + c, off);
        accum_off<R>(zc, x, b0 + kHalf + c, off);
      }
    }
  }
#endif
};

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
#define TESSERA_Q8_CASE(F) return q8_tile<F>(x, ldx, m0, m1, wbase, ldw, n0, n1, nb, out, ldo)
  switch (w) {
    case DType::kQ8_0: TESSERA_Q8_CASE(FmtQ8_0);
    case DType::kQ4_0: TESSERA_Q8_CASE(FmtQ4_0);
    case DType::kQ4_1: TESSERA_Q8_CASE(FmtQ4_1);
    case DType::kQ5_0: TESSERA_Q8_CASE(FmtQ5_0);
    case DType::kQ5_1: TESSERA_Q8_CASE(FmtQ5_1);
    case DType::kMXFP4: TESSERA_Q8_CASE(FmtMxfp4);
    case DType::kINT8_PC: TESSERA_Q8_CASE(FmtInt8Pc);
    case DType::kINT4_G32: TESSERA_Q8_CASE(FmtInt4<32>);
    case DType::kINT4_G64: TESSERA_Q8_CASE(FmtInt4<64>);
    case DType::kINT4_G128: TESSERA_Q8_CASE(FmtInt4<128>);
    default: return;  // gemm_q8_tile routes the other formats (matmul_kq.cpp)
  }
#undef TESSERA_Q8_CASE
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
  switch (w) {
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kNVFP4: return gemm_q8_tile_kq(w, x, ldx, m0, m1, wbase, ldw, n0, n1, nb, out, ldo);
    default: HWY_DYNAMIC_DISPATCH(GemmQ8Tile)(w, x, ldx, m0, m1, wbase, ldw, n0, n1, nb, out, ldo);
  }
}

}  // namespace tessera::cpu
#endif  // HWY_ONCE
