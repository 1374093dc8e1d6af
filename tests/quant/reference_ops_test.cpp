// The new formats reach the scalar reference ops through the traits table alone: matmul, matmul_id
// and embed on ref::ReferenceDevice with each new weight dtype equal the same ops on f32 weights
// holding the dequantised values.
#include <gtest/gtest.h>

#include "core/reference/reference.h"
#include "quant/dtype.h"
#include "tests/support/test_support.h"

namespace tessera {
namespace {

constexpr DType kNewFormats[] = {DType::kQ5_0,     DType::kQ5_1,     DType::kQ4_K,    DType::kQ5_K,
                                 DType::kQ6_K,     DType::kMXFP4,    DType::kNVFP4,   DType::kFP8_E4M3,
                                 DType::kFP8_E5M2, DType::kINT8_PC,  DType::kINT4_G32, DType::kINT4_G64,
                                 DType::kINT4_G128};

TEST(QuantTable, NewFormatsAreConsistent) {
  for (DType t : kNewFormats) {
    const auto& tr = dtype_traits(t);
    EXPECT_EQ(tr.dtype, t);
    EXPECT_TRUE(tr.is_quantized) << tr.name;
    EXPECT_FALSE(tr.is_float) << tr.name;
    EXPECT_NE(tr.quantize_row, nullptr) << tr.name;
    EXPECT_NE(tr.dequantize_row, nullptr) << tr.name;
    EXPECT_EQ(dtype_from_name(tr.name), t);
    if (tr.gguf_type >= 0) {
      EXPECT_EQ(dtype_from_gguf(tr.gguf_type), t);
    }
    EXPECT_TRUE(dtype_row_check(t, 256).empty()) << tr.name;
    EXPECT_FALSE(dtype_row_check(t, 16).empty()) << tr.name;
  }
  // Bytes per row of 256, from the layouts in quant/README.md.
  EXPECT_EQ(dtype_row_bytes(DType::kQ5_0, 256), 8 * 22);
  EXPECT_EQ(dtype_row_bytes(DType::kQ5_1, 256), 8 * 24);
  EXPECT_EQ(dtype_row_bytes(DType::kQ4_K, 256), 144);
  EXPECT_EQ(dtype_row_bytes(DType::kQ5_K, 256), 176);
  EXPECT_EQ(dtype_row_bytes(DType::kQ6_K, 256), 210);
  EXPECT_EQ(dtype_row_bytes(DType::kMXFP4, 256), 8 * 17);
  EXPECT_EQ(dtype_row_bytes(DType::kNVFP4, 256), 4 * 36);
  EXPECT_EQ(dtype_row_bytes(DType::kFP8_E4M3, 256), 4 + 256);
  EXPECT_EQ(dtype_row_bytes(DType::kINT8_PC, 256), 4 + 256);
  EXPECT_EQ(dtype_row_bytes(DType::kINT4_G32, 256), 8 * 20);
  EXPECT_EQ(dtype_row_bytes(DType::kINT4_G64, 256), 4 * 36);
  EXPECT_EQ(dtype_row_bytes(DType::kINT4_G128, 256), 2 * 68);
  EXPECT_EQ(dtype_from_gguf(12), DType::kQ4_K);
  EXPECT_EQ(dtype_from_gguf(39), DType::kMXFP4);
  // A tensor's rows are dtype_row_bytes apart, header included.
  const Tensor w = Tensor::make(DType::kFP8_E4M3, {3, 64});
  EXPECT_EQ(w.stride[0], 68);
  EXPECT_EQ(w.nbytes(), 3 * 68);
}

class QuantReferenceOps : public ::testing::TestWithParam<DType> {
 protected:
  ValueId put(const Tensor& desc, const std::vector<uint8_t>& bytes) {
    return g_.input(*upload_new(dev_, desc, bytes.data()));
  }
  ref::ReferenceDevice dev_;
  Graph g_;
};

// y = x w^T with w in the new dtype, and with w' = dequantised w in f32: identical (both sides
// accumulate the same doubles), and close to the unquantised product.
TEST_P(QuantReferenceOps, MatmulMatchesDequantisedF32) {
  const DType t = GetParam();
  const int64_t M = 3, N = 5, K = 256;
  testing::Rng rng(30 + int(t));
  const auto xv = testing::random_floats(rng, M * K);
  const auto wv = testing::random_floats(rng, N * K);
  const Tensor xd = Tensor::make(DType::kF32, {M, K});
  const Tensor wq = Tensor::make(t, {N, K});
  const Tensor wf = Tensor::make(DType::kF32, {N, K});
  const auto wq_bytes = testing::encode(wq, wv);
  const auto w_deq = testing::decode(wq, wq_bytes.data());
  const std::vector<float> w_deq_f(w_deq.begin(), w_deq.end());
  const ValueId x = put(xd, testing::encode(xd, xv));
  const ValueId yq = g_.matmul(x, put(wq, wq_bytes));
  const ValueId yf = g_.matmul(x, put(wf, testing::encode(wf, w_deq_f)));
  const ValueId y0 = g_.matmul(x, put(wf, testing::encode(wf, wv)));
  for (ValueId v : {yq, yf, y0}) g_.mark_output(v);
  const Status s = dev_.compute(g_);
  ASSERT_TRUE(s.ok()) << dtype_name(t) << ": " << s.to_string();
  const auto got = testing::download_values(dev_, g_.tensor(yq));
  const auto want = testing::download_values(dev_, g_.tensor(yf));
  const auto exact = testing::download_values(dev_, g_.tensor(y0));
  EXPECT_EQ(testing::max_abs_diff(got, want), 0.0) << dtype_name(t);
  // A loose sanity check that the format is not garbage: 4-bit formats on uniform data give a
  // weight NMSE around 1e-2, FP8 E5M2 (2 mantissa bits) about 1e-3; the product averages it down.
  EXPECT_LT(testing::nmse(got, exact), 2e-2) << dtype_name(t);
}

TEST_P(QuantReferenceOps, EmbedAndMatmulIdMatchDequantisedF32) {
  const DType t = GetParam();
  const int64_t E = 2, N = 3, K = 256, T = 2;
  testing::Rng rng(40 + int(t));
  const auto wv = testing::random_floats(rng, E * N * K);
  const Tensor wq = Tensor::make(t, {E, N, K});
  const Tensor wf = Tensor::make(DType::kF32, {E, N, K});
  const auto wq_bytes = testing::encode(wq, wv);
  const auto w_deq = testing::decode(wq, wq_bytes.data());
  const std::vector<float> w_deq_f(w_deq.begin(), w_deq.end());
  const ValueId wqv = put(wq, wq_bytes), wfv = put(wf, testing::encode(wf, w_deq_f));
  const Tensor xd = Tensor::make(DType::kF32, {T, K});
  const ValueId x = put(xd, testing::encode(xd, testing::random_floats(rng, T * K)));
  const Tensor idd = Tensor::make(DType::kI32, {T, 1});
  const ValueId ids = put(idd, testing::encode(idd, {1, 0}));
  const ValueId mq = g_.matmul_id(x, wqv, ids, kNoValue), mf = g_.matmul_id(x, wfv, ids, kNoValue);
  // embed over the 2-D view [E*N, K] of the same weight bytes.
  const Tensor w2 = Tensor::make(t, {E * N, K});
  const ValueId table = put(w2, wq_bytes);
  const Tensor rows = Tensor::make(DType::kI32, {3});
  const ValueId eq = g_.embed(table, put(rows, testing::encode(rows, {5, 0, 2})));
  for (ValueId v : {mq, mf, eq}) g_.mark_output(v);
  const Status s = dev_.compute(g_);
  ASSERT_TRUE(s.ok()) << dtype_name(t) << ": " << s.to_string();
  EXPECT_EQ(testing::max_abs_diff(testing::download_values(dev_, g_.tensor(mq)),
                                  testing::download_values(dev_, g_.tensor(mf))),
            0.0)
      << dtype_name(t);
  const auto emb = testing::download_values(dev_, g_.tensor(eq));
  const int64_t picks[] = {5, 0, 2};
  for (int r = 0; r < 3; ++r)
    for (int64_t k = 0; k < K; ++k)
      ASSERT_EQ(emb[size_t(r * K + k)], w_deq[size_t(picks[r] * K + k)]) << dtype_name(t) << " row " << r;
}

INSTANTIATE_TEST_SUITE_P(Quant, QuantReferenceOps, ::testing::ValuesIn(kNewFormats),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace tessera
