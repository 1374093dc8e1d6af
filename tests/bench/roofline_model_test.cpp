// The byte and FLOP counts of every kernel family against values worked out by hand.
#include "bench/roofline_model.h"

#include <gtest/gtest.h>

namespace tessera::bench {
namespace {

TEST(RooflineModel, DTypeBytesUseWholeBlocks) {
  EXPECT_EQ(dtype_bytes(DType::kF32, 10), 40);
  EXPECT_EQ(dtype_bytes(DType::kF16, 10), 20);
  EXPECT_EQ(dtype_bytes(DType::kQ8_0, 64), 68);  // 2 blocks of 34 bytes
  EXPECT_EQ(dtype_bytes(DType::kQ4_0, 64), 36);  // 2 blocks of 18
  EXPECT_EQ(dtype_bytes(DType::kQ4_1, 32), 20);
}

TEST(RooflineModel, MatmulF32) {
  // x [1, 32] f32 = 128 B, w [2, 32] f32 = 256 B, out [1, 2] = 8 B.
  const Cost c = matmul_cost(1, 2, 32, DType::kF32, DType::kF32);
  EXPECT_EQ(c.bytes, 392);
  EXPECT_EQ(c.flops, 128);
  EXPECT_DOUBLE_EQ(c.intensity(), 128.0 / 392.0);
  // A bias [2] adds 8 bytes and one add per output.
  const Cost b = matmul_cost(1, 2, 32, DType::kF32, DType::kF32, true);
  EXPECT_EQ(b.bytes, 400);
  EXPECT_EQ(b.flops, 130);
}

TEST(RooflineModel, MatmulQuantisedWeightsAtPackedSize) {
  // w [64, 64] q4_0: 64 rows x 2 blocks x 18 B = 2304; x [8, 64] f32 2048; out [8, 64] 2048.
  const Cost c = matmul_cost(8, 64, 64, DType::kF32, DType::kQ4_0);
  EXPECT_EQ(c.bytes, 6400);
  EXPECT_EQ(c.flops, 2.0 * 8 * 64 * 64);
  // q8_0: 64 x 2 x 34 = 4352 + 4096.
  EXPECT_EQ(matmul_cost(8, 64, 64, DType::kF32, DType::kQ8_0).bytes, 8448);
  // bf16: 64 x 64 x 2 = 8192 + 4096.
  EXPECT_EQ(matmul_cost(8, 64, 64, DType::kF32, DType::kBF16).bytes, 12288);
}

TEST(RooflineModel, MatmulIdReadsOnlyRoutedExperts) {
  // T=1, top-2 of 8 experts [16, 32] f32: x 128, 2 experts x 2048, ids 8, weights 8, out 64.
  const Cost c = matmul_id_cost(1, 2, 8, 16, 32, DType::kF32, DType::kF32);
  EXPECT_EQ(c.bytes, 128 + 4096 + 8 + 8 + 64);
  EXPECT_EQ(c.flops, 2.0 * 2 * 16 * 32 + 2.0 * 2 * 16);
  // T=8 routes 16 slots: all 8 experts are read once.
  const Cost d = matmul_id_cost(8, 2, 8, 16, 32, DType::kF32, DType::kF32);
  EXPECT_EQ(d.bytes, 8 * 128 + 8 * 2048 + 64 + 64 + 8 * 64);
}

TEST(RooflineModel, EmbedReadsOnlyGatheredRows) {
  // 3 rows of 64 q8_0 (2 blocks x 34) + 3 ids + [3, 64] f32 out.
  const Cost c = embed_cost(3, 64, DType::kQ8_0, DType::kF32);
  EXPECT_EQ(c.bytes, 204 + 12 + 768);
  EXPECT_EQ(c.flops, 0);
  EXPECT_EQ(c.intensity(), 0);
}

TEST(RooflineModel, Pointwise) {
  const Cost n = rms_norm_cost(2, 8, DType::kF32);  // x in + out 2 x 64 B, w 32 B
  EXPECT_EQ(n.bytes, 160);
  EXPECT_EQ(n.flops, 64);
  const Cost r = rope_cost(2, 3, 8, 8, DType::kF32);  // 2 x 192 B + 8 B positions; 24 pairs x 6
  EXPECT_EQ(r.bytes, 392);
  EXPECT_EQ(r.flops, 144);
  const Cost g = glu_cost(2, 4, DType::kF32);
  EXPECT_EQ(g.bytes, 96);
  EXPECT_EQ(g.flops, 40);
  const Cost a = binary_cost(2, 4, 1, DType::kF32);  // b broadcast: one row
  EXPECT_EQ(a.bytes, 80);
  EXPECT_EQ(a.flops, 8);
}

TEST(RooflineModel, AttentionDecodeAndPrefill) {
  AttentionShape s;
  s.n_seqs = 2, s.new_tokens = 1, s.context = 5, s.q_heads = 4, s.kv_heads = 2, s.head_dim = 8, s.block_size = 4;
  s.act = DType::kF32, s.cache = DType::kF16;
  // q + out: 2 x 64 x 4 = 512; new k, v: 2 x 32 x 4 = 256; stored: 2 x 32 x 2 = 128;
  // context K and V: 2 x (2 x 5 x 2 x 8) x 2 = 640; metadata 2 + 3 + 2 + 2 x 2 ints = 44.
  const Cost c = attention_cost(s);
  EXPECT_EQ(c.bytes, 1580);
  // Each sequence's one query sees 5 keys: 4 x Hq x D x 5 x 2 sequences.
  EXPECT_EQ(c.flops, 4.0 * 4 * 8 * 5 * 2);
  // Prefill of 4 tokens: causal, queries see 1 + 2 + 3 + 4 = 10 keys.
  s.n_seqs = 1, s.new_tokens = 4, s.context = 4;
  EXPECT_EQ(attention_cost(s).flops, 4.0 * 4 * 8 * 10);
}

TEST(RooflineModel, AttainableAndBound) {
  EXPECT_DOUBLE_EQ(attainable_flops(2, 10, 100), 20);   // under the bandwidth slope
  EXPECT_DOUBLE_EQ(attainable_flops(20, 10, 100), 100);  // past the ridge at 10 FLOP/B
  EXPECT_DOUBLE_EQ(attainable_flops(20, 10, 0), 200);    // no compute ceiling known
  EXPECT_STREQ(bound_by(2, 10, 100), "memory");
  EXPECT_STREQ(bound_by(20, 10, 100), "compute");
}

TEST(RooflineModel, StatsMedianSpreadNoisy) {
  const Stat s = make_stat({10, 1, 3, 2});
  EXPECT_DOUBLE_EQ(s.median, 2.5);
  EXPECT_DOUBLE_EQ(s.spread, 9 / 2.5);
  EXPECT_TRUE(s.noisy);
  const Stat q = make_stat({1.0, 1.05, 1.02});
  EXPECT_DOUBLE_EQ(q.median, 1.02);
  EXPECT_NEAR(q.spread, 0.05 / 1.02, 1e-12);
  EXPECT_FALSE(q.noisy);
  const Stat r = rate_stat(q, 10);  // 10 units per sample
  EXPECT_DOUBLE_EQ(r.median, 10 / 1.02);
  EXPECT_DOUBLE_EQ(r.max, 10.0);
  EXPECT_DOUBLE_EQ(r.min, 10 / 1.05);
}

}  // namespace
}  // namespace tessera::bench
