#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "quant/half.h"

namespace tessera {
namespace {

// Every one of the 65536 half values survives f16 -> f32 -> f16 (NaNs stay NaN).
TEST(Half, Fp16RoundTripsEveryValue) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = fp16_to_f32(uint16_t(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(fp16_to_f32(f32_to_fp16(f)))) << h;
      continue;
    }
    EXPECT_EQ(f32_to_fp16(f), h) << "half 0x" << std::hex << h;
  }
}

// f32 -> f16 rounds to nearest even: compare with exhaustive search over neighbours.
TEST(Half, Fp16RoundsToNearestEven) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mag(-20.0f, 16.0f);
  for (int i = 0; i < 200000; ++i) {
    const float x = std::ldexp(1.0f + float(rng() % 1000000) / 1e6f, int(mag(rng))) * ((rng() & 1) ? -1.0f : 1.0f);
    const uint16_t h = f32_to_fp16(x);
    const float y = fp16_to_f32(h);
    // No other half is strictly closer.
    const float up = fp16_to_f32(uint16_t(h + 1)), down = fp16_to_f32(uint16_t(h - 1));
    if (!std::isinf(y)) {
      EXPECT_LE(std::fabs(y - x), std::fabs(up - x)) << x;
      if ((h & 0x7fff) != 0) {
        EXPECT_LE(std::fabs(y - x), std::fabs(down - x)) << x;
      }
    }
  }
  EXPECT_EQ(f32_to_fp16(65520.0f), 0x7c00);       // rounds up to inf
  EXPECT_EQ(f32_to_fp16(65519.0f), 0x7bff);       // largest finite
  EXPECT_EQ(f32_to_fp16(5.960464477539063e-8f), 0x0001);  // smallest subnormal
  EXPECT_EQ(f32_to_fp16(2.98023223876953125e-8f), 0x0000);  // exactly half of it: ties to even (0)
}

TEST(Half, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3f808000u)), 0x3f80);  // tie -> even
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3f818000u)), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3f808001u)), 0x3f81);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = bf16_to_f32(uint16_t(b));
    if (!std::isnan(f)) {
      EXPECT_EQ(f32_to_bf16(f), b);
    }
  }
}

}  // namespace
}  // namespace tessera
