// FP8 E4M3 (FN) and E5M2: all 256 codes of each against ml_dtypes, round-to-nearest-even encode
// (ties included) against ml_dtypes, saturation, and the row-scaled weight format.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "quant/dtype.h"
#include "quant/fp8.h"
#include "tests/quant/golden.h"
#include "tests/support/test_support.h"

namespace tessera {
namespace {

struct Fp8Case {
  const char* name;
  float (*decode)(uint8_t);
  uint8_t (*encode)(float);
  uint32_t decode_tag, encode_tag;
  uint8_t max_code;
  float max_value;
  DType dtype;
};
const Fp8Case kCases[] = {
    {"e4m3", fp8_e4m3_to_f32, f32_to_fp8_e4m3, 1, 3, 0x7e, kFP8E4M3Max, DType::kFP8_E4M3},
    {"e5m2", fp8_e5m2_to_f32, f32_to_fp8_e5m2, 2, 4, 0x7b, kFP8E5M2Max, DType::kFP8_E5M2},
};

TEST(Fp8, Every256CodeDecodesLikeMlDtypes) {
  for (const auto& c : kCases) {
    uint32_t count = 0;
    std::string err;
    const auto bytes = testing::fp8_golden_section(c.decode_tag, &count, &err);
    ASSERT_TRUE(err.empty()) << err;
    ASSERT_EQ(count, 256u);
    int nans = 0, infs = 0;
    for (int code = 0; code < 256; ++code) {
      float want;
      std::memcpy(&want, bytes.data() + 4 * code, 4);
      const float got = c.decode(uint8_t(code));
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << c.name << " code " << code;
        ++nans;
        continue;
      }
      infs += std::isinf(got) ? 1 : 0;
      EXPECT_EQ(std::memcmp(&got, &want, 4), 0) << c.name << " code " << code << ": " << got << " vs " << want;
    }
    // E4M3FN: one NaN per sign, no infinities. E5M2: 3 NaNs and one infinity per sign.
    EXPECT_EQ(nans, c.max_code == 0x7e ? 2 : 6) << c.name;
    EXPECT_EQ(infs, c.max_code == 0x7e ? 0 : 2) << c.name;
    EXPECT_EQ(c.decode(c.max_code), c.max_value);
  }
}

// ml_dtypes rounds to nearest even: the golden set has every code value, every midpoint between
// neighbours (exact ties), their f32 neighbours and log-uniform random values, all within range.
TEST(Fp8, EncodeIsRoundToNearestEvenLikeMlDtypes) {
  for (const auto& c : kCases) {
    uint32_t count = 0;
    std::string err;
    const auto bytes = testing::fp8_golden_section(c.encode_tag, &count, &err);
    ASSERT_TRUE(err.empty()) << err;
    ASSERT_GT(count, 4000u);
    for (uint32_t i = 0; i < count; ++i) {
      float x;
      std::memcpy(&x, bytes.data() + 4 * i, 4);
      const uint8_t want = bytes[4 * size_t(count) + i];
      ASSERT_EQ(int(c.encode(x)), int(want)) << c.name << " x = " << x;
    }
  }
}

TEST(Fp8, EncodeSaturatesAndKeepsNaN) {
  const float inf = std::numeric_limits<float>::infinity();
  for (const auto& c : kCases) {
    for (float x : {c.max_value * 1.01f, c.max_value * 2.0f, 1e30f, inf}) {
      EXPECT_EQ(c.encode(x), c.max_code) << c.name << " " << x;
      EXPECT_EQ(c.encode(-x), 0x80 | c.max_code) << c.name << " " << -x;
    }
    EXPECT_TRUE(std::isnan(c.decode(c.encode(std::numeric_limits<float>::quiet_NaN()))));
    EXPECT_EQ(c.encode(-0.0f), 0x80);
  }
  // Ties to even in the subnormal range: E4M3's smallest step is 2^-9.
  EXPECT_EQ(f32_to_fp8_e4m3(std::ldexp(1.0f, -10)), 0x00);      // 0.5 step -> 0
  EXPECT_EQ(f32_to_fp8_e4m3(std::ldexp(3.0f, -10)), 0x02);      // 1.5 steps -> 2
  EXPECT_EQ(f32_to_fp8_e4m3(std::ldexp(15.0f, -10)), 0x08);     // 7.5 steps -> 8 = smallest normal
  EXPECT_EQ(f32_to_fp8_e5m2(std::ldexp(1.0f, -17)), 0x00);
}

// Row layout: [f32 scale = amax/max][K codes]. Error: relative half ulp (2^-4 for E4M3's 3
// mantissa bits, 2^-3 for E5M2) of |x|, or half the subnormal step (2^-10 / 2^-17) times the
// scale, whichever is larger.
TEST(Fp8, RowRoundTripWithinBound) {
  testing::Rng rng(14);
  for (const auto& c : kCases) {
    const int64_t K = 96;
    ASSERT_EQ(dtype_row_bytes(c.dtype, K), 4 + K);
    const auto& tr = dtype_traits(c.dtype);
    for (int trial = 0; trial < 2; ++trial) {
      const auto x = trial == 0 ? testing::random_floats(rng, K) : testing::outlier_floats(rng, K);
      std::vector<uint8_t> q(static_cast<size_t>(dtype_row_bytes(c.dtype, K)));
      std::vector<float> y(static_cast<size_t>(K));
      tr.quantize_row(x.data(), q.data(), K);
      tr.dequantize_row(q.data(), y.data(), K);
      float amax = 0.0f, scale;
      for (float v : x) amax = std::max(amax, std::fabs(v));
      std::memcpy(&scale, q.data(), 4);
      EXPECT_EQ(scale, amax / c.max_value) << c.name;
      const bool e4m3 = c.max_code == 0x7e;
      const float rel = e4m3 ? 1.0f / 16 : 1.0f / 8, sub = std::ldexp(1.0f, e4m3 ? -10 : -17);
      for (int64_t i = 0; i < K; ++i) {
        const float bound = std::max(std::fabs(x[size_t(i)]) * rel, sub * scale) * 1.0001f;
        ASSERT_LE(std::fabs(x[size_t(i)] - y[size_t(i)]), bound) << c.name << " trial " << trial << " elem " << i;
      }
      // The largest element maps to the largest code.
      const auto it = std::max_element(x.begin(), x.end(), [](float a, float b) { return std::fabs(a) < std::fabs(b); });
      EXPECT_EQ(q[size_t(4 + (it - x.begin()))] & 0x7f, c.max_code) << c.name;
    }
  }
}

}  // namespace
}  // namespace tessera
