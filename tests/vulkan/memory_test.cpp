// Tensors beyond maxStorageBufferRange (128 MiB on lavapipe): the backend addresses memory by
// buffer device address, so a 160 MiB weight must embed and multiply like a small one.
#include <gtest/gtest.h>

#include <cmath>

#include "backends/vulkan/device.h"
#include "tests/vulkan/first_device.h"
#include "tests/support/test_support.h"

namespace tessera::vulkan {
namespace {

TEST(VulkanMemory, WeightLargerThanMaxStorageBufferRange) {
  auto dev = first_device();
  if (!dev) TESSERA_SKIP_HARDWARE() << "no usable Vulkan device";
  const int64_t D = 1024;
  const int64_t V = int64_t(dev->capabilities().max_storage_range / (D * 4)) + 1024;  // past the range
  ASSERT_GT(V * D * 4, int64_t(dev->capabilities().max_storage_range));
  testing::Rng rng(7);
  const std::vector<float> w = testing::random_floats(rng, V * D);
  const std::vector<float> x = testing::random_floats(rng, D);
  auto wt = upload_new(*dev, Tensor::make(DType::kF32, {V, D}, "big"), w.data());
  ASSERT_TRUE(wt.ok()) << wt.status().to_string();
  auto xt = upload_new(*dev, Tensor::make(DType::kF32, {1, D}), x.data());
  ASSERT_TRUE(xt.ok());
  const std::vector<int32_t> ids = {int32_t(V - 1), 0, int32_t(V - 2), int32_t(V / 2)};
  auto it = upload_new(*dev, Tensor::make(DType::kI32, {4}), ids.data());
  ASSERT_TRUE(it.ok());

  Graph g;
  const ValueId emb = g.embed(g.input(*wt), g.input(*it));
  const ValueId y = g.matmul(g.input(*xt), g.input(*wt));
  g.mark_output(emb);
  g.mark_output(y);
  ASSERT_TRUE(dev->compute(g).ok());

  std::vector<float> got_emb(size_t(4 * D));
  std::vector<float> got_y(static_cast<size_t>(V));
  ASSERT_TRUE(dev->download(g.tensor(emb), got_emb.data(), got_emb.size() * 4).ok());
  ASSERT_TRUE(dev->download(g.tensor(y), got_y.data(), got_y.size() * 4).ok());
  for (size_t r = 0; r < ids.size(); ++r)
    for (int64_t c = 0; c < D; ++c)
      ASSERT_EQ(got_emb[r * size_t(D) + size_t(c)], w[size_t(ids[r]) * size_t(D) + size_t(c)]) << "row " << ids[r];
  double err = 0.0, norm = 0.0;
  for (int64_t n = 0; n < V; ++n) {
    double want = 0.0;
    for (int64_t k = 0; k < D; ++k) want += double(x[size_t(k)]) * w[size_t(n * D + k)];
    err += (got_y[size_t(n)] - want) * (got_y[size_t(n)] - want);
    norm += want * want;
  }
  EXPECT_LT(err / norm, 1e-10) << "matmul over a " << V * D * 4 << "-byte weight";
  // The rows past the 128 MiB mark, checked on their own.
  const int64_t last = V - 1;
  double want_last = 0.0;
  for (int64_t k = 0; k < D; ++k) want_last += double(x[size_t(k)]) * w[size_t(last * D + k)];
  EXPECT_NEAR(got_y[size_t(last)], want_last, 1e-3 * (1.0 + std::fabs(want_last)));
}

TEST(VulkanMemory, AllocationBeyondTheDriverLimitIsAnError) {
  auto dev = first_device();
  if (!dev) TESSERA_SKIP_HARDWARE() << "no usable Vulkan device";
  const uint64_t limit = dev->capabilities().max_allocation;
  if (limit == 0) TESSERA_SKIP_HARDWARE() << "driver reports no allocation limit";
  auto b = dev->alloc(size_t(limit) + 4096);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kResourceExhausted) << b.status().to_string();
}

}  // namespace
}  // namespace tessera::vulkan
