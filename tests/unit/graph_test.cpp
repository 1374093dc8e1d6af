#include <gtest/gtest.h>

#include "core/graph.h"
#include "core/reference/reference.h"

namespace tessera {
namespace {

class GraphTest : public ::testing::Test {
 protected:
  ValueId in(DType t, std::initializer_list<int64_t> shape) {
    auto r = upload_new(dev_, Tensor::make(t, shape), nullptr);
    EXPECT_TRUE(r.ok());
    return g_.input(*r);
  }
  ref::ReferenceDevice dev_;
  Graph g_;
};

TEST(TensorShape, RowsAreTheLeadingDimsEvenWithoutColumns) {
  EXPECT_EQ(Tensor::make(DType::kF32, {3, 5, 7}).rows(), 15);
  EXPECT_EQ(Tensor::make(DType::kF32, {7}).rows(), 1);
  EXPECT_EQ(Tensor::make(DType::kF32, {}).rows(), 1);
  // Zero columns: rows() once divided numel() by the last dim (SIGFPE).
  const Tensor empty = Tensor::make(DType::kF32, {4, 0});
  EXPECT_EQ(empty.rows(), 4);
  EXPECT_EQ(empty.cols(), 0);
  EXPECT_EQ(empty.nbytes(), 0);
  EXPECT_EQ(Tensor::make(DType::kF32, {0, 6}).rows(), 0);
}

TEST_F(GraphTest, InfersShapes) {
  const ValueId x = in(DType::kF32, {5, 64});
  const ValueId w = in(DType::kQ4_0, {96, 64});
  const ValueId y = g_.matmul(x, w);
  ASSERT_TRUE(g_.status().ok()) << g_.status().to_string();
  EXPECT_EQ(g_.tensor(y).rank, 2);
  EXPECT_EQ(g_.tensor(y).shape[0], 5);
  EXPECT_EQ(g_.tensor(y).shape[1], 96);
  const ValueId h = g_.reshape(y, {5, 3, 32});
  EXPECT_EQ(g_.tensor(h).shape[1], 3);
  EXPECT_EQ(g_.value(h).kind, Value::Kind::kView);
  auto [ids, wts] = g_.topk_route(y, TopkRouteParams{.k = 4});
  EXPECT_EQ(g_.tensor(ids).dtype, DType::kI32);
  EXPECT_EQ(g_.tensor(wts).shape[1], 4);
  EXPECT_TRUE(g_.status().ok());
}

TEST_F(GraphTest, RejectsMismatchedKWithAMessageNamingShapes) {
  const ValueId x = in(DType::kF32, {5, 63});
  const ValueId w = in(DType::kF32, {96, 64});
  EXPECT_EQ(g_.matmul(x, w), kNoValue);
  EXPECT_EQ(g_.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(g_.status().message().find("matmul: K mismatch"), std::string::npos) << g_.status().message();
  EXPECT_NE(g_.status().message().find("[5, 63] f32"), std::string::npos);
  // Later calls are ignored and the first error is kept.
  g_.softmax(x);
  EXPECT_NE(g_.status().message().find("matmul"), std::string::npos);
}

TEST_F(GraphTest, RejectsQuantRowsThatAreNotWholeBlocks) {
  // A q4_0 weight with K=48 cannot exist; the graph rejects the matmul with the block message.
  const ValueId x = in(DType::kF32, {1, 40});
  Tensor bad = Tensor::make(DType::kF32, {8, 40});
  auto r = upload_new(dev_, bad, nullptr);
  ASSERT_TRUE(r.ok());
  Tensor w = *r;
  w.dtype = DType::kQ4_0;  // pretend
  const ValueId wid = g_.input(w);
  g_.matmul(x, wid);
  EXPECT_NE(g_.status().message().find("not a multiple of the block size"), std::string::npos) << g_.status().message();
}

TEST_F(GraphTest, RejectsViewsPastTheEnd) {
  const ValueId x = in(DType::kF32, {4, 8});
  EXPECT_EQ(g_.view(x, {4, 9}, {32, 4}, 0), kNoValue);
  EXPECT_EQ(g_.status().code(), StatusCode::kInvalidArgument);
}

TEST_F(GraphTest, RejectsBadAttentionAndRouteArguments) {
  const ValueId q = in(DType::kF32, {3, 4, 64});
  const ValueId kv = in(DType::kF32, {3, 3, 64});  // 4 q heads not a multiple of 3 kv heads
  const ValueId cache = in(DType::kF32, {4, 16, 3, 64});
  const ValueId i1 = in(DType::kI32, {3});
  g_.attention({q, kv, kv, cache, cache, i1, in(DType::kI32, {2}), in(DType::kI32, {1}), in(DType::kI32, {1, 4})}, {});
  EXPECT_NE(g_.status().message().find("not a multiple of kv heads"), std::string::npos) << g_.status().message();

  Graph g2;
  auto r = upload_new(dev_, Tensor::make(DType::kF32, {2, 8}), nullptr);
  const ValueId l = g2.input(*r);
  g2.topk_route(l, TopkRouteParams{.k = 9});
  EXPECT_NE(g2.status().message().find("k=9"), std::string::npos);
}

// gpt-oss's additions: attention sinks must be [Hq] f32, matmul_id's expert bias [E, N] float,
// swiglu_oai's limit positive; each error names the op and the shapes.
TEST_F(GraphTest, RejectsBadAttentionSinks) {
  const ValueId q = in(DType::kF32, {3, 4, 64});
  const ValueId kv = in(DType::kF32, {3, 2, 64});
  const ValueId cache = in(DType::kF32, {4, 16, 2, 64});
  Graph::AttentionInputs a{q,
                           kv,
                           kv,
                           cache,
                           cache,
                           in(DType::kI32, {3}),
                           in(DType::kI32, {2}),
                           in(DType::kI32, {1}),
                           in(DType::kI32, {1, 4}),
                           in(DType::kF32, {2})};
  EXPECT_EQ(g_.attention(a, {}), kNoValue);
  EXPECT_NE(g_.status().message().find("sinks must be contiguous [Hq] = [4] f32, got [2] f32"), std::string::npos)
      << g_.status().message();
}

TEST_F(GraphTest, AcceptsAttentionSinksAndExpertBiases) {
  const ValueId q = in(DType::kF16, {3, 4, 64});
  const ValueId kv = in(DType::kF16, {3, 2, 64});
  const ValueId cache = in(DType::kF16, {4, 16, 2, 64});
  const ValueId o = g_.attention({q, kv, kv, cache, cache, in(DType::kI32, {3}), in(DType::kI32, {2}),
                                  in(DType::kI32, {1}), in(DType::kI32, {1, 4}), in(DType::kF32, {4})},
                                 {});
  ASSERT_NE(o, kNoValue) << g_.status().to_string();
  EXPECT_EQ(g_.nodes()[size_t(g_.value(o).producer)].inputs.size(), 10u);
  const ValueId x = in(DType::kF32, {5, 64});
  const ValueId ids = in(DType::kI32, {5, 2});
  const ValueId y = g_.matmul_id(x, in(DType::kMXFP4, {8, 32, 64}), ids, kNoValue, in(DType::kF32, {8, 32}));
  ASSERT_NE(y, kNoValue) << g_.status().to_string();
  EXPECT_EQ(g_.tensor(y).shape[2], 32);
  EXPECT_NE(g_.glu(y, y, GluParams{GluKind::kSwigluOai, 1.702f, 7.0f}), kNoValue);
  EXPECT_TRUE(g_.status().ok());
}

TEST_F(GraphTest, RejectsBadExpertBiasAndGluLimit) {
  const ValueId x = in(DType::kF32, {5, 64});
  const ValueId ids = in(DType::kI32, {5, 2});
  EXPECT_EQ(g_.matmul_id(x, in(DType::kF32, {8, 32, 64}), ids, kNoValue, in(DType::kF32, {8, 31})), kNoValue);
  EXPECT_NE(g_.status().message().find("bias must be contiguous [E, N] = [8, 32] float, got [8, 31] f32"),
            std::string::npos)
      << g_.status().message();
  Graph g2;
  auto t = upload_new(dev_, Tensor::make(DType::kF32, {2, 8}), nullptr);
  const ValueId a = g2.input(*t);
  EXPECT_EQ(g2.glu(a, a, GluParams{GluKind::kSwigluOai, 1.702f, 0.0f}), kNoValue);
  EXPECT_NE(g2.status().message().find("swiglu_oai needs limit > 0"), std::string::npos) << g2.status().message();
}

TEST_F(GraphTest, ShapeHashDependsOnShapes) {
  Graph a, b, c;
  auto t1 = *upload_new(dev_, Tensor::make(DType::kF32, {2, 8}), nullptr);
  auto t2 = *upload_new(dev_, Tensor::make(DType::kF32, {3, 8}), nullptr);
  a.softmax(a.input(t1));
  b.softmax(b.input(t1));
  c.softmax(c.input(t2));
  EXPECT_EQ(a.shape_hash(), b.shape_hash());
  EXPECT_NE(a.shape_hash(), c.shape_hash());
}

}  // namespace
}  // namespace tessera
