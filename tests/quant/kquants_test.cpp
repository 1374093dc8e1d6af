// Q4_K, Q5_K, Q6_K: bit-exact dequantisation against the gguf package (random blocks from the
// golden file, and blocks quantised by us, checked by the package through gguf_check.py), the
// 6-bit scale packing, and our quantizer's error bound.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "quant/dtype.h"
#include "quant/kquants.h"
#include "tests/quant/golden.h"
#include "tests/support/test_support.h"

namespace tessera {
namespace {

constexpr DType kKQuants[] = {DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};

std::vector<float> round_trip(DType t, const std::vector<float>& x, std::vector<uint8_t>* bytes = nullptr) {
  const auto& tr = dtype_traits(t);
  const int64_t n = int64_t(x.size());
  std::vector<uint8_t> q(static_cast<size_t>(dtype_row_bytes(t, n)));
  std::vector<float> y(static_cast<size_t>(n));
  tr.quantize_row(x.data(), q.data(), n);
  tr.dequantize_row(q.data(), y.data(), n);
  if (bytes) *bytes = std::move(q);
  return y;
}

TEST(KQuants, DequantizeMatchesGgufPackageOnRandomBlocks) {
  for (DType t : kKQuants) {
    std::string err;
    const auto recs = testing::gguf_golden_of(dtype_traits(t).gguf_type, 0, &err);
    ASSERT_TRUE(err.empty()) << err;
    ASSERT_FALSE(recs.empty()) << dtype_name(t);
    for (const auto& r : recs) {
      std::vector<float> y(static_cast<size_t>(r.n));
      dtype_traits(t).dequantize_row(r.bytes.data(), y.data(), r.n);
      const int64_t i = testing::first_bit_mismatch(y, r.expected);
      EXPECT_EQ(i, -1) << dtype_name(t) << " elem " << i;
    }
  }
}

// The package has no k-quant quantizer: it dequantises the blocks we quantised, and must get our
// floats bit for bit.
TEST(KQuants, OurBlocksDequantizeLikeGgufPackage) {
  testing::Rng rng(7);
  std::vector<testing::GgufCheck> checks;
  for (DType t : kKQuants) {
    for (int trial = 0; trial < 2; ++trial) {
      const auto x = trial == 0 ? testing::random_floats(rng, 4 * kQK_K) : testing::outlier_floats(rng, 4 * kQK_K);
      testing::GgufCheck c{t, {}, {}};
      c.ours = round_trip(t, x, &c.bytes);
      checks.push_back(std::move(c));
    }
  }
  std::string log;
  const int rc = testing::run_gguf_check(checks, &log);
  if (rc == 77) TESSERA_SKIP_MISSING() << "python3 with the gguf package unavailable: " << log;
  EXPECT_EQ(rc, 0) << log;
}

TEST(KQuants, ScalePackingRoundTripsEverySixBitValue) {
  for (int v = 0; v < 64; ++v) {
    uint8_t sc[8], m[8], packed[kKScaleBytes], sc2[8], m2[8];
    for (int i = 0; i < 8; ++i) {
      sc[i] = uint8_t((v + 7 * i) & 63);
      m[i] = uint8_t((v * 3 + 11 * i) & 63);
    }
    pack_k_scales(sc, m, packed);
    unpack_k_scales(packed, sc2, m2);
    for (int i = 0; i < 8; ++i) {
      ASSERT_EQ(sc2[i], sc[i]) << "scale " << i << " v " << v;
      ASSERT_EQ(m2[i], m[i]) << "min " << i << " v " << v;
    }
  }
}

// Error bound of our quantizer. Q4_K/Q5_K (L = 15 / 31 levels), per 32-element sub-block i with
// lo_i = min(0, min x), hi_i = max(0, max x): dmin <= max_i(-lo_i)/63 (f16 rounded up: *(1+2^-10));
// the grid starts at -dmin*m_i in (lo_i - dmin, lo_i], so its step s_i = d*sc_i with
// span_i = (hi_i + dmin*m_i)/L <= (hi_i - lo_i + dmin)/L, d <= max_i span_i / 63, s_i <= span_i + d;
// every element lies inside the grid, so |error| <= s_i / 2.
// Q6_K, per 16-element sub-block: s_i <= amax_i/31 + d with d <= max_i(amax_i/31)/127.
std::vector<float> k_bounds(DType t, const float* x) {
  std::vector<float> bound(kQK_K);
  const float up = 1.0f + 1.0f / 1024.0f;
  if (t == DType::kQ6_K) {
    float step[16], max_step = 0.0f;
    for (int i = 0; i < 16; ++i) {
      float amax = 0.0f;
      for (int l = 0; l < 16; ++l) amax = std::max(amax, std::fabs(x[16 * i + l]));
      step[i] = amax / 31.0f;
      max_step = std::max(max_step, step[i]);
    }
    const float d = max_step / 127.0f * up;
    for (int e = 0; e < kQK_K; ++e) bound[size_t(e)] = 0.5f * (step[e / 16] + d) * up;
    return bound;
  }
  const float levels = t == DType::kQ4_K ? 15.0f : 31.0f;
  float lo[8], hi[8], max_min = 0.0f;
  for (int i = 0; i < 8; ++i) {
    lo[i] = std::min(0.0f, *std::min_element(x + 32 * i, x + 32 * i + 32));
    hi[i] = std::max(0.0f, *std::max_element(x + 32 * i, x + 32 * i + 32));
    max_min = std::max(max_min, -lo[i]);
  }
  const float dmin = max_min / 63.0f * up;
  float span[8], max_span = 0.0f;
  for (int i = 0; i < 8; ++i) {
    span[i] = (hi[i] - lo[i] + dmin) / levels;
    max_span = std::max(max_span, span[i]);
  }
  const float d = max_span / 63.0f * up;
  for (int e = 0; e < kQK_K; ++e) bound[size_t(e)] = 0.5f * (span[e / 32] + d) * up;
  return bound;
}

TEST(KQuants, RoundTripWithinBound) {
  testing::Rng rng(8);
  for (DType t : kKQuants) {
    for (int trial = 0; trial < 2; ++trial) {
      const int64_t n = 16 * kQK_K;
      const auto x = trial == 0 ? testing::random_floats(rng, n) : testing::outlier_floats(rng, n);
      const auto y = round_trip(t, x);
      double err2 = 0.0, ref2 = 0.0;
      for (int64_t b = 0; b < n / kQK_K; ++b) {
        const auto bound = k_bounds(t, x.data() + b * kQK_K);
        for (int e = 0; e < kQK_K; ++e) {
          const size_t i = size_t(b * kQK_K + e);
          ASSERT_LE(std::fabs(x[i] - y[i]), bound[size_t(e)] + 1e-6f)
              << dtype_name(t) << " trial " << trial << " block " << b << " elem " << e << " x " << x[i];
          err2 += double(x[i] - y[i]) * (x[i] - y[i]);
          ref2 += double(x[i]) * x[i];
        }
      }
      // Uniform data: error ~ step/sqrt(12) with step ~ range/L, so NMSE ~ 1/L^2 or better.
      if (trial == 0) {
        const double levels = t == DType::kQ4_K ? 15 : t == DType::kQ5_K ? 31 : 62;
        EXPECT_LT(err2 / ref2, 1.5 / (levels * levels)) << dtype_name(t);
      }
    }
  }
}

TEST(KQuants, ZeroBlockStaysZero) {
  for (DType t : kKQuants) {
    const std::vector<float> x(kQK_K, 0.0f);
    for (float v : round_trip(t, x)) ASSERT_EQ(v, 0.0f) << dtype_name(t);
  }
}

}  // namespace
}  // namespace tessera
