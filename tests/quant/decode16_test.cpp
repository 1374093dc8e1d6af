// quant/decode16.h (the decoders GPU kernels call) against the scalar reference dequantize_row of
// every weight format, bit for bit, on random rows with outliers; and its f16/bf16/FP8 codecs
// against quant/half.h and quant/fp8.h over every code.
#include "quant/decode16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "quant/fp8.h"
#include "quant/half.h"
#include "tests/support/test_support.h"

namespace tessera {
namespace {

template <DType T>
void expect_rows_decode_like_the_reference() {
  const auto& tr = dtype_traits(T);
  testing::Rng rng{static_cast<uint64_t>(T) * 7919 + 1};
  for (int64_t n : {int64_t(256), int64_t(768)}) {
    // Uniform values, then values with outliers (most codes of a block near zero).
    const bool outliers = n != 256;
    const auto x = outliers ? testing::outlier_floats(rng, n) : testing::random_floats(rng, n);
    std::vector<uint8_t> row(static_cast<size_t>(dtype_row_bytes(T, n)));
    tr.quantize_row(x.data(), row.data(), n);
    std::vector<float> want(static_cast<size_t>(n));
    tr.dequantize_row(row.data(), want.data(), n);
    float got[16];
    int nonzero = 0;
    for (int64_t e0 = 0; e0 < n; e0 += 16) {
      decode::decode16<T>(row.data(), e0, got);
      for (int i = 0; i < 16; ++i) {
        ASSERT_EQ(decode::f32_bits(got[i]), decode::f32_bits(want[size_t(e0 + i)]))
            << tr.name << " n=" << n << " element " << e0 + i << ": " << got[i] << " vs " << want[size_t(e0 + i)];
        nonzero += got[i] != 0.0f;
      }
    }
    if (!outliers) {
      EXPECT_GT(nonzero, n / 2) << tr.name;  // the rows are not trivially zero
    }
  }
}

TEST(Decode16, EveryWeightFormatDecodesLikeTheReference) {
#define TS_CHECK_FORMAT(D) expect_rows_decode_like_the_reference<DType::D>();
  TS_FOR_EACH_WEIGHT_DTYPE(TS_CHECK_FORMAT)
#undef TS_CHECK_FORMAT
}

// int_run16 (the GPU's int8 dot-product path) describes the same values as the reference:
// scale * q + offset within f32 rounding of the larger of the two terms, q within int8.
template <DType T>
void expect_int_runs_match_the_reference() {
  if constexpr (decode::kHasIntRun<T>) {
    const auto& tr = dtype_traits(T);
    testing::Rng rng{static_cast<uint64_t>(T) * 104729 + 3};
    for (int64_t n : {int64_t(256), int64_t(768)}) {
      const auto x = n != 256 ? testing::outlier_floats(rng, n) : testing::random_floats(rng, n);
      std::vector<uint8_t> row(static_cast<size_t>(dtype_row_bytes(T, n)));
      tr.quantize_row(x.data(), row.data(), n);
      std::vector<float> want(static_cast<size_t>(n));
      tr.dequantize_row(row.data(), want.data(), n);
      int8_t q[16];
      int distinct_codes = 0, last = 1000;
      for (int64_t e0 = 0; e0 < n; e0 += 16) {
        float scale = 0.0f, offset = 0.0f;
        decode::int_run16<T>(row.data(), e0, q, scale, offset);
        for (int i = 0; i < 16; ++i) {
          const double got = double(scale) * q[i] + double(offset);
          const double w = want[size_t(e0 + i)];
          const double tol = 4e-7 * (std::fabs(double(scale) * q[i]) + std::fabs(double(offset))) + 1e-30;
          ASSERT_NEAR(got, w, tol) << tr.name << " n=" << n << " element " << e0 + i << ": " << scale << " * "
                                   << int(q[i]) << " + " << offset;
          distinct_codes += q[i] != last;
          last = q[i];
        }
      }
      if (n == 256) {
        EXPECT_GT(distinct_codes, n / 4) << tr.name;  // uniform rows: codes vary
      }
    }
  }
}

TEST(Decode16, IntegerRunsOfEveryIntFormatMatchTheReference) {
  int formats = 0;
#define TS_CHECK_FORMAT(D)                                     \
  expect_int_runs_match_the_reference<DType::D>();             \
  formats += decode::kHasIntRun<DType::D>;
  TS_FOR_EACH_WEIGHT_DTYPE(TS_CHECK_FORMAT)
#undef TS_CHECK_FORMAT
  EXPECT_EQ(formats, 14);  // every format but f32/f16/bf16 and the two FP8s
}

TEST(Decode16, HalfAndFp8CodecsMatchTheReference) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float a = decode::f16_to_f32(uint16_t(h)), b = fp16_to_f32(uint16_t(h));
    ASSERT_EQ(decode::f32_bits(a), decode::f32_bits(b)) << h;
    ASSERT_EQ(decode::f32_bits(decode::bf16_to_f32(uint16_t(h))), decode::f32_bits(bf16_to_f32(uint16_t(h))));
  }
  for (uint32_t c = 0; c < 256; ++c) {
    const float a = decode::fp8_e4m3_to_f32(uint8_t(c)), b = fp8_e4m3_to_f32(uint8_t(c));
    if (b != b) { EXPECT_NE(a, a) << c; continue; }
    EXPECT_EQ(decode::f32_bits(a), decode::f32_bits(b)) << c;
    EXPECT_EQ(decode::f32_bits(decode::fp8_e5m2_to_f32(uint8_t(c))), decode::f32_bits(fp8_e5m2_to_f32(uint8_t(c)))) << c;
  }
  testing::Rng rng(42);
  std::uniform_real_distribution<float> mag(-30.0f, 18.0f);
  for (int i = 0; i < 200000; ++i) {
    const float x = (i & 1 ? -1.0f : 1.0f) * std::exp2(mag(rng));
    ASSERT_EQ(decode::f32_to_f16(x), f32_to_fp16(x)) << x;
    ASSERT_EQ(decode::f32_to_bf16(x), f32_to_bf16(x)) << x;
    ASSERT_EQ(decode::f32_to_fp8_e4m3(x), f32_to_fp8_e4m3(x)) << x;
  }
  // Ties, zeros and the edges of each range.
  for (float x : {0.0f, -0.0f, 448.0f, 464.0f, 1e9f, 0.001953125f, 0.0009765625f, 0.0029296875f, 65520.0f, 65504.0f,
                  5.9604645e-8f, 2.9802322e-8f, 1.0f + 1.0f / 16.0f, 1.0f + 3.0f / 16.0f}) {
    EXPECT_EQ(decode::f32_to_fp8_e4m3(x), f32_to_fp8_e4m3(x)) << x;
    EXPECT_EQ(decode::f32_to_f16(x), f32_to_fp16(x)) << x;
  }
}

}  // namespace
}  // namespace tessera
