// GGUF's 32-element blocks: Q4_0, Q4_1, Q8_0 (the originals) and Q5_0, Q5_1, against the gguf
// package (bytes of its quantizer, bits of its dequantisation) and SmolLM2's own tensors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "quant/dtype.h"
#include "quant/ggml_blocks.h"
#include "quant/half.h"
#include "tests/quant/golden.h"
#include "tests/support/test_support.h"

namespace tessera {
namespace {

std::vector<float> dequantize(DType t, const std::vector<uint8_t>& bytes, int64_t n) {
  std::vector<float> y(static_cast<size_t>(n));
  dtype_traits(t).dequantize_row(bytes.data(), y.data(), n);
  return y;
}

std::vector<uint8_t> quantize(DType t, const std::vector<float>& x) {
  std::vector<uint8_t> q(size_t(dtype_row_bytes(t, int64_t(x.size()))));
  dtype_traits(t).quantize_row(x.data(), q.data(), int64_t(x.size()));
  return q;
}

class GgmlGolden : public ::testing::TestWithParam<DType> {};

// The gguf package's quantizer and ours give the same bytes for the same floats (normal data,
// outliers, an all-zero block, exact ties, an all-positive block).
TEST_P(GgmlGolden, QuantizeMatchesGgufPackageBytes) {
  std::string err;
  const auto recs = testing::gguf_golden_of(dtype_traits(GetParam()).gguf_type, 1, &err);
  ASSERT_TRUE(err.empty()) << err;
  ASSERT_FALSE(recs.empty());
  for (const auto& r : recs) {
    const auto ours = quantize(GetParam(), r.input);
    ASSERT_EQ(ours.size(), r.bytes.size());
    const auto bs = size_t(dtype_traits(GetParam()).block_bytes);
    for (size_t i = 0; i < ours.size(); ++i)
      ASSERT_EQ(ours[i], r.bytes[i]) << dtype_name(GetParam()) << " block " << i / bs << " byte " << i % bs;
  }
}

// Dequantisation is bit-exact on package-quantised blocks and on random bytes.
TEST_P(GgmlGolden, DequantizeMatchesGgufPackageBits) {
  std::string err;
  int checked = 0;
  for (int kind : {0, 1, 2}) {
    for (const auto& r : testing::gguf_golden_of(dtype_traits(GetParam()).gguf_type, kind, &err)) {
      const auto y = dequantize(GetParam(), r.bytes, r.n);
      const int64_t i = testing::first_bit_mismatch(y, r.expected);
      EXPECT_EQ(i, -1) << dtype_name(GetParam()) << " kind " << kind << " elem " << i << ": ours "
                       << y[size_t(std::max<int64_t>(i, 0))] << " gguf " << r.expected[size_t(std::max<int64_t>(i, 0))];
      ++checked;
    }
  }
  ASSERT_TRUE(err.empty()) << err;
  EXPECT_GT(checked, 0);
}

INSTANTIATE_TEST_SUITE_P(Quant, GgmlGolden,
                         ::testing::Values(DType::kQ4_0, DType::kQ4_1, DType::kQ8_0, DType::kQ5_0, DType::kQ5_1),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// SmolLM2's file holds Q4_1 and Q8_0 tensors (none of the newer types); two rows of each of
// blk.0.attn_q, blk.29.ffn_down (Q4_1) and token_embd (Q8_0) were dequantised by the package.
TEST(GgmlBlocks, SmolLM2RowsMatchGgufPackage) {
  std::string err;
  int rows = 0;
  for (DType t : {DType::kQ4_1, DType::kQ8_0}) {
    for (const auto& r : testing::gguf_golden_of(dtype_traits(t).gguf_type, 2, &err)) {
      EXPECT_EQ(testing::first_bit_mismatch(dequantize(t, r.bytes, r.n), r.expected), -1) << dtype_name(t);
      ++rows;
    }
  }
  ASSERT_TRUE(err.empty()) << err;
  EXPECT_EQ(rows, 3);
}

// Round trip bounds. Q5_1: step d = (max - min) / 31 and every element within half a step, plus
// the f16 rounding of d (31 steps * 2^-11 relative) and of the min. Q5_0: step |d| = amax / 16;
// half a step, except that the side opposite to the largest element reaches only 15 steps, so an
// element beyond 15.5 steps there is clamped by up to a full step.
TEST(GgmlBlocks, Q5RoundTripWithinBound) {
  testing::Rng rng(5);
  for (int trial = 0; trial < 2; ++trial) {
    const int64_t n = 32 * 64;
    const auto x = trial == 0 ? testing::random_floats(rng, n) : testing::outlier_floats(rng, n);
    const auto y0 = dequantize(DType::kQ5_0, quantize(DType::kQ5_0, x), n);
    const auto y1 = dequantize(DType::kQ5_1, quantize(DType::kQ5_1, x), n);
    for (int64_t b = 0; b < n / 32; ++b) {
      const auto first = x.begin() + b * 32, last = first + 32;
      const float lo = *std::min_element(first, last), hi = *std::max_element(first, last);
      const float amax = std::max(-lo, hi);
      const float max = hi >= -lo ? hi : lo;  // the element of largest magnitude, signed
      const float d0 = amax / 16.0f, d1 = (hi - lo) / 31.0f;
      for (int64_t i = b * 32; i < b * 32 + 32; ++i) {
        const bool clamped = -x[size_t(i)] * 16.0f / max > 15.5f;
        const float b0 = (clamped ? 1.0f : 0.5f) * d0 * 1.001f + amax * 1e-3f;
        const float b1 = 0.5f * d1 * 1.001f + (hi - lo + std::fabs(lo)) * 1e-3f;
        ASSERT_LE(std::fabs(x[size_t(i)] - y0[size_t(i)]), b0) << "q5_0 trial " << trial << " elem " << i;
        ASSERT_LE(std::fabs(x[size_t(i)] - y1[size_t(i)]), b1) << "q5_1 trial " << trial << " elem " << i;
      }
    }
  }
}

// The 5th bits land in qh as GGUF lays them out: bit j of the little-endian u32 is element j.
TEST(GgmlBlocks, Q5_1KnownBlock) {
  float x[32];
  for (int j = 0; j < 32; ++j) x[j] = float(j);  // min 0, d = 1: q[j] = j
  BlockQ5_1 b;
  quantize_row_q5_1(x, &b, 32);
  EXPECT_EQ(fp16_to_f32(b.d), 1.0f);
  EXPECT_EQ(fp16_to_f32(b.m), 0.0f);
  EXPECT_EQ(b.qh[0], 0x00);  // elements 0..15 < 16
  EXPECT_EQ(b.qh[2], 0xff);  // elements 16..23
  EXPECT_EQ(b.qh[3], 0xff);
  EXPECT_EQ(b.qs[3], uint8_t(3 | ((19 & 15) << 4)));
}

}  // namespace
}  // namespace tessera
