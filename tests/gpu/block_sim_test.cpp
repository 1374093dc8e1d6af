// The host simulator of GPU blocks (backends/cuda/sim/block_sim.h): warp shuffles, block
// barriers and shared memory behave as on a GPU, and a divergent barrier is reported.
#include "backends/cuda/sim/block_sim.h"

#include <gtest/gtest.h>

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
