// MXFP4 and NVFP4: scalar codecs against ml_dtypes, blocks against the gguf package, and the
// round trip error bound of each.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/dtype.h"
#include "quant/fp4.h"
#include "quant/fp8.h"
#include "tests/quant/golden.h"
#include "tests/support/test_support.h"

namespace tessera {
namespace {

std::vector<float> section_floats(uint32_t tag, uint32_t* count) {
  std::string err;
  const auto bytes = testing::fp8_golden_section(tag, count, &err);
  EXPECT_TRUE(err.empty()) << err;
  std::vector<float> v(*count);
  if (bytes.size() >= 4 * size_t(*count)) std::memcpy(v.data(), bytes.data(), 4 * size_t(*count));
  return v;
}

TEST(Fp4, E2M1DecodesLikeMlDtypes) {
  uint32_t count = 0;
  const auto want = section_floats(5, &count);
  ASSERT_EQ(count, 16u);
  for (uint8_t c = 0; c < 16; ++c) EXPECT_EQ(e2m1_to_f32(c), want[c]) << "code " << int(c);
  EXPECT_TRUE(std::signbit(e2m1_to_f32(8)));  // -0
}

// E8M0: every code is 2^(e-127); ml_dtypes calls 0xFF NaN, GGUF reads it as 2^128 (inf in f32).
TEST(Fp4, E8M0DecodesLikeMlDtypes) {
  uint32_t count = 0;
  const auto want = section_floats(6, &count);
  ASSERT_EQ(count, 256u);
  for (int e = 0; e < 255; ++e) EXPECT_EQ(e8m0_to_f32(uint8_t(e)), want[size_t(e)]) << "e " << e;
  EXPECT_TRUE(std::isnan(want[255]));
  EXPECT_TRUE(std::isinf(e8m0_to_f32(255)));
}

// UE4M3 is E4M3FN without the sign: decode agrees with fp8_e4m3 (itself checked against
// ml_dtypes in fp8_test.cpp) except 0x7F (NaN there, 0 in GGUF) and bit 7 (ignored).
TEST(Fp4, Ue4m3CodecAgreesWithE4M3) {
  for (int c = 0; c < 256; ++c) {
    const float v = ue4m3_to_f32(uint8_t(c));
    if ((c & 0x7f) == 0x7f) {
      EXPECT_EQ(v, c == 0x7f ? 0.0f : 480.0f) << c;  // 0xFF: exponent 15, mantissa 7 = 1.875 * 2^8
      continue;
    }
    EXPECT_EQ(v, fp8_e4m3_to_f32(uint8_t(c & 0x7f))) << "code " << c;
  }
  testing::Rng rng(3);
  for (float x : testing::random_floats(rng, 2000, 0.0f, 500.0f)) {
    const float s = x * 1e-3f;  // also the subnormal range
    EXPECT_EQ(f32_to_ue4m3(x), std::min<uint8_t>(f32_to_fp8_e4m3(x), 0x7e)) << x;
    EXPECT_EQ(f32_to_ue4m3(s), f32_to_fp8_e4m3(s)) << s;
  }
  EXPECT_EQ(f32_to_ue4m3(-1.0f), 0);
  EXPECT_EQ(f32_to_ue4m3(1e9f), 0x7e);
}

TEST(Fp4, MxFp4QuantizeMatchesGgufPackageBytes) {
  std::string err;
  const auto recs = testing::gguf_golden_of(39, 1, &err);
  ASSERT_TRUE(err.empty()) << err;
  ASSERT_FALSE(recs.empty());
  for (const auto& r : recs) {
    std::vector<uint8_t> q(r.bytes.size());
    quantize_row_mxfp4(r.input.data(), q.data(), r.n);
    for (size_t i = 0; i < q.size(); ++i) ASSERT_EQ(q[i], r.bytes[i]) << "block " << i / 17 << " byte " << i % 17;
  }
}

TEST(Fp4, DequantizeMatchesGgufPackageBits) {
  std::string err;
  int checked = 0;
  for (DType t : {DType::kMXFP4, DType::kNVFP4}) {
    for (int kind : {0, 1}) {
      for (const auto& r : testing::gguf_golden_of(dtype_traits(t).gguf_type, kind, &err)) {
        std::vector<float> y(static_cast<size_t>(r.n));
        dtype_traits(t).dequantize_row(r.bytes.data(), y.data(), r.n);
        EXPECT_EQ(testing::first_bit_mismatch(y, r.expected), -1) << dtype_name(t) << " kind " << kind;
        ++checked;
      }
    }
  }
  ASSERT_TRUE(err.empty()) << err;
  EXPECT_EQ(checked, 3);  // MXFP4 quantised + random, NVFP4 random (the package has no NVFP4 quantizer)
}

TEST(Fp4, OurBlocksDequantizeLikeGgufPackage) {
  testing::Rng rng(9);
  std::vector<testing::GgufCheck> checks;
  for (DType t : {DType::kMXFP4, DType::kNVFP4}) {
    const auto x = testing::outlier_floats(rng, 512);
    testing::GgufCheck c{t, std::vector<uint8_t>(size_t(dtype_row_bytes(t, 512))), std::vector<float>(512)};
    dtype_traits(t).quantize_row(x.data(), c.bytes.data(), 512);
    dtype_traits(t).dequantize_row(c.bytes.data(), c.ours.data(), 512);
    checks.push_back(std::move(c));
  }
  std::string log;
  const int rc = testing::run_gguf_check(checks, &log);
  if (rc == 77) TESSERA_SKIP_MISSING() << "python3 with the gguf package unavailable: " << log;
  EXPECT_EQ(rc, 0) << log;
}

// MXFP4, per block with X = 2^(floor(log2 amax) - 2): E2M1 steps are X/2 below 2X, X below 4X
// and 2X up to 6X, so the error is at most half the local step; elements beyond 6X (amax can
// reach 8X) are clamped to 6X.
TEST(Fp4, MxFp4RoundTripWithinBound) {
  testing::Rng rng(10);
  for (int trial = 0; trial < 2; ++trial) {
    const int64_t n = 32 * 64;
    const auto x = trial == 0 ? testing::random_floats(rng, n) : testing::outlier_floats(rng, n);
    std::vector<uint8_t> q(static_cast<size_t>(dtype_row_bytes(DType::kMXFP4, n)));
    std::vector<float> y(static_cast<size_t>(n));
    quantize_row_mxfp4(x.data(), q.data(), n);
    dequantize_row_mxfp4(q.data(), y.data(), n);
    for (int64_t b = 0; b < n / 32; ++b) {
      float amax = 0.0f;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[size_t(b * 32 + j)]));
      const float X = std::exp2(std::floor(std::log2(amax)) - 2.0f);
      for (int j = 0; j < 32; ++j) {
        const size_t i = size_t(b * 32 + j);
        const float a = std::fabs(x[i]);
        const float half_step = a < 2 * X ? X / 4 : a < 4 * X ? X / 2 : X;
        const float bound = std::max(half_step, a - 6 * X) * 1.0001f;
        ASSERT_LE(std::fabs(x[i] - y[i]), bound) << "trial " << trial << " block " << b << " elem " << j;
      }
    }
  }
}

// NVFP4, per 16-element sub-block: scale s ~ amax/6 rounded to UE4M3 (3 mantissa bits: within
// 1/16 relative, or 2^-10 absolute in the subnormal range); the error is at most one E2M1 half
// step (<= s) or, for the largest element if s rounded down, amax - 6s (<= 6 * the scale error).
float nvfp4_bound(float amax) { return amax / 6.0f * (1.0f + 1.0f / 16.0f) + 6.0f * std::ldexp(1.0f, -10); }

TEST(Fp4, NvFp4RoundTripWithinBound) {
  testing::Rng rng(12);
  for (int trial = 0; trial < 2; ++trial) {
    const int64_t n = 64 * 32;
    const auto x = trial == 0 ? testing::random_floats(rng, n) : testing::outlier_floats(rng, n);
    std::vector<uint8_t> q(static_cast<size_t>(dtype_row_bytes(DType::kNVFP4, n)));
    std::vector<float> y(static_cast<size_t>(n));
    quantize_row_nvfp4(x.data(), q.data(), n);
    dequantize_row_nvfp4(q.data(), y.data(), n);
    for (int64_t s = 0; s < n / 16; ++s) {
      float amax = 0.0f;
      for (int l = 0; l < 16; ++l) amax = std::max(amax, std::fabs(x[size_t(s * 16 + l)]));
      for (int l = 0; l < 16; ++l) {
        const size_t i = size_t(s * 16 + l);
        ASSERT_LE(std::fabs(x[i] - y[i]), nvfp4_bound(amax)) << "trial " << trial << " sub-block " << s;
      }
    }
  }
}

// Small weights (amax ~ 0.001) need sub-block scales below UE4M3's smallest subnormal (2^-9), so
// without a tensor scale every block rounds to zero; the tensor scale moves them back into range:
// the bound holds in scaled units and the error is that of normal-range data.
TEST(Fp4, NvFp4TensorScaleKeepsSmallWeightsAccurate) {
  testing::Rng rng(13);
  const int64_t n = 64 * 32;
  auto x = testing::random_floats(rng, n, -0.001f, 0.001f);
  const float ts = nvfp4_tensor_scale(x.data(), n);
  EXPECT_NEAR(ts, 0.001f / 2688.0f, 0.001f / 2688.0f * 0.01f);
  std::vector<uint8_t> q(static_cast<size_t>(dtype_row_bytes(DType::kNVFP4, n)));
  std::vector<float> scaled(static_cast<size_t>(n)), plain(static_cast<size_t>(n));
  quantize_row_nvfp4_scaled(x.data(), q.data(), n, ts);
  dequantize_row_nvfp4(q.data(), scaled.data(), n);
  quantize_row_nvfp4(x.data(), q.data(), n);
  dequantize_row_nvfp4(q.data(), plain.data(), n);
  double e_scaled = 0.0, e_plain = 0.0, ref = 0.0;
  for (int64_t s = 0; s < n / 16; ++s) {
    float amax = 0.0f;
    for (int l = 0; l < 16; ++l) amax = std::max(amax, std::fabs(x[size_t(s * 16 + l)]));
    for (int l = 0; l < 16; ++l) {
      const size_t i = size_t(s * 16 + l);
      const float got = scaled[i] * ts;
      ASSERT_LE(std::fabs(x[i] - got), nvfp4_bound(amax / ts) * ts * 1.0001f) << "sub-block " << s;
      e_scaled += double(x[i] - got) * (x[i] - got);
      e_plain += double(x[i] - plain[i]) * (x[i] - plain[i]);
      ref += double(x[i]) * x[i];
    }
  }
  EXPECT_GT(e_plain / ref, 0.5);
  EXPECT_LT(e_scaled / ref, 0.02);
}

}  // namespace
}  // namespace tessera
