// The streaming read loop that sets the read-bandwidth baseline of the GEMV figures: 256-bit
// loads into four independent accumulators (the fastest of the variants measured, docs/quant.md).
// One place for it, so that every GEMV figure of `tessera-bench gemv` divides by the same loop.
#pragma once

#include <cstdint>

#if defined(__x86_64__)
#include <immintrin.h>

namespace tessera::bench {

// Sums n floats of p (n a multiple of 32, p 32-byte aligned); the result only keeps the loads alive.
__attribute__((target("avx2"))) inline float read_avx2(const float* p, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = 0; i + 32 <= n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
  }
  float out[8];
  _mm256_storeu_ps(out, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  return out[0] + out[7];
}

}  // namespace tessera::bench

#endif
