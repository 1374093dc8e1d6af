#include <gtest/gtest.h>

#include <cmath>

#include "quant/dtype.h"
#include "quant/ggml_blocks.h"
#include "quant/half.h"
#include "tests/support/test_support.h"

namespace tessera {
namespace {

TEST(DType, TableIsConsistent) {
  for (int i = 0; i < kNumDTypes; ++i) {
    const auto& tr = dtype_traits(DType(i));
    EXPECT_EQ(int(tr.dtype), i);
    EXPECT_EQ(dtype_from_name(tr.name), tr.dtype);
    if (tr.gguf_type >= 0) {
      EXPECT_EQ(dtype_from_gguf(tr.gguf_type), tr.dtype);
    }
    EXPECT_GT(tr.block_bytes, 0);
  }
  EXPECT_EQ(dtype_row_bytes(DType::kQ4_0, 64), 36);
  EXPECT_EQ(dtype_row_bytes(DType::kQ4_1, 32), 20);
  EXPECT_EQ(dtype_row_bytes(DType::kQ8_0, 96), 102);
  EXPECT_FALSE(dtype_row_check(DType::kQ4_0, 33).empty());
  EXPECT_TRUE(dtype_row_check(DType::kQ4_0, 64).empty());
  EXPECT_FALSE(dtype_from_name("q9_9").has_value());
  EXPECT_FALSE(dtype_from_gguf(9999).has_value());
}

// Round trip error stays within each format's bound: |x - deq(q(x))| <= scale/2 (+ f16 rounding
// of the scale), on random and outlier-heavy data.
TEST(DType, BlockFormatsRoundTripWithinBound) {
  testing::Rng rng(11);
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1}) {
    for (int trial = 0; trial < 2; ++trial) {
      const int64_t n = 32 * 64;
      const auto x = trial == 0 ? testing::random_floats(rng, n) : testing::outlier_floats(rng, n);
      const auto& tr = dtype_traits(t);
      std::vector<uint8_t> q(static_cast<size_t>(dtype_row_bytes(t, n)));
      std::vector<float> y(static_cast<size_t>(n));
      tr.quantize_row(x.data(), q.data(), n);
      tr.dequantize_row(q.data(), y.data(), n);
      for (int64_t b = 0; b < n / 32; ++b) {
        float lo = x[size_t(b * 32)], hi = lo, amax = 0.0f;
        for (int j = 0; j < 32; ++j) {
          lo = std::min(lo, x[size_t(b * 32 + j)]);
          hi = std::max(hi, x[size_t(b * 32 + j)]);
          amax = std::max(amax, std::fabs(x[size_t(b * 32 + j)]));
        }
        const float step = t == DType::kQ8_0 ? amax / 127.0f : t == DType::kQ4_0 ? amax / 8.0f : (hi - lo) / 15.0f;
        // Q4_0's asymmetric range can clamp one code at the top: allow one full step there.
        const float bound = (t == DType::kQ4_0 ? 1.0f : 0.5f) * step * 1.01f + amax * 2e-3f;
        for (int j = 0; j < 32; ++j) {
          const size_t i = size_t(b * 32 + j);
          ASSERT_LE(std::fabs(x[i] - y[i]), bound) << dtype_name(t) << " block " << b << " elem " << j;
        }
      }
    }
  }
}

// Known bytes: a block of 0..31 quantised to Q8_0 has scale 31/127 and q[j] = round(j*127/31).
TEST(DType, Q8_0KnownBlock) {
  float x[32];
  for (int j = 0; j < 32; ++j) x[j] = float(j);
  BlockQ8_0 b;
  quantize_row_q8_0(x, &b, 32);
  EXPECT_EQ(b.d, f32_to_fp16(31.0f / 127.0f));
  for (int j = 0; j < 32; ++j) EXPECT_EQ(b.qs[j], int8_t(std::roundf(float(j) * (127.0f / 31.0f))));
}

}  // namespace
}  // namespace tessera
