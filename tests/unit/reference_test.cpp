// Hand-computed checks of the reference ops themselves (the conformance suite trusts them).
#include <gtest/gtest.h>

#include <cmath>

#include "core/reference/reference.h"
#include "tests/support/test_support.h"

namespace tessera {
namespace {

class ReferenceTest : public ::testing::Test {
 protected:
  ValueId put(DType t, std::initializer_list<int64_t> shape, const std::vector<float>& v) {
    const Tensor desc = Tensor::make(t, shape);
    auto bytes = testing::encode(desc, v);
    return g_.input(*upload_new(dev_, desc, bytes.data()));
  }
  std::vector<double> run(ValueId v) {
    g_.mark_output(v);
    const Status s = dev_.compute(g_);
    EXPECT_TRUE(s.ok()) << s.to_string();
    return testing::download_values(dev_, g_.tensor(v));
  }
  ref::ReferenceDevice dev_;
  Graph g_;
};

TEST_F(ReferenceTest, MatmulWithBias) {
  const ValueId x = put(DType::kF32, {1, 3}, {1, 2, 3});
  const ValueId w = put(DType::kF32, {2, 3}, {1, 0, -1, 2, 2, 2});
  const auto y = run(g_.matmul(x, w, put(DType::kF32, {2}, {10, 20})));
  EXPECT_DOUBLE_EQ(y[0], 1 - 3 + 10);
  EXPECT_DOUBLE_EQ(y[1], 12 + 20);
}

TEST_F(ReferenceTest, RmsNorm) {
  const auto y = run(g_.rms_norm(put(DType::kF32, {1, 2}, {3, 4}), put(DType::kF32, {2}, {1, 2}), 1e-30f));
  const double rms = std::sqrt(12.5);
  EXPECT_NEAR(y[0], 3 / rms, 1e-6);
  EXPECT_NEAR(y[1], 8 / rms, 1e-6);
}

TEST_F(ReferenceTest, RopeRotatesPairsByPositionTimesFrequency) {
  RopeParams p;
  p.n_dims = 4;
  p.freq_base = 100.0f;
  p.mode = RopeMode::kNeox;
  // pos 1: pair 0 (dims 0,2) rotates by 1 rad, pair 1 (dims 1,3) by 100^(-1/2) = 0.1 rad.
  const auto y = run(g_.rope(put(DType::kF32, {1, 1, 4}, {1, 1, 0, 0}), put(DType::kI32, {1}, {1}), p));
  EXPECT_NEAR(y[0], std::cos(1.0), 1e-6);
  EXPECT_NEAR(y[2], std::sin(1.0), 1e-6);
  EXPECT_NEAR(y[1], std::cos(0.1), 1e-6);
  EXPECT_NEAR(y[3], std::sin(0.1), 1e-6);
}

// One sequence, two cached tokens and one new one; with identical keys attention averages values.
TEST_F(ReferenceTest, AttentionAveragesEqualKeysAndStoresTheNewToken) {
  const ValueId q = put(DType::kF32, {1, 1, 2}, {1, 0});
  const ValueId k = put(DType::kF32, {1, 1, 2}, {1, 1});
  const ValueId v = put(DType::kF32, {1, 1, 2}, {6, 0});
  const ValueId kc = put(DType::kF32, {1, 4, 1, 2}, {1, 1, 1, 1, 9, 9, 9, 9});
  const ValueId vc = put(DType::kF32, {1, 4, 1, 2}, {0, 3, 3, 0, 9, 9, 9, 9});
  const auto out = run(g_.attention({q, k, v, kc, vc, put(DType::kI32, {1}, {2}), put(DType::kI32, {2}, {0, 1}),
                                     put(DType::kI32, {1}, {3}), put(DType::kI32, {1, 1}, {0})},
                                    {}));
  EXPECT_NEAR(out[0], 3.0, 1e-9);
  EXPECT_NEAR(out[1], 1.0, 1e-9);
  const auto cache = testing::download_values(dev_, g_.tensor(vc));
  EXPECT_EQ(cache[4], 6.0);  // slot 2 now holds the new value
  EXPECT_EQ(cache[6], 9.0);  // slot 3 untouched
}

TEST_F(ReferenceTest, AttentionRejectsBlockTablesOutOfRange) {
  const ValueId q = put(DType::kF32, {1, 1, 2}, {1, 0});
  const ValueId kc = put(DType::kF32, {1, 4, 1, 2}, {1, 1, 1, 1, 9, 9, 9, 9});
  g_.attention({q, q, q, kc, kc, put(DType::kI32, {1}, {2}), put(DType::kI32, {2}, {0, 1}), put(DType::kI32, {1}, {3}),
                put(DType::kI32, {1, 1}, {5})},
               {});
  const Status s = dev_.compute(g_);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("block_tables[0, 0] = 5"), std::string::npos) << s.message();
}

TEST_F(ReferenceTest, TopkRouteRenormalises) {
  auto [ids, w] = g_.topk_route(put(DType::kF32, {1, 4}, {0, 2, 1, -1}), TopkRouteParams{.k = 2});
  g_.mark_output(ids);
  const auto wv = run(w);
  const auto iv = testing::download_values(dev_, g_.tensor(ids));
  EXPECT_EQ(iv[0], 1);
  EXPECT_EQ(iv[1], 2);
  EXPECT_NEAR(wv[0], std::exp(2.0) / (std::exp(2.0) + std::exp(1.0)), 1e-6);
  EXPECT_NEAR(wv[0] + wv[1], 1.0, 1e-6);
}

TEST_F(ReferenceTest, EmbedRejectsIdsOutOfRange) {
  g_.embed(put(DType::kF32, {3, 2}, {1, 2, 3, 4, 5, 6}), put(DType::kI32, {2}, {1, 3}));
  const Status s = dev_.compute(g_);
  EXPECT_NE(s.message().find("id 3 at row 1 outside [0, 3)"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace tessera
