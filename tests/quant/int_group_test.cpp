// INT8 per-channel (row header + int8 codes) and INT4 group-wise asymmetric (AWQ/GPTQ style).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/dtype.h"
#include "quant/half.h"
#include "quant/int_group.h"
#include "tests/support/test_support.h"

namespace tessera {
namespace {

// scale = amax/127, codes in [-127, 127], error <= scale/2, the largest element exact in code.
TEST(IntGroup, Int8PerChannelRoundTripWithinBound) {
  testing::Rng rng(20);
  const int64_t K = 160;
  EXPECT_EQ(dtype_row_bytes(DType::kINT8_PC, K), 4 + K);
  for (int trial = 0; trial < 2; ++trial) {
    const auto x = trial == 0 ? testing::random_floats(rng, K) : testing::outlier_floats(rng, K);
    std::vector<uint8_t> q(static_cast<size_t>(dtype_row_bytes(DType::kINT8_PC, K)));
    std::vector<float> y(static_cast<size_t>(K));
    quantize_row_int8_pc(x.data(), q.data(), K);
    dequantize_row_int8_pc(q.data(), y.data(), K);
    float amax = 0.0f, scale;
    for (float v : x) amax = std::max(amax, std::fabs(v));
    std::memcpy(&scale, q.data(), 4);
    EXPECT_EQ(scale, amax / 127.0f);
    int extreme = 0;
    for (int64_t i = 0; i < K; ++i) {
      ASSERT_LE(std::fabs(x[size_t(i)] - y[size_t(i)]), 0.5f * scale * 1.0001f) << "trial " << trial << " elem " << i;
      const int code = int8_t(q[size_t(4 + i)]);
      ASSERT_GE(code, -127);
      extreme += std::abs(code) == 127 ? 1 : 0;
    }
    EXPECT_GE(extreme, 1);
  }
}

// Per group: range [min(0, lo), max(0, hi)], scale d = range/15 rounded up to f16 (factor
// <= 1 + 2^-10), zero = round(-min/d) in [0, 15]; nothing clamps, so error <= d/2.
template <int G>
void check_int4_round_trip(uint64_t seed) {
  const DType t = G == 32 ? DType::kINT4_G32 : G == 64 ? DType::kINT4_G64 : DType::kINT4_G128;
  ASSERT_EQ(dtype_traits(t).block_elems, G);
  testing::Rng rng(seed);
  const int64_t n = G * 16;
  for (int trial = 0; trial < 3; ++trial) {
    auto x = trial == 0 ? testing::random_floats(rng, n) : testing::outlier_floats(rng, n);
    if (trial == 2)
      for (auto& v : x) v = std::fabs(v) + 0.5f;  // all positive: the zero point must be 0
    std::vector<uint8_t> q(static_cast<size_t>(dtype_row_bytes(t, n)));
    std::vector<float> y(static_cast<size_t>(n));
    quantize_row_int4<G>(x.data(), q.data(), n);
    dequantize_row_int4<G>(q.data(), y.data(), n);
    const auto* blocks = reinterpret_cast<const BlockInt4<G>*>(q.data());
    for (int64_t b = 0; b < n / G; ++b) {
      const auto first = x.begin() + b * G;
      const float lo = std::min(0.0f, *std::min_element(first, first + G));
      const float hi = std::max(0.0f, *std::max_element(first, first + G));
      const float d = (hi - lo) / 15.0f * (1.0f + 1.0f / 1024.0f);
      ASSERT_LE(blocks[b].zero, 15);
      ASSERT_EQ(blocks[b].reserved, 0);
      if (trial == 2) {
        ASSERT_EQ(blocks[b].zero, 0);
      }
      for (int j = 0; j < G; ++j) {
        const size_t i = size_t(b * G + j);
        ASSERT_LE(std::fabs(x[i] - y[i]), 0.5f * d * 1.0001f) << "g" << G << " trial " << trial << " block " << b;
      }
    }
  }
}

TEST(IntGroup, Int4G32RoundTripWithinBound) { check_int4_round_trip<32>(21); }
TEST(IntGroup, Int4G64RoundTripWithinBound) { check_int4_round_trip<64>(22); }
TEST(IntGroup, Int4G128RoundTripWithinBound) { check_int4_round_trip<128>(23); }

// A group on the grid comes back exactly: values -2 + 0.5 q, q = 0..15 (twice) -> d = 0.5, zero 4.
TEST(IntGroup, Int4KnownGroupIsExact) {
  float x[32];
  for (int j = 0; j < 32; ++j) x[j] = -2.0f + 0.5f * float(j % 16);
  BlockInt4G32 b;
  quantize_row_int4<32>(x, &b, 32);
  EXPECT_EQ(fp16_to_f32(b.d), 0.5f);
  EXPECT_EQ(b.zero, 4);
  EXPECT_EQ(b.qs[3], uint8_t(3 | (3 << 4)));  // element 3 (q 3) low, element 19 (q 3) high
  float y[32];
  dequantize_row_int4<32>(&b, y, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], x[j]) << j;
}

}  // namespace
}  // namespace tessera
