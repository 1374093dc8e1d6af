// Launch planning of the GPU backends (backends/cuda/plan.h): grids, blocks, the launches per op,
// argument packing, and the shapes it refuses, checked on the host.
#include "backends/cuda/plan.h"

#include <gtest/gtest.h>

#include <memory>

#include "core/host_buffer.h"
#include "tests/support/test_support.h"

namespace tessera::gpu {
namespace {

// Graphs over host memory: planning needs only addresses.
struct Fixture {
  Graph g;
  std::vector<std::shared_ptr<HostBuffer>> keep;
  ValueId input(DType t, std::initializer_list<int64_t> shape) {
    Tensor d = Tensor::make(t, shape);
    auto b = HostBuffer::create(nullptr, size_t(d.nbytes()) + 64);
    keep.push_back(b);
    d.buffer = b;
    return g.input(d);
  }
  // Binds every intermediate to memory of its own (what the executor's arena does).
  void bind() {
    for (auto& v : g.mutable_values()) {
      if (v.kind != Value::Kind::kIntermediate) continue;
      auto b = HostBuffer::create(nullptr, size_t(v.tensor.nbytes()) + 64);
      keep.push_back(b);
      v.tensor.buffer = b;
    }
  }
  Result<std::vector<Launch>> plan() {
    bind();
    return plan_graph(g, [](const Tensor& t) { return static_cast<uint8_t*>(t.host_data()); }, &err, scratch);
  }
  int32_t err = 0;
  uint64_t scratch_memory[1] = {};
  Scratch scratch{reinterpret_cast<uint8_t*>(scratch_memory), 0};  // an address to check; never written
};

TEST(GpuPlan, MatmulGridCoversColumnsByWarpsAndRowsByEights) {
  for (auto [M, N, expect_x, expect_y] : {std::tuple{1, 33, 9, 1}, {8, 64, 16, 1}, {9, 64, 16, 2}, {130, 19, 5, 17}}) {
    Fixture f;
    const ValueId y = f.g.matmul(f.input(DType::kF32, {M, 64}), f.input(DType::kF16, {N, 64}));
    f.g.mark_output(y);
    auto p = f.plan();
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    ASSERT_EQ(p->size(), 1u);
    const Launch& l = (*p)[0];
    EXPECT_EQ(l.kind, KernelKind::kMatmul);
    EXPECT_EQ(l.weight, DType::kF16);
    EXPECT_EQ(l.block, uint32_t(kMatmulWarps * 32));
    EXPECT_EQ(l.grid_x, uint32_t(expect_x)) << "M=" << M << " N=" << N;
    EXPECT_EQ(l.grid_y, uint32_t(expect_y)) << "M=" << M << " N=" << N;
    const auto& a = std::get<MatmulArgs>(l.args);
    EXPECT_EQ(a.w.shape[0], N);
    EXPECT_EQ(a.x.rows(), M);
    EXPECT_EQ(a.bias.p, nullptr);
  }
}

// Integer-coded weights: the activations are quantised into the scratch region first, and the
// matmul reads them from there; float weights and K off a multiple of 16 keep the float path.
TEST(GpuPlan, IntegerWeightsQuantiseTheActivationsIntoScratchFirst) {
  const int64_t M = 9, N = 40, K = 96;
  Fixture f;
  const ValueId y = f.g.matmul(f.input(DType::kBF16, {M, K}), f.input(DType::kQ8_0, {N, K}));
  f.g.mark_output(y);
  auto p = f.plan();
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  ASSERT_EQ(p->size(), 2u);
  EXPECT_EQ((*p)[0].kind, KernelKind::kQuantizeQ8);
  EXPECT_EQ((*p)[0].grid_x, uint32_t(M));
  const auto& q = std::get<QuantizeQ8Args>((*p)[0].args);
  EXPECT_EQ(q.runs, K / 16);
  EXPECT_EQ(q.x.dtype, DType::kBF16);
  EXPECT_EQ(reinterpret_cast<uint8_t*>(q.out), f.scratch.base);
  EXPECT_EQ(f.scratch.need, size_t(M * (K / 16)) * sizeof(Q8Run));
  EXPECT_EQ((*p)[1].kind, KernelKind::kMatmul);
  EXPECT_EQ(std::get<MatmulArgs>((*p)[1].args).xq, q.out);
  for (DType w : {DType::kQ4_0, DType::kQ4_K, DType::kQ6_K, DType::kMXFP4, DType::kNVFP4, DType::kINT4_G32, DType::kINT8_PC})
    EXPECT_TRUE(matmul_uses_q8(w, 256)) << dtype_name(w);
  for (DType w : {DType::kF32, DType::kF16, DType::kBF16, DType::kFP8_E4M3, DType::kFP8_E5M2})
    EXPECT_FALSE(matmul_uses_q8(w, 256)) << dtype_name(w);
  EXPECT_FALSE(matmul_uses_q8(DType::kINT8_PC, 72));  // K not a whole number of runs
}

// From kMmaMinRows rows on, integer-coded weights take the tensor-core tile GEMM: 64 x 64 tiles of
// the output over 4 warps, after the same quantise launch; fewer rows keep the warp-per-column GEMV.
TEST(GpuPlan, PrefillRowsOfIntegerWeightsRunOnMmaTiles) {
  for (auto [M, N, mma, expect_x, expect_y] : {std::tuple{kMmaMinRows - 1, 40, false, 10, 4}, {kMmaMinRows, 40, true, 1, 1},
                                              {130, 19, true, 1, 3}, {64, 129, true, 3, 1}}) {
    Fixture f;
    const ValueId y = f.g.matmul(f.input(DType::kF32, {M, 96}), f.input(DType::kQ4_0, {N, 96}));
    f.g.mark_output(y);
    auto p = f.plan();
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    ASSERT_EQ(p->size(), 2u);
    EXPECT_EQ((*p)[0].kind, KernelKind::kQuantizeQ8);
    const Launch& l = (*p)[1];
    EXPECT_EQ(l.kind, mma ? KernelKind::kMatmulMma : KernelKind::kMatmul) << "M=" << M;
    EXPECT_EQ(l.block, uint32_t((mma ? kMmaWarps : kMatmulWarps) * 32));
    EXPECT_EQ(l.grid_x, uint32_t(expect_x)) << "M=" << M << " N=" << N;
    EXPECT_EQ(l.grid_y, uint32_t(expect_y)) << "M=" << M << " N=" << N;
    EXPECT_EQ(std::get<MatmulArgs>(l.args).xq, std::get<QuantizeQ8Args>((*p)[0].args).out);
  }
  // Float weights never do (no int8 codes to multiply).
  Fixture f;
  f.g.mark_output(f.g.matmul(f.input(DType::kF32, {128, 64}), f.input(DType::kF16, {64, 64})));
  auto p = f.plan();
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  ASSERT_EQ(p->size(), 1u);
  EXPECT_EQ((*p)[0].kind, KernelKind::kMatmul);
}

TEST(GpuPlan, AttentionStoresTheCacheThenAttendsPerTokenAndHead) {
  Fixture f;
  const int64_t T = 5, Hq = 6, Hkv = 2, D = 64, blocks = 4, bs = 16;
  Graph::AttentionInputs in{f.input(DType::kF16, {T, Hq, D}), f.input(DType::kF16, {T, Hkv, D}),
                            f.input(DType::kF16, {T, Hkv, D}), f.input(DType::kFP8_E4M3, {blocks, bs, Hkv, D}),
                            f.input(DType::kFP8_E4M3, {blocks, bs, Hkv, D}), f.input(DType::kI32, {T}),
                            f.input(DType::kI32, {3}), f.input(DType::kI32, {2}), f.input(DType::kI32, {2, 4})};
  f.g.mark_output(f.g.attention(in, AttentionParams{}));
  auto p = f.plan();
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  ASSERT_EQ(p->size(), 2u);
  EXPECT_EQ((*p)[0].kind, KernelKind::kKvStore);
  EXPECT_EQ((*p)[0].grid_x, uint32_t(T));
  EXPECT_EQ(std::get<KvStoreArgs>((*p)[0].args).n_slots, blocks * bs);
  const Launch& a = (*p)[1];
  EXPECT_EQ(a.kind, KernelKind::kAttention);
  EXPECT_EQ(a.grid_x, uint32_t(T));
  EXPECT_EQ(a.grid_y, uint32_t(Hq));
  const auto& args = std::get<AttentionArgs>(a.args);
  EXPECT_EQ(args.hkv, Hkv);
  EXPECT_EQ(args.n_seqs, 2);
  EXPECT_EQ(args.block_size, bs);
  EXPECT_FLOAT_EQ(args.scale, 0.125f);  // 1 / sqrt(64)
  EXPECT_EQ(args.err, &f.err);
}

// A head dim above 256 (Gemma 4's 512-wide global layers) runs on the wide attention kernel; one
// at or below 256 keeps the narrow one.
TEST(GpuPlan, WideHeadsTakeTheWideAttentionKernel) {
  for (const int64_t D : {int64_t(256), int64_t(320), int64_t(512)}) {
    Fixture f;
    Graph::AttentionInputs in{
        f.input(DType::kF32, {1, 1, D}),     f.input(DType::kF32, {1, 1, D}),     f.input(DType::kF32, {1, 1, D}),
        f.input(DType::kF32, {1, 16, 1, D}), f.input(DType::kF32, {1, 16, 1, D}), f.input(DType::kI32, {1}),
        f.input(DType::kI32, {2}),           f.input(DType::kI32, {1}),           f.input(DType::kI32, {1, 1})};
    f.g.mark_output(f.g.attention(in, AttentionParams{}));
    auto p = f.plan();
    ASSERT_TRUE(p.ok()) << "D=" << D << ": " << p.status().to_string();
    ASSERT_EQ(p->size(), 2u);
    EXPECT_EQ((*p)[1].kind, D > 256 ? KernelKind::kAttentionWide : KernelKind::kAttention) << "D=" << D;
  }
}

// A long-context decode splits its keys over several blocks per (row, head) and merges them in
// a second launch; a prefill-sized launch or a short KV capacity does not split.
TEST(GpuPlan, LongDecodeAttentionSplitsKeysAndCombines) {
  EXPECT_EQ(attention_splits(1, 32, 32768), 16);  // 512 blocks / 32 heads
  EXPECT_EQ(attention_splits(1, 8, 4096), 16);    // capped by 256 keys per part
  EXPECT_EQ(attention_splits(1, 1, 1 << 20), kAttnMaxSplits);
  EXPECT_EQ(attention_splits(1, 32, 511), 1);     // under two parts' worth of keys
  EXPECT_EQ(attention_splits(64, 8, 32768), 1);   // 512 blocks already
  Fixture f;
  const int64_t T = 2, Hq = 8, Hkv = 2, D = 64, bs = 16, max_blocks = 128, blocks = 300;
  Graph::AttentionInputs in{f.input(DType::kF16, {T, Hq, D}), f.input(DType::kF16, {T, Hkv, D}),
                            f.input(DType::kF16, {T, Hkv, D}), f.input(DType::kF16, {blocks, bs, Hkv, D}),
                            f.input(DType::kF16, {blocks, bs, Hkv, D}), f.input(DType::kI32, {T}),
                            f.input(DType::kI32, {3}), f.input(DType::kI32, {2}), f.input(DType::kI32, {2, max_blocks})};
  f.g.mark_output(f.g.attention(in, AttentionParams{}));
  auto p = f.plan();
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  ASSERT_EQ(p->size(), 3u);
  EXPECT_EQ((*p)[0].kind, KernelKind::kKvStore);
  const int splits = attention_splits(T, Hq, max_blocks * bs);
  EXPECT_EQ(splits, 8);  // 2048 keys / 256
  const auto& a = std::get<AttentionArgs>((*p)[1].args);
  EXPECT_EQ(a.splits, splits);
  EXPECT_EQ((*p)[1].grid_x, uint32_t(T * splits));
  EXPECT_EQ((*p)[1].grid_y, uint32_t(Hq));
  EXPECT_EQ(reinterpret_cast<uint8_t*>(a.partial), f.scratch.base);
  EXPECT_EQ(f.scratch.need, size_t(T * Hq * splits * (D + 2) * 4));
  EXPECT_EQ((*p)[2].kind, KernelKind::kAttentionCombine);
  EXPECT_EQ((*p)[2].grid_x, uint32_t(T * Hq));
  EXPECT_EQ(std::get<AttentionCombineArgs>((*p)[2].args).partial, a.partial);
}

// matmul_id is one grouped launch over the experts' tiles, after a sort of the (token, slot)
// pairs by expert (and the activations' quantisation for integer formats); with routing weights
// a weighted sum follows. Its grid covers every tile the pairs could need, with no padding of
// each expert to the largest.
TEST(GpuPlan, MatmulIdSortsPairsThenRunsOneGroupedLaunch) {
  const int64_t T = 5, k = 2, E = 6, N = 40, K = 64;
  Fixture f;
  const ValueId x = f.input(DType::kF32, {T, K});
  const ValueId w = f.input(DType::kQ4_0, {E, N, K});
  const ValueId ids = f.input(DType::kI32, {T, k});
  const ValueId wts = f.input(DType::kF32, {T, k});
  f.g.mark_output(f.g.matmul_id(x, w, ids, wts));
  auto p = f.plan();
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  ASSERT_EQ(p->size(), 4u);
  EXPECT_EQ((*p)[0].kind, KernelKind::kMoeSort);
  EXPECT_EQ((*p)[0].grid_x, 1u);
  EXPECT_EQ(std::get<MoeSortArgs>((*p)[0].args).experts, E);
  EXPECT_EQ((*p)[1].kind, KernelKind::kQuantizeQ8);
  EXPECT_EQ((*p)[1].grid_x, uint32_t(T));
  const Launch& mm = (*p)[2];
  EXPECT_EQ(mm.kind, KernelKind::kMatmulId);
  EXPECT_EQ(mm.grid_x, uint32_t((N + kMatmulWarps - 1) / kMatmulWarps));
  EXPECT_EQ(mm.grid_y, uint32_t((T * k + kMatmulRows - 1) / kMatmulRows + E + 1));
  const auto& a = std::get<MatmulIdArgs>(mm.args);
  EXPECT_NE(a.xq, nullptr);
  EXPECT_NE(a.y, nullptr);
  EXPECT_EQ(reinterpret_cast<const uint8_t*>(a.order), f.scratch.base);
  EXPECT_EQ((*p)[3].kind, KernelKind::kMoeWeightedSum);
  EXPECT_EQ((*p)[3].grid_x, uint32_t(T));
  EXPECT_EQ(std::get<MoeWeightedSumArgs>((*p)[3].args).y, a.y);
  // order, offsets, the quantised x and y, each 16-byte aligned
  const size_t want = 48 + 32 + size_t(T * K / 16) * sizeof(Q8Run) + size_t(T * k * N) * 4;
  EXPECT_EQ(f.scratch.need, want);
}

TEST(GpuPlan, RefusesShapesTheKernelsDoNotTakeNamingTheNode) {
  {
    Fixture f;  // head dim above kMaxHeadDimWide (512, Gemma 4's global layers)
    const int64_t D = 640;
    Graph::AttentionInputs in{f.input(DType::kF32, {1, 1, D}), f.input(DType::kF32, {1, 1, D}),
                              f.input(DType::kF32, {1, 1, D}), f.input(DType::kF32, {1, 16, 1, D}),
                              f.input(DType::kF32, {1, 16, 1, D}), f.input(DType::kI32, {1}),
                              f.input(DType::kI32, {2}), f.input(DType::kI32, {1}), f.input(DType::kI32, {1, 1})};
    f.g.mark_output(f.g.attention(in, AttentionParams{}));
    auto p = f.plan();
    ASSERT_FALSE(p.ok());
    EXPECT_NE(p.status().message().find("head dim 640"), std::string::npos) << p.status().to_string();
    EXPECT_NE(p.status().message().find("attention"), std::string::npos);
  }
  {
    Fixture f;  // a weight repacked by another backend
    const ValueId x = f.input(DType::kF32, {1, 64});
    const ValueId w = f.input(DType::kQ4_0, {16, 64});
    f.g.mutable_values()[size_t(w)].tensor.layout = WeightLayout::kCpuTile16;
    f.g.mark_output(f.g.matmul(x, w));
    auto p = f.plan();
    ASSERT_FALSE(p.ok());
    EXPECT_NE(p.status().message().find("another backend's weight layout"), std::string::npos) << p.status().to_string();
  }
  {
    Fixture f;  // more experts than one thread's selection holds
    auto [ids, w] = f.g.topk_route(f.input(DType::kF32, {2, 600}), TopkRouteParams{});
    f.g.mark_output(ids);
    f.g.mark_output(w);
    auto p = f.plan();
    ASSERT_FALSE(p.ok());
    EXPECT_NE(p.status().message().find("more than 512 experts"), std::string::npos) << p.status().to_string();
  }
}

TEST(GpuPlan, AnEmptyBatchLaunchesNothingAndViewsGetNoLaunch) {
  Fixture f;
  const ValueId x = f.input(DType::kF32, {0, 32});
  const ValueId y = f.g.rms_norm(f.g.reshape(x, {0, 32}), kNoValue, 1e-5f);
  f.g.mark_output(y);
  auto p = f.plan();
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  ASSERT_EQ(p->size(), 1u);  // the reshape is a view
  EXPECT_EQ((*p)[0].kind, KernelKind::kNorm);
  EXPECT_EQ((*p)[0].grid_x, 0u);
}

TEST(GpuPlan, ViewRowOffsetsMatchTheTensorsForStridedRanks) {
  Tensor t = Tensor::make(DType::kF32, {3, 4, 5, 6});
  t.stride = {1000, 200, 32, 4};
  View v;
  v.rank = 4;
  for (int i = 0; i < 4; ++i) {
    v.shape[i] = t.shape[size_t(i)];
    v.stride[i] = t.stride[size_t(i)];
  }
  for (int64_t r = 0; r < t.rows(); ++r) ASSERT_EQ(v.row_offset(r), t.row_offset(r)) << r;
  EXPECT_EQ(v.rows(), 60);
  EXPECT_EQ(v.cols(), 6);
}

TEST(GpuPlan, SupportsEveryOpForEveryActivationAndWeightFormat) {
  for (DType act : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int i = 0; i < kNumDTypes; ++i) {
      const DType w = DType(i);
      const bool weight_format = w != DType::kI8 && w != DType::kI32;
      EXPECT_EQ(supports(OpKind::kMatmul, act, w), weight_format) << dtype_name(w);
      EXPECT_EQ(supports(OpKind::kMatmulId, act, w), weight_format) << dtype_name(w);
      EXPECT_EQ(supports(OpKind::kEmbed, act, w), weight_format) << dtype_name(w);
    }
    for (DType kv : {DType::kF32, DType::kF16, DType::kBF16, DType::kFP8_E4M3, DType::kINT8_PC})
      EXPECT_TRUE(supports(OpKind::kAttention, act, kv)) << dtype_name(kv);
    EXPECT_FALSE(supports(OpKind::kAttention, act, DType::kQ8_0));
    EXPECT_TRUE(supports(OpKind::kRope, act, act));
    EXPECT_FALSE(supports(OpKind::kRope, act, DType::kI32));
  }
  EXPECT_FALSE(supports(OpKind::kAdd, DType::kI32, DType::kI32));
}

}  // namespace
}  // namespace tessera::gpu
