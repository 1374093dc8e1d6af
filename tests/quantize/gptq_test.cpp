// GPTQ on a random linear layer whose inputs are correlated (as a transformer's are): its output
// error ||X W^T - X Q^T|| must beat round-to-nearest's for every format, and the inverse-Hessian
// factor must satisfy U^T U (H + damp I) = I.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "models/quantize/gptq.h"
#include "tests/support/test_support.h"

namespace tessera {
namespace {

// Inputs x = z A with z Gaussian and A a random mixing matrix, plus a few loud channels, so H is
// far from diagonal and error compensation across columns has something to work with.
std::vector<float> correlated_inputs(int64_t t, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> a(size_t(k * k)), z(size_t(t * k)), x(size_t(t * k), 0.0f);
  for (float& v : a) v = nd(rng) / std::sqrt(float(k));
  for (int64_t i = 0; i < k; ++i) a[size_t(i * k + i)] += 1.0f;
  for (float& v : z) v = nd(rng);
  for (int64_t r = 0; r < t; ++r)
    for (int64_t i = 0; i < k; ++i) {
      const float zi = z[size_t(r * k + i)];
      for (int64_t j = 0; j < k; ++j) x[size_t(r * k + j)] += zi * a[size_t(i * k + j)];
    }
  for (int64_t r = 0; r < t; ++r)
    for (int64_t j = 0; j < k; j += 37) x[size_t(r * k + j)] *= 8.0f;
  return x;
}

std::vector<float> gaussian(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& f : v) f = nd(rng);
  return v;
}

std::vector<float> decode(DType t, const std::vector<uint8_t>& bytes, int64_t n, int64_t k) {
  const std::vector<double> d = testing::decode(Tensor::make(t, {n, k}), bytes.data());
  return std::vector<float>(d.begin(), d.end());
}

// ||X (W - Q)^T||_F
double output_error(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& q, int64_t t,
                    int64_t n, int64_t k) {
  double sum = 0.0;
  for (int64_t r = 0; r < t; ++r)
    for (int64_t o = 0; o < n; ++o) {
      double d = 0.0;
      for (int64_t i = 0; i < k; ++i) d += double(x[size_t(r * k + i)]) * (double(w[size_t(o * k + i)]) - q[size_t(o * k + i)]);
      sum += d * d;
    }
  return std::sqrt(sum);
}

struct Case {
  DType type;
  int64_t k;
  double max_ratio;  // GPTQ's output error over round-to-nearest's must stay below this
};

class Gptq : public ::testing::TestWithParam<Case> {};

TEST_P(Gptq, BeatsRoundToNearestOnCorrelatedInputs) {
  const Case c = GetParam();
  const int64_t t = 384, n = 48, k = c.k;
  const std::vector<float> x = correlated_inputs(t, k, 7), w = gaussian(n * k, 11);
  Hessian h(k);
  h.add_rows(x.data(), t);
  auto f = gptq_factor(h, "test", 0.01, 2);
  ASSERT_TRUE(f.ok()) << f.status().to_string();

  const int64_t rb = dtype_row_bytes(c.type, k);
  std::vector<uint8_t> rtn(size_t(n * rb)), gq(size_t(n * rb));
  for (int64_t r = 0; r < n; ++r) dtype_traits(c.type).quantize_row(w.data() + r * k, rtn.data() + r * rb, k);
  std::vector<float> work = w;
  int64_t last_progress = 0;
  ASSERT_TRUE(gptq_quantize(c.type, *f, work.data(), n, k, gq.data(), 2, [&](int64_t d) { last_progress = d; }).ok());
  EXPECT_EQ(last_progress, n);

  const double e_rtn = output_error(x, w, decode(c.type, rtn, n, k), t, n, k);
  const double e_gptq = output_error(x, w, decode(c.type, gq, n, k), t, n, k);
  EXPECT_LT(e_gptq, c.max_ratio * e_rtn) << dtype_name(c.type) << " k=" << k << ": gptq " << e_gptq << " rtn " << e_rtn;
  std::printf("%-9s k=%lld  output error: rtn %.5g  gptq %.5g  (ratio %.3f)\n", dtype_name(c.type), (long long)k, e_rtn,
              e_gptq, e_gptq / e_rtn);
}

INSTANTIATE_TEST_SUITE_P(Formats, Gptq,
                         ::testing::Values(Case{DType::kFP8_E4M3, 128, 0.8}, Case{DType::kFP8_E5M2, 128, 0.8},
                                           Case{DType::kINT8_PC, 128, 0.8}, Case{DType::kQ8_0, 128, 0.8},
                                           Case{DType::kQ4_0, 128, 0.8}, Case{DType::kQ4_1, 128, 0.8},
                                           Case{DType::kQ5_0, 128, 0.8}, Case{DType::kQ5_1, 128, 0.8},
                                           Case{DType::kINT4_G32, 128, 0.8}, Case{DType::kINT4_G128, 256, 0.8},
                                           Case{DType::kMXFP4, 128, 0.9}, Case{DType::kNVFP4, 128, 0.9},
                                           Case{DType::kQ4_K, 512, 0.95}, Case{DType::kQ6_K, 512, 0.95}),
                         [](const auto& info) { return std::string(dtype_name(info.param.type)); });

TEST(GptqFactor, IsTheUpperCholeskyFactorOfTheDampedInverse) {
  const int64_t t = 200, k = 96;
  const std::vector<float> x = correlated_inputs(t, k, 3);
  Hessian h(k);
  h.add_rows(x.data(), t);
  auto f = gptq_factor(h, "test", 0.01, 2);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_GT(f->damp, 0.0);
  double worst = 0.0;
  for (int64_t i = 0; i < k; ++i) {
    for (int64_t j = 0; j < i; ++j) ASSERT_EQ(f->u[size_t(i * k + j)], 0.0f) << "lower triangle at " << i << "," << j;
    ASSERT_GT(f->u[size_t(i * k + i)], 0.0f);
  }
  // (U^T U)(H + damp I) = I
  for (int64_t i = 0; i < k; ++i)
    for (int64_t j = 0; j < k; ++j) {
      double s = 0.0;
      for (int64_t m = 0; m < k; ++m) {
        double uu = 0.0;  // (U^T U)[i][m]
        for (int64_t p = 0; p <= std::min(i, m); ++p) uu += double(f->u[size_t(p * k + i)]) * f->u[size_t(p * k + m)];
        s += uu * (h.h[size_t(m * k + j)] + (m == j ? f->damp : 0.0));
      }
      worst = std::max(worst, std::fabs(s - (i == j ? 1.0 : 0.0)));
    }
  EXPECT_LT(worst, 1e-3);
}

TEST(GptqFactor, RefusesAnEmptyHessian) {
  Hessian h(64);
  auto f = gptq_factor(h, "blk.0.attn_q.weight");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("blk.0.attn_q.weight"), std::string::npos) << f.status().to_string();
  EXPECT_NE(f.status().message().find("no calibration data"), std::string::npos) << f.status().to_string();
}

TEST(GptqQuantize, RefusesFloatFormatsAndMismatchedWidths) {
  Hessian h(64);
  std::vector<float> x = correlated_inputs(100, 64, 5);
  h.add_rows(x.data(), 100);
  auto f = gptq_factor(h, "t");
  ASSERT_TRUE(f.ok());
  std::vector<float> w = gaussian(64 * 4, 1);
  std::vector<uint8_t> out(4 * 64 * 4);
  EXPECT_FALSE(gptq_quantize(DType::kF16, *f, w.data(), 4, 64, out.data(), 1).ok());
  const Status s = gptq_quantize(DType::kQ4_0, *f, w.data(), 2, 128, out.data(), 1);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("64"), std::string::npos) << s.to_string();
}

}  // namespace
}  // namespace tessera
