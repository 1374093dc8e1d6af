// Shape buckets: the sizes a step is padded to so that recurring steps share one executable
// (core/exec/executor.h). A decode's block-table width grows by one block every block_size
// tokens; rounded up to a bucket it changes only at the bucket edges.
#pragma once
#include <cstdint>

namespace tessera {

// |n| rounded up to the next bucket: powers of two up to 64, then multiples of 64. Never less
// than |n|, and at most 2x it (1.1x past 640).
constexpr int32_t bucket_up(int32_t n) {
  if (n <= 1) return 1;
  if (n <= 64) {
    int32_t b = 1;
    while (b < n) b *= 2;
    return b;
  }
  return (n + 63) / 64 * 64;
}

}  // namespace tessera
