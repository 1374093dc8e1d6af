// The host simulator of GPU blocks (backends/cuda/sim/block_sim.h): warp shuffles, block
// barriers and shared memory behave as on a GPU, and a divergent barrier is reported.
#include "backends/cuda/sim/block_sim.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "backends/cuda/kernels.h"

namespace tessera::gpu::sim {
namespace {

TEST(BlockSim, WarpSumsAreSumsOverEachWarpOfThirtyTwoLanes) {
  BlockSim sim;
  std::vector<float> out(2 * 96, 0.0f);
  const std::string err = sim.run(2, 1, 96, [&](HostCtx& c) {
    const float v = float(c.tid() + 1000 * c.bx());
    out[size_t(c.bx() * 96 + c.tid())] = warp_sum(c, v);
  });
  ASSERT_EQ(err, "");
  for (int b = 0; b < 2; ++b)
    for (int t = 0; t < 96; ++t) {
      const int w0 = t / 32 * 32;
      float want = 0.0f;
      for (int l = w0; l < w0 + 32; ++l) want += float(l + 1000 * b);
      ASSERT_EQ(out[size_t(b * 96 + t)], want) << "block " << b << " thread " << t;
    }
}

TEST(BlockSim, BarrierPublishesSharedMemoryToTheWholeBlock) {
  BlockSim sim;
  std::vector<float> out(128, 0.0f);
  const std::string err = sim.run(1, 1, 128, [&](HostCtx& c) {
    float* s = c.smem<1, float, 128>();
    s[c.tid()] = float(c.tid() * 3);
    c.sync();
    out[size_t(c.tid())] = s[(c.tid() + 77) % 128];  // written by a thread of another warp
  });
  ASSERT_EQ(err, "");
  for (int t = 0; t < 128; ++t) EXPECT_EQ(out[size_t(t)], float(((t + 77) % 128) * 3)) << t;
  // block_sum / block_max reuse slot 0 across calls.
  std::vector<float> sums(64), maxes(64);
  ASSERT_EQ(sim.run(1, 1, 64, [&](HostCtx& c) {
    sums[size_t(c.tid())] = block_sum(c, 1.0f);
    maxes[size_t(c.tid())] = block_max(c, float(c.tid()));
  }), "");
  for (int t = 0; t < 64; ++t) {
    EXPECT_EQ(sums[size_t(t)], 64.0f);
    EXPECT_EQ(maxes[size_t(t)], 63.0f);
  }
}

TEST(BlockSim, ADivergentBarrierIsReportedNotHung) {
  BlockSim sim;
  // Half of warp 1 shuffles while everyone else waits at the block barrier: neither can complete
  // (a hang, or undefined behaviour, on a GPU).
  const std::string err = sim.run(1, 1, 64, [&](HostCtx& c) {
    if (c.tid() >= 32 && c.tid() < 48) (void)c.shfl_xor(1.0f, 1);
    else c.sync();
  });
  EXPECT_NE(err.find("divergent barrier"), std::string::npos) << err;
  // Warps that meet at different barrier call sites are fine (as on Volta and later).
  EXPECT_EQ(sim.run(1, 1, 64, [&](HostCtx& c) {
    if (c.tid() < 32) c.sync();
    else (void)c.shfl_xor(1.0f, 1);
    if (c.tid() < 32) (void)c.shfl_xor(1.0f, 1);
    else c.sync();
  }), "");
}

// The int8 mma of a warp, as the simulator's collective and as the shuffle form HIP runs, against
// a plain matrix product: the fragments are laid out as PTX's mma.m16n8k16.row.col.s32.s8.s8.s32
// documents (kernels.h mma_s8_shfl), over random codes in [-128, 127] and a nonzero D to add to.
TEST(BlockSim, WarpMmaMultipliesTheFragmentsPtxDescribes) {
  std::mt19937 rng(21);
  std::uniform_int_distribution<int> code(-128, 127), acc0(-100000, 100000);
  int8_t A[16][16], B[16][8];
  int32_t D0[16][8];
  for (auto& r : A)
    for (auto& v : r) v = int8_t(code(rng));
  for (auto& r : B)
    for (auto& v : r) v = int8_t(code(rng));
  for (auto& r : D0)
    for (auto& v : r) v = acc0(rng);
  auto pack = [](int8_t b0, int8_t b1, int8_t b2, int8_t b3) {
    return int32_t(uint32_t(uint8_t(b0)) | uint32_t(uint8_t(b1)) << 8 | uint32_t(uint8_t(b2)) << 16 |
                   uint32_t(uint8_t(b3)) << 24);
  };
  for (bool shuffles : {false, true}) {
    int32_t D[2][16][8] = {};
    BlockSim sim;
    // Two warps doing the same product: the second's lanes must read their own warp's fragments.
    ASSERT_EQ(sim.run(1, 1, 64, [&](HostCtx& c) {
      const int lane = c.tid() % 32, g = lane / 4, t = lane % 4;
      const int32_t a0 = pack(A[g][4 * t], A[g][4 * t + 1], A[g][4 * t + 2], A[g][4 * t + 3]);
      const int32_t a1 = pack(A[g + 8][4 * t], A[g + 8][4 * t + 1], A[g + 8][4 * t + 2], A[g + 8][4 * t + 3]);
      const int32_t b = pack(B[4 * t][g], B[4 * t + 1][g], B[4 * t + 2][g], B[4 * t + 3][g]);
      int32_t d[4] = {D0[g][2 * t], D0[g][2 * t + 1], D0[g + 8][2 * t], D0[g + 8][2 * t + 1]};
      if (c.tid() >= 32) {
        const int32_t x = c.shfl(a0 ^ 0x5a5a5a5a, 31 - lane);  // an unrelated shuffle first: banks alternate
        ASSERT_EQ(x, pack(A[7 - g][4 * (3 - t)], A[7 - g][4 * (3 - t) + 1], A[7 - g][4 * (3 - t) + 2],
                          A[7 - g][4 * (3 - t) + 3]) ^ 0x5a5a5a5a);
      }
      if (shuffles) mma_s8_shfl(c, a0, a1, b, d);
      else c.mma_s8(a0, a1, b, d);
      auto& out = D[c.tid() / 32];
      out[g][2 * t] = d[0];
      out[g][2 * t + 1] = d[1];
      out[g + 8][2 * t] = d[2];
      out[g + 8][2 * t + 1] = d[3];
    }), "");
    for (int w = 0; w < 2; ++w)
      for (int i = 0; i < 16; ++i)
        for (int j = 0; j < 8; ++j) {
          int32_t want = D0[i][j];
          for (int k = 0; k < 16; ++k) want += int32_t(A[i][k]) * int32_t(B[k][j]);
          ASSERT_EQ(D[w][i][j], want) << (shuffles ? "shuffles" : "collective") << " warp " << w << " D[" << i
                                      << "][" << j << "]";
        }
  }
}

TEST(BlockSim, TheFirstKernelErrorIsKept) {
  BlockSim sim;
  int32_t word = 0;
  ASSERT_EQ(sim.run(3, 1, 32, [&](HostCtx& c) {
    if (c.tid() == 5) c.set_error(&word, c.bx() == 0 ? KernelError::kEmbedId : KernelError::kExpertId);
  }), "");
  EXPECT_EQ(word, int32_t(KernelError::kEmbedId));
}

}  // namespace
}  // namespace tessera::gpu::sim
