// Per-target vector operations of the tiled K-quant kernels (matmul_tiled.cpp's q4k_kernel and
// q6k_kernel): KV, 16 rows per vector on AVX3_DL (vpdpbusd), 8 rows per vector on AVX2 and AVX3
// (maddubs + madd); and AVX3_DL's vpdpbusd with a broadcast activation, which the Q4_0/Q4_1/Q8_0
// tile kernel uses too. Included from inside matmul_tiled.cpp's HWY_TARGET_INCLUDE pass
// (Highway's -inl.h convention); other targets get nothing from it.
#if defined(TESSERA_CPU_TILE_VEC_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef TESSERA_CPU_TILE_VEC_INL_H_
#undef TESSERA_CPU_TILE_VEC_INL_H_
#else
#define TESSERA_CPU_TILE_VEC_INL_H_
#endif

#include <cstdint>

#include "hwy/highway.h"

#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#include <immintrin.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace tessera::cpu::HWY_NAMESPACE {

#if HWY_TARGET == HWY_AVX3_DL
// acc += sum4(u8 |w| * s8 of the 4 bytes at |x|, broadcast): vpdpbusd with an embedded broadcast.
// NOTE: Highway 1.0.3's AVX3_DL target attributes lack avx512vnni (q8_dot-inl.h's NOTE), so
// _mm512_dpbusd_epi32 does not compile here; the runtime check is Highway's (AVX512-VNNI).
HWY_INLINE __m512i dpbusd_bcast(__m512i acc, __m512i w, const int8_t* x) {
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*reinterpret_cast<const int32_t*>(x)));
  return acc;
}

// The vector operations the K-quant kernels use (q4k_kernel, q6k_kernel): 16 rows per vector.
struct KV {
  using I = __m512i;
  using F = __m512;
  static constexpr int L = 16;
  static HWY_INLINE I load(const void* p) { return _mm512_loadu_si512(p); }
  static HWY_INLINE void store(void* p, I v) { _mm512_storeu_si512(p, v); }
  static HWY_INLINE I bytes(int v) { return _mm512_set1_epi8(char(v)); }
  static HWY_INLINE I and_(I a, I b) { return _mm512_and_si512(a, b); }
  static HWY_INLINE I or_(I a, I b) { return _mm512_or_si512(a, b); }
  template <int S>
  static HWY_INLINE I srl16(I a) {
    return _mm512_srli_epi16(a, S);
  }
  template <int S>
  static HWY_INLINE I sll16(I a) {
    return _mm512_slli_epi16(a, S);
  }
  // (a & m) | b in one vpternlogd (bit index a:b:m of the 0xEC table).
  static HWY_INLINE I and_or(I a, I m, I b) { return _mm512_ternarylogic_epi32(a, b, m, 0xEC); }
  // acc + the 4-code dots of every row with the 4 activation bytes at |x|.
  static HWY_INLINE I dot(I acc, I w, const int8_t* x) { return dpbusd_bcast(acc, w, x); }
  // vpdpbusd sums into int32 directly: no 16-bit partial sums (see the AVX2 KV).
  static constexpr bool kDot16 = false;
  static HWY_INLINE I dot16(I acc, I w, const int8_t* x) { return dot(acc, w, x); }
  static HWY_INLINE I widen16(I acc) { return acc; }
  static HWY_INLINE I zero() { return _mm512_setzero_si512(); }
  static HWY_INLINE I set1(int32_t v) { return _mm512_set1_epi32(v); }
  static HWY_INLINE I add(I a, I b) { return _mm512_add_epi32(a, b); }
  static HWY_INLINE I mullo(I a, I b) { return _mm512_mullo_epi32(a, b); }
  static HWY_INLINE I u8(const uint8_t* p) {
    return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static HWY_INLINE I s8(const int8_t* p) {
    return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static HWY_INLINE F f16(const void* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static HWY_INLINE F cvt(I a) { return _mm512_cvtepi32_ps(a); }
  static HWY_INLINE F fzero() { return _mm512_setzero_ps(); }
  static HWY_INLINE F fset1(float v) { return _mm512_set1_ps(v); }
  static HWY_INLINE F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static HWY_INLINE F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static HWY_INLINE F fnma(F a, F b, F c) { return _mm512_fnmadd_ps(a, b, c); }
  static HWY_INLINE void fstore(float* p, F v) { _mm512_storeu_ps(p, v); }
};

#elif HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3
// The vector operations the K-quant kernels use (q4k_kernel, q6k_kernel): 8 rows per vector, the
// 4-code dot as maddubs + madd.
struct KV {
  using I = __m256i;
  using F = __m256;
  static constexpr int L = 8;
  static HWY_INLINE I load(const void* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static HWY_INLINE void store(void* p, I v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }
  static HWY_INLINE I bytes(int v) { return _mm256_set1_epi8(char(v)); }
  static HWY_INLINE I and_(I a, I b) { return _mm256_and_si256(a, b); }
  static HWY_INLINE I or_(I a, I b) { return _mm256_or_si256(a, b); }
  template <int S>
  static HWY_INLINE I srl16(I a) {
    return _mm256_srli_epi16(a, S);
  }
  template <int S>
  static HWY_INLINE I sll16(I a) {
    return _mm256_slli_epi16(a, S);
  }
  static HWY_INLINE I and_or(I a, I m, I b) { return _mm256_or_si256(_mm256_and_si256(a, m), b); }
  static HWY_INLINE I dot(I acc, I w, const int8_t* x) {
    const __m256i p = _mm256_maddubs_epi16(w, _mm256_set1_epi32(load_i32(x)));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
  }
  // The same dot left as 16-bit pair sums (maddubs + add, no madd): for codes of at most 4 bits,
  // where a lane's 2 products per step stay under 2 * 15 * 127, 8 steps under 2^15; widen16 then
  // sums each row's two lanes into int32 once.
  static constexpr bool kDot16 = true;
  static HWY_INLINE I dot16(I acc, I w, const int8_t* x) {
    return _mm256_add_epi16(acc, _mm256_maddubs_epi16(w, _mm256_set1_epi32(load_i32(x))));
  }
  static HWY_INLINE I widen16(I acc) { return _mm256_madd_epi16(acc, _mm256_set1_epi16(1)); }
  static HWY_INLINE I zero() { return _mm256_setzero_si256(); }
  static HWY_INLINE I set1(int32_t v) { return _mm256_set1_epi32(v); }
  static HWY_INLINE I add(I a, I b) { return _mm256_add_epi32(a, b); }
  static HWY_INLINE I mullo(I a, I b) { return _mm256_mullo_epi32(a, b); }
  static HWY_INLINE I u8(const uint8_t* p) {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  }
  static HWY_INLINE I s8(const int8_t* p) {
    return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  }
  static HWY_INLINE F f16(const void* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static HWY_INLINE F cvt(I a) { return _mm256_cvtepi32_ps(a); }
  static HWY_INLINE F fzero() { return _mm256_setzero_ps(); }
  static HWY_INLINE F fset1(float v) { return _mm256_set1_ps(v); }
  static HWY_INLINE F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static HWY_INLINE F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static HWY_INLINE F fnma(F a, F b, F c) { return _mm256_fnmadd_ps(a, b, c); }
  static HWY_INLINE void fstore(float* p, F v) { _mm256_storeu_ps(p, v); }
};

#endif

}  // namespace tessera::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // TESSERA_CPU_TILE_VEC_INL_H_
