// AMX prefill GEMM (matmul_amx.h). Work split: each thread takes a contiguous range of 32-column
// weight panels and decodes a group of them (gemm_amx: up to kAmxGroupBytes) for all of K into
// the tile unit's B layout (bf16 pairs: B row i of a K-block holds, for each of 16 columns n,
// w[n][2i] and w[n][2i+1] in one dword); then, chunk by chunk of activation rows, every 32-row
// strip runs the whole K of each panel through four f32 accumulator tiles (2 x 2 tiles of 16 x 16)
// and stores them once. The activations are converted to bf16 once per call, in the A tiles'
// order (row_to_a; zero rows past M).
//
// Tiles: 0-3 accumulators C[row half][column half], 4-5 A (activation rows 0-15, 16-31 of the
// strip), 6-7 B (columns 0-15, 16-31 of the panel). Every tile is 16 rows of 64 bytes.
//
// Weight decode: the tiled formats (tile_layout.h) already hold 16 rows side by side, 4 codes of
// a row per dword lane, so a 64-byte code chunk becomes two B rows with a few conversions
// (chunk_to_b); every other block format goes through its scalar dequantize_row and a 16 x 16
// dword transpose (decode_rows).
#include "backends/cpu/matmul_amx.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backends/cpu/kernels.h"
#include "backends/cpu/tile_layout.h"
#include "hwy/targets.h"
#include "quant/dtype.h"

#if defined(__x86_64__) && defined(__linux__)
// NOTE: GCC 12's AVX-512 intrinsics start from `__m512 __Y = __Y;` (_mm512_undefined_*), which
// -Wmaybe-uninitialized reports wherever they are inlined under a target attribute.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define TESSERA_AMX 1
#else
#define TESSERA_AMX 0
#endif

namespace tessera::cpu {

#if TESSERA_AMX
namespace {

#define AMX_TARGET \
  __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma,f16c")))

// Linux's arch_prctl codes for the AMX tile data state (arch/x86/include/uapi/asm/prctl.h).
constexpr int kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;

bool request_tile_state() { return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0; }

// ldtilecfg's 64-byte operand: palette 1, tiles 0-7 of 16 rows x 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

// NOTE: GCC 12's _tile_loadconfig gives its asm an 8-byte memory operand, so the compiler may
// drop the stores to the rest of a local config before ldtilecfg reads it (the tiles then stay
// unconfigured and the first tile instruction faults); this asm names all 64 bytes.
AMX_TARGET void configure_tiles() {
  static const TileConfig cfg = [] {
    TileConfig c;
    for (int t = 0; t < 8; ++t) c.colsb[t] = 64, c.rows[t] = 16;
    return c;
  }();
  asm volatile("ldtilecfg %0" : : "m"(cfg));
}

// The per-row affine map v = a * code + b of a tile block (lane r = row r).
struct Affine {
  __m512 a, b;
};

// Two B rows from 4 codes per row: lane r of |v| holds row r's codes k..k+3 in bits 8i.. of
// byte i (masked by kMask); B row k/2 gets the pairs (k, k+1), row k/2 + 1 the pairs (k+2, k+3).
// Each pair of codes becomes two f32 vectors (one per code), rounded to bf16 together and
// interleaved by one word permute.
template <int kMask>
AMX_TARGET inline void chunk_to_b(__m512i v, const Affine& f, char* dst) {
  alignas(64) static constexpr uint16_t kInterleave[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                           8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i idx = _mm512_load_si512(kInterleave), mask = _mm512_set1_epi32(kMask);
#pragma GCC unroll 2
  for (int j = 0; j < 2; ++j) {
    const __m512i e0 = _mm512_and_si512(_mm512_srli_epi32(v, 16 * j), mask);
    const __m512i e1 = _mm512_and_si512(_mm512_srli_epi32(v, 16 * j + 8), mask);
    const __m512 f0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(e0), f.a, f.b);
    const __m512 f1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(e1), f.a, f.b);
    const __m512bh h = _mm512_cvtne2ps_pbh(f1, f0);  // words 0-15: f0's rows, 16-31: f1's
    _mm512_storeu_si512(dst + 64 * j, _mm512_permutexvar_epi16(idx, reinterpret_cast<const __m512i&>(h)));
  }
}

AMX_TARGET inline __m512 f16x16(const char* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
AMX_TARGET inline __m512 u8x16(const uint8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
AMX_TARGET inline __m512 s8x16(const int8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}

// B tiles of one 16-row tile of a tiled weight for K-blocks [0, nkb): K-block kb lands at
// dst + kb * dst_stride. Layouts: matmul_tiled.cpp's header comments.
template <class F>
AMX_TARGET void decode_tile(const char* tile, int64_t nkb, char* dst, int64_t dst_stride) {
  constexpr int64_t TB = kTileBlockBytes<F>;
  for (int64_t kb = 0; kb < nkb; ++kb) {
    const char* blk = tile + kb * TB;
    char* b = dst + kb * dst_stride;
    const __m512 d = f16x16(blk);
    if constexpr (F::kNibbles) {
      const Affine f{d, F::kMin ? f16x16(blk + 32) : _mm512_mul_ps(d, _mm512_set1_ps(-8.0f))};
      for (int c = 0; c < 4; ++c) {
        const __m512i w = _mm512_loadu_si512(blk + F::kHeader + 64 * c);
        chunk_to_b<0x0f>(w, f, b + 128 * c);
        chunk_to_b<0x0f>(_mm512_srli_epi32(w, 4), f, b + 512 + 128 * c);
      }
    } else {  // Q8_0: u8 codes + 128
      const Affine f{d, _mm512_mul_ps(d, _mm512_set1_ps(-128.0f))};
      for (int c = 0; c < 8; ++c) chunk_to_b<0xff>(_mm512_loadu_si512(blk + F::kHeader + 64 * c), f, b + 128 * c);
    }
  }
}

// The 6-bit scales and mins of a Q4_K tile block as bytes: sc[j][r] at 16j + r, m at 128 + 16j + r.
AMX_TARGET inline void q4k_scales(const char* p, uint8_t* out) {
  const __m512i p0 = _mm512_loadu_si512(p), p1 = _mm512_loadu_si512(p + 64), p2 = _mm512_loadu_si512(p + 128);
  const __m512i m4 = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
  const __m512i lo0 = _mm512_and_si512(p0, m4), hi0 = _mm512_and_si512(_mm512_srli_epi16(p0, 4), m4);
  const __m512i lo1 = _mm512_and_si512(p1, m4), hi1 = _mm512_and_si512(_mm512_srli_epi16(p1, 4), m4);
  _mm512_storeu_si512(out, _mm512_or_si512(lo0, _mm512_and_si512(_mm512_slli_epi16(p2, 4), m30)));
  _mm512_storeu_si512(out + 64, _mm512_or_si512(hi0, _mm512_and_si512(_mm512_slli_epi16(p2, 2), m30)));
  _mm512_storeu_si512(out + 128, _mm512_or_si512(lo1, _mm512_and_si512(p2, m30)));
  _mm512_storeu_si512(out + 192, _mm512_or_si512(hi1, _mm512_and_si512(_mm512_srli_epi16(p2, 2), m30)));
}

AMX_TARGET void decode_tile_q4k(const char* tile, int64_t nsb, char* dst, int64_t dst_stride) {
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const char* blk = tile + sb * TileQ4_K::kBlock;
    alignas(64) uint8_t sc[256];
    q4k_scales(blk + 64, sc);
    const __m512 d = f16x16(blk), dmin = f16x16(blk + 32);
    for (int j = 0; j < 8; ++j) {
      const int c = j / 2, h = j % 2;
      const Affine f{_mm512_mul_ps(d, u8x16(sc + 16 * j)),
                     _mm512_mul_ps(_mm512_sub_ps(_mm512_setzero_ps(), dmin), u8x16(sc + 128 + 16 * j))};
      char* b = dst + (8 * sb + j) * dst_stride;
      for (int k = 0; k < 8; ++k) {
        const __m512i w = _mm512_loadu_si512(blk + 256 + 64 * (8 * c + k));
        chunk_to_b<0x0f>(h ? _mm512_srli_epi32(w, 4) : w, f, b + 128 * k);
      }
    }
  }
}

AMX_TARGET void decode_tile_q6k(const char* tile, int64_t nsb, char* dst, int64_t dst_stride) {
  const __m512i m4 = _mm512_set1_epi8(0x0f), m3 = _mm512_set1_epi8(0x03);
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const char* blk = tile + sb * TileQ6_K::kBlock;
    const auto* sc = reinterpret_cast<const int8_t*>(blk);
    const __m512 d = f16x16(tile + nsb * TileQ6_K::kBlock + 32 * sb);
    for (int j = 0; j < 8; ++j) {
      const __m512 a0 = _mm512_mul_ps(d, s8x16(sc + 32 * j)), a1 = _mm512_mul_ps(d, s8x16(sc + 32 * j + 16));
      const __m512 m32 = _mm512_set1_ps(-32.0f);
      const Affine f0{a0, _mm512_mul_ps(a0, m32)}, f1{a1, _mm512_mul_ps(a1, m32)};
      const char* sub = blk + 256 + 384 * j;
      const __m512i qh0 = _mm512_loadu_si512(sub + 256), qh1 = _mm512_loadu_si512(sub + 320);
      char* b = dst + (8 * sb + j) * dst_stride;
      for (int c = 0; c < 4; ++c) {
        const __m512i w = _mm512_loadu_si512(sub + 64 * c);
        const __m128i sh = _mm_cvtsi32_si128(2 * c);
        const __m512i h0 = _mm512_slli_epi16(_mm512_and_si512(_mm512_srl_epi16(qh0, sh), m3), 4);
        const __m512i h1 = _mm512_slli_epi16(_mm512_and_si512(_mm512_srl_epi16(qh1, sh), m3), 4);
        chunk_to_b<0xff>(_mm512_or_si512(_mm512_and_si512(w, m4), h0), f0, b + 128 * c);
        chunk_to_b<0xff>(_mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(w, 4), m4), h1), f1, b + 512 + 128 * c);
      }
    }
  }
}

// B tiles of 16 weight rows of any format: each row dequantised to f32 by the format's scalar
// reference, rounded to bf16 (one dword = one pair), and the 16 x 16 dwords of a K-block
// transposed into B rows.
AMX_TARGET void decode_rows(DType w, const char* row0, int64_t row_stride, int64_t K, char* dst, int64_t dst_stride) {
  const DequantizeRowFn deq = dtype_traits(w).dequantize_row;
  float* f = thread_scratch(7, 16 * K);
  for (int r = 0; r < 16; ++r) deq(row0 + r * row_stride, f + r * K, K);
  alignas(64) uint32_t t[16][16];
  const __m512i idx = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                         _mm512_set1_epi32(16));
  for (int64_t kb = 0; kb < K / 32; ++kb) {
    for (int r = 0; r < 16; ++r) {
      const float* p = f + r * K + 32 * kb;
      const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(p + 16), _mm512_loadu_ps(p));
      _mm512_store_si512(t[r], reinterpret_cast<const __m512i&>(v));
    }
    char* b = dst + kb * dst_stride;
    for (int i = 0; i < 16; ++i)
      _mm512_storeu_si512(b + 64 * i, _mm512_i32gather_epi32(idx, &t[0][i], 4));
  }
}

// The B panel of NT (1 or 2) 16-column tiles starting at weight column |n0|: K-block kb, tile p
// at panel + (kb * NT + p) * 1024.
template <int NT>
AMX_TARGET void decode_panel(DType w, const char* base, int64_t row_stride, bool tiled, int64_t n0, int64_t K,
                             char* panel) {
  const int64_t nb = K / 32;
  for (int p = 0; p < NT; ++p) {
    const int64_t t = n0 / 16 + p;
    char* dst = panel + 1024 * p;
    const int64_t stride = 1024 * NT;
    if (!tiled) {
      decode_rows(w, base + (n0 + 16 * p) * row_stride, row_stride, K, dst, stride);
      continue;
    }
    switch (w) {
      case DType::kQ4_0: decode_tile<TileQ4_0>(base + t * tile_stride<TileQ4_0>(nb), nb, dst, stride); break;
      case DType::kQ4_1: decode_tile<TileQ4_1>(base + t * tile_stride<TileQ4_1>(nb), nb, dst, stride); break;
      case DType::kQ8_0: decode_tile<TileQ8_0>(base + t * tile_stride<TileQ8_0>(nb), nb, dst, stride); break;
      case DType::kQ4_K: decode_tile_q4k(base + t * tile_stride<TileQ4_K>(nb), nb / 8, dst, stride); break;
      case DType::kQ6_K: decode_tile_q6k(base + t * tile_stride<TileQ6_K>(nb), nb / 8, dst, stride); break;
      default: break;  // amx_supports admits only these as tiled
    }
  }
}

// Bytes of decoded weights per thread group and of bf16 activations per row chunk (gemm_amx).
constexpr int64_t kAmxGroupBytes = int64_t(4) << 20, kAmxChunkBytes = int64_t(512) << 10;
// K-blocks ahead that strip() prefetches its A and B tiles.
constexpr int64_t kAmxPrefetch = 2;

// C[32 x 16 NT] of the strip whose A tiles start at |a| (two 1 KB tiles per K-block) against
// K-blocks [0, nkb) of the panel, stored at |out| (row stride |ldo| floats).
template <int NT>
AMX_TARGET void strip(const char* a, const char* panel, int64_t nkb, float* out, int64_t ldo) {
  const int64_t ldc = ldo * 4;
  _tile_zero(0);
  _tile_zero(2);
  if constexpr (NT == 2) {
    _tile_zero(1);
    _tile_zero(3);
  }
  for (int64_t kb = 0; kb < nkb; ++kb) {
    // Tiles are not renamed: a tile load waits for the products that read its previous
    // contents, so a load that misses L1 stalls the unit. Fetch the next K-blocks ahead.
    const char* pa = a + 2048 * (kb + kAmxPrefetch);
    const char* pb = panel + (kb + kAmxPrefetch) * 1024 * NT;
#pragma GCC unroll 32
    for (int l = 0; l < 32; ++l) _mm_prefetch(pa + 64 * l, _MM_HINT_T0);
#pragma GCC unroll 32
    for (int l = 0; l < 16 * NT; ++l) _mm_prefetch(pb + 64 * l, _MM_HINT_T0);
    _tile_loadd(4, a + 2048 * kb, 64);
    _tile_loadd(5, a + 2048 * kb + 1024, 64);
    _tile_loadd(6, panel + kb * 1024 * NT, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(2, 5, 6);
    if constexpr (NT == 2) {
      _tile_loadd(7, panel + kb * 1024 * NT + 1024, 64);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
  _tile_stored(0, out, ldc);
  _tile_stored(2, out + 16 * ldo, ldc);
  if constexpr (NT == 2) {
    _tile_stored(1, out + 16, ldc);
    _tile_stored(3, out + 16 * ldo + 16, ldc);
  }
}

// Rows [m0, m1) of the output's panel columns (m0 a multiple of 32, m1 <= M).
template <int NT>
AMX_TARGET void panel_strips(const char* a, int64_t m0, int64_t m1, int64_t K, const char* panel, float* out,
                             int64_t ldo) {
  const int64_t nkb = K / 32, full = m0 + (m1 - m0) / 32 * 32;
  for (int64_t m = m0; m < full; m += 32) strip<NT>(a + m / 32 * nkb * 2048, panel, nkb, out + m * ldo, ldo);
  if (full < m1) {  // the last rows through a 32 x 32 buffer (A's rows past M are zero)
    alignas(64) float tail[32 * 32];
    strip<NT>(a + full / 32 * nkb * 2048, panel, nkb, tail, 32);
    for (int64_t r = 0; r < m1 - full; ++r) std::memcpy(out + (full + r) * ldo, tail + 32 * r, size_t(16 * NT) * 4);
  }
}

// Activation row |m| (K f32) to bf16 in the A layout: per 32-row strip and K-block, two 1 KB
// tiles (rows 0-15, 16-31) of 16 rows x 32 bf16, so that a tile loads as 1 KB in a row.
AMX_TARGET void row_to_a(const float* src, int64_t m, int64_t K, char* a) {
  char* dst = a + m / 32 * (K / 32) * 2048 + (m % 32) / 16 * 1024 + (m % 16) * 64;
  for (int64_t kb = 0; kb < K / 32; ++kb) {
    const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + 32 * kb + 16), _mm512_loadu_ps(src + 32 * kb));
    _mm512_storeu_si512(dst + 2048 * kb, reinterpret_cast<const __m512i&>(v));
  }
}

AMX_TARGET void zero_row_a(int64_t m, int64_t K, char* a) {
  char* dst = a + m / 32 * (K / 32) * 2048 + (m % 32) / 16 * 1024 + (m % 16) * 64;
  for (int64_t kb = 0; kb < K / 32; ++kb) _mm512_storeu_si512(dst + 2048 * kb, _mm512_setzero_si512());
}

AMX_TARGET void release_tiles() { _tile_release(); }

bool cpu_has_amx() {
  __builtin_cpu_init();
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  const bool amx_bf16 = (edx >> 22) & 1, amx_tile = (edx >> 24) & 1;
  return amx_bf16 && amx_tile && __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl");
}

}  // namespace

bool amx_present() {
  static const bool present = cpu_has_amx();
  return present;
}

namespace {
// Off unless TESSERA_CPU_AMX=1 (matmul_amx.h says why).
std::atomic<bool> g_amx_enabled{[] {
  const char* e = std::getenv("TESSERA_CPU_AMX");
  return e && std::strcmp(e, "1") == 0;
}()};
}  // namespace

void amx_set_enabled(bool on) { g_amx_enabled.store(on, std::memory_order_relaxed); }

bool amx_usable() {
  if (!g_amx_enabled.load(std::memory_order_relaxed)) return false;
  static const bool granted = amx_present() && request_tile_state();
  return granted && (hwy::SupportedTargets() & HWY_AVX3_DL) != 0;
}

bool amx_supports(DType w, bool tiled, int64_t N, int64_t K) {
  if (N <= 0 || K <= 0 || N % 16 != 0 || K % 32 != 0) return false;
  if (tiled)
    return w == DType::kQ4_0 || w == DType::kQ4_1 || w == DType::kQ8_0 || w == DType::kQ4_K || w == DType::kQ6_K;
  const DTypeTraits& t = dtype_traits(w);
  return t.is_quantized && t.dequantize_row != nullptr && K % t.block_elems == 0;
}

void gemm_amx(ThreadPool& pool, const Tensor& x, int64_t M, DType w, const char* base, int64_t row_stride, bool tiled,
              int64_t N, int64_t K, float* out, int64_t ldo) {
  // The bf16 activations in the A layout (row_to_a), kept per calling thread between calls.
  const int64_t Mp = (M + 31) / 32 * 32;
  thread_local std::vector<char> a_buf;
  a_buf.resize(size_t(Mp * K * 2 + 64));
  char* a = a_buf.data() + (64 - reinterpret_cast<uintptr_t>(a_buf.data()) % 64) % 64;
  const int64_t grain = std::max<int64_t>(1, kParallelMinElems / K);
  pool.parallel_for(Mp, grain, [&](int64_t m0, int64_t m1, int) {
    float* tmp = thread_scratch(0, K);
    for (int64_t m = m0; m < m1; ++m) {
      if (m < M)
        row_to_a(load_row_f32(x, m, tmp), m, K, a);
      else
        zero_row_a(m, K, a);
    }
  });
  // 32-column panels, then a last 16-column one when N is an odd number of tiles.
  const int64_t np = N / 32, tail = N % 32 ? 1 : 0;
  // Blocking (docs/bench.md): the tile unit needs both operands in L2 (from L3 a strip runs at a
  // third of the speed), so each thread decodes a group of panels (up to kAmxGroupBytes of B, in
  // L3), then passes it row chunk by row chunk, each chunk's A (up to kAmxChunkBytes) staying in
  // L2 while every panel of the group streams past it.
  const int64_t panel_bytes = K / 32 * 2048;
  const int64_t group = std::clamp<int64_t>(kAmxGroupBytes / panel_bytes, 1, 64);
  const int64_t mc = std::max<int64_t>(32, kAmxChunkBytes / (2 * K) / 32 * 32);
  pool.parallel_for(np + tail, 1, [&](int64_t p0, int64_t p1, int) {
    thread_local std::vector<char> buf;
    buf.resize(size_t(std::min(group, p1 - p0) * panel_bytes + 64));
    char* panels = buf.data() + (64 - reinterpret_cast<uintptr_t>(buf.data()) % 64) % 64;
    configure_tiles();
    for (int64_t g0 = p0; g0 < p1; g0 += group) {
      const int64_t g1 = std::min(p1, g0 + group);
      for (int64_t p = g0; p < g1; ++p) {
        char* panel = panels + (p - g0) * panel_bytes;
        if (p < np)
          decode_panel<2>(w, base, row_stride, tiled, 32 * p, K, panel);
        else
          decode_panel<1>(w, base, row_stride, tiled, 32 * p, K, panel);
      }
      for (int64_t m0 = 0; m0 < M; m0 += mc)
        for (int64_t p = g0; p < g1; ++p) {
          const char* panel = panels + (p - g0) * panel_bytes;
          if (p < np)
            panel_strips<2>(a, m0, std::min(M, m0 + mc), K, panel, out + 32 * p, ldo);
          else
            panel_strips<1>(a, m0, std::min(M, m0 + mc), K, panel, out + 32 * p, ldo);
        }
    }
    release_tiles();
  });
}

#else  // no AMX on this architecture or OS

bool amx_present() { return false; }
bool amx_usable() { return false; }
void amx_set_enabled(bool) {}
bool amx_supports(DType, bool, int64_t, int64_t) { return false; }
void gemm_amx(ThreadPool&, const Tensor&, int64_t, DType, const char*, int64_t, bool, int64_t, int64_t, float*,
              int64_t) {}

#endif

}  // namespace tessera::cpu
