// The Vulkan device beyond the conformance suite: start-up without a loader, the staging path
// of devices without host-visible device memory, validation-layer accounting, timestamps,
// pipeline caching, rejected metadata, and permuted (non-contiguous) inputs to every row kernel.
#include <gtest/gtest.h>

#include <cstdlib>

#include "backends/vulkan/device.h"
#include "core/exec/executor.h"
#include "tests/support/test_support.h"
#include "tests/vulkan/first_device.h"
#include "tests/conformance/harness.h"

namespace tessera::vulkan {
namespace {

using conformance::Case;
using conformance::CaseContext;
using V = std::vector<ValueId>;

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    setenv(name, value, 1);
  }
  ~ScopedEnv() { had_ ? setenv(name_, old_.c_str(), 1) : unsetenv(name_); }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

TEST(VulkanProbe, NoLoaderIsAnUnavailableEntryNotACrash) {
  ScopedEnv env("TESSERA_VULKAN_LOADER", "/nonexistent/libvulkan.so.1");
  std::vector<DeviceEntry> entries;
  probe_devices(entries, {});
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].device, nullptr);
  EXPECT_EQ(entries[0].id, "vulkan");
  EXPECT_EQ(entries[0].why.code(), StatusCode::kUnavailable);
  EXPECT_NE(entries[0].why.message().find("no Vulkan loader (/nonexistent/libvulkan.so.1)"), std::string::npos)
      << entries[0].why.message();
}

TEST(VulkanProbe, CpuImplementationsAreMarkedEmulated) {
  std::vector<DeviceEntry> entries;
  probe_devices(entries, {});
  for (const auto& e : entries) {
    if (!e.device) continue;
    EXPECT_EQ(e.id.rfind("vulkan:", 0), 0u) << e.id;
    if (e.device->info().name.find("llvmpipe") != std::string::npos) {
      EXPECT_TRUE(e.device->info().emulated);
    }
  }
}

// A few cases of each kernel family, including permuted inputs the conformance suite only
// feeds to copy.
std::vector<Case> mixed_cases() {
  std::vector<Case> cases;
  uint64_t seed = 9000;
  for (DType w : {DType::kF16, DType::kQ4_0, DType::kQ8_0})
    cases.push_back({std::string("matmul tiled+vec w=") + dtype_name(w), OpKind::kMatmul, DType::kF32, w, ++seed,
                     [=](CaseContext& c) {
                       const ValueId wt = c.input(w, {40, 64});
                       return V{c.graph().matmul(c.input(DType::kF32, {9, 64}), wt),
                                c.graph().matmul(c.input(DType::kF32, {1, 64}), wt)};
                     }});
  // Transposed views ([6,4] of a [4,6] buffer) into matmul, rms_norm, softmax, add, rope.
  cases.push_back({"permuted inputs", OpKind::kMatmul, DType::kF32, DType::kF32, ++seed, [](CaseContext& c) {
                     Graph& g = c.graph();
                     const ValueId base = c.input(DType::kF32, {8, 6});
                     const ValueId t = g.view(base, {6, 8}, {4, 24}, 0);  // x^T: element stride 24 bytes
                     const ValueId mm = g.matmul(t, c.input(DType::kF32, {5, 8}));
                     const ValueId rn = g.rms_norm(t, kNoValue, 1e-5f);
                     const ValueId sm = g.softmax(t, 1.3f);
                     const ValueId ad = g.add(t, c.input(DType::kF32, {8}));
                     const ValueId r3 = g.view(base, {2, 3, 8}, {12, 4, 24}, 0);  // a permuted 3-D view
                     RopeParams rp;
                     rp.n_dims = 8;
                     const ValueId ro = g.rope(g.view(base, {3, 2, 8}, {4, 12, 24}, 0), c.i32_values({3}, {5, 9, 300}), rp);
                     return V{mm, rn, sm, ad, g.copy(r3), ro};
                   }});
  cases.push_back({"embed+norm+glu chain f16", OpKind::kEmbed, DType::kF16, DType::kQ4_1, ++seed, [](CaseContext& c) {
                     Graph& g = c.graph();
                     const ValueId e = g.embed(c.input(DType::kQ4_1, {10, 64}), c.i32_values({3}, {9, 0, 4}), DType::kF16);
                     const ValueId n = g.rms_norm(e, c.input(DType::kF16, {64}), 1e-5f);
                     return V{g.swiglu(n, g.scale(n, 0.5f))};
                   }});
  return cases;
}

TEST(VulkanDevice, StagingPathMatchesTheReference) {
  auto dev = first_device({.force_staging = true});
  if (!dev) TESSERA_SKIP_HARDWARE() << "no usable Vulkan device";
  auto buf = dev->alloc(64);
  ASSERT_TRUE(buf.ok());
  EXPECT_EQ((*buf)->host_ptr(), nullptr) << "force_staging must leave device memory unmapped";
  for (const Case& c : mixed_cases()) EXPECT_EQ(conformance::run_case(*dev, c), "") << c.name;
}

TEST(VulkanDevice, MappedPathMatchesTheReference) {
  auto dev = first_device();
  if (!dev) TESSERA_SKIP_HARDWARE() << "no usable Vulkan device";
  for (const Case& c : mixed_cases()) EXPECT_EQ(conformance::run_case(*dev, c), "") << c.name;
}

// lavapipe runs prefill matmuls on the GEMV (see Capabilities::tiled_gemm); the tiled GEMM that
// GPUs use must still match the reference there, on every weight format and activation dtype.
TEST(VulkanDevice, TiledGemmMatchesTheReference) {
  auto dev = first_device({.force_tiled_gemm = true});
  if (!dev) TESSERA_SKIP_HARDWARE() << "no usable Vulkan device";
  uint64_t seed = 9100;
  for (DType w : conformance::required_weight_dtypes())
    for (DType a : {DType::kF32, DType::kF16}) {
      // Partial tiles in M and N, a K tail for the float formats, a bias.
      const int64_t K = dtype_traits(w).is_quantized ? 160 : 45;
      const Case c{std::string("tiled matmul w=") + dtype_name(w) + " a=" + dtype_name(a), OpKind::kMatmul, a, w, ++seed,
                   [=](CaseContext& cc) {
                     return V{cc.graph().matmul(cc.input(a, {37, K}), cc.input(w, {70, K}), cc.input(DType::kF32, {70}))};
                   }};
      EXPECT_EQ(conformance::run_case(*dev, c), "") << c.name;
      ASSERT_EQ(dev->last_timings().size(), 1u);
      EXPECT_EQ(dev->last_timings()[0].kernel, std::string("matmul_tiled_") + dtype_name(w));
    }
}

TEST(VulkanDevice, RopeWithoutFloat64) {
  auto dev = first_device({.disable_fp64 = true});
  if (!dev) TESSERA_SKIP_HARDWARE() << "no usable Vulkan device";
  for (RopeMode mode : {RopeMode::kNormal, RopeMode::kNeox}) {
    Case c{"rope fp32 angles", OpKind::kRope, DType::kF32, DType::kF32, 77, [=](CaseContext& cc) {
             RopeParams p;
             p.n_dims = 32;
             p.mode = mode;
             return V{cc.graph().rope(cc.input(DType::kF32, {4, 2, 48}), cc.i32_values({4}, {0, 3, 64, 255}), p)};
           }};
    c.tolerance = 1e-8;  // float angles: ~2e-5 rad at position 255
    EXPECT_EQ(conformance::run_case(*dev, c), "");
  }
}

TEST(VulkanDevice, TimingsAndPipelineCache) {
  auto dev = first_device({.force_tiled_gemm = true});
  if (!dev) TESSERA_SKIP_HARDWARE() << "no usable Vulkan device";
  const Case c = mixed_cases()[0];
  ASSERT_EQ(conformance::run_case(*dev, c), "");
  const size_t pipelines = dev->pipeline_count();
  EXPECT_GE(pipelines, 2u);
  ASSERT_EQ(conformance::run_case(*dev, c), "");
  EXPECT_EQ(dev->pipeline_count(), pipelines) << "the second run must reuse the cached pipelines";
  if (dev->capabilities().timestamp_bits == 0) TESSERA_SKIP_HARDWARE() << "no timestamps on this queue";
  ASSERT_EQ(dev->last_timings().size(), 2u);
  EXPECT_EQ(dev->last_timings()[0].kernel, "matmul_tiled_f16");
  EXPECT_EQ(dev->last_timings()[1].kernel, "matmul_vec_f16");
  for (const auto& t : dev->last_timings()) EXPECT_GT(t.microseconds, 0.0);
}

// The HAL's timing hook (what tessera-bench reads): it runs the graph, and its seconds are the
// sum of the dispatches' timestamp times.
TEST(VulkanDevice, TimeComputeRunsTheGraphAndSumsItsTimestamps) {
  auto dev = first_device();
  if (!dev) TESSERA_SKIP_HARDWARE() << "no usable Vulkan device";
  if (dev->capabilities().timestamp_bits == 0) TESSERA_SKIP_HARDWARE() << "no timestamps on this queue";
  const int64_t M = 3, N = 16, K = 64;
  std::vector<float> x(size_t(M * K)), w(size_t(N * K));
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i % 7) - 3) * 0.25f;
  for (size_t i = 0; i < w.size(); ++i) w[i] = float(int(i % 5) - 2) * 0.5f;
  auto xt = upload_new(*dev, Tensor::make(DType::kF32, {M, K}), x.data());
  auto wt = upload_new(*dev, Tensor::make(DType::kF32, {N, K}), w.data());
  ASSERT_TRUE(xt.ok() && wt.ok());
  Graph g;
  const ValueId y = g.matmul(g.input(*xt), g.input(*wt));
  const ValueId z = g.scale(y, 2.0f);
  g.mark_output(z);
  auto t = dev->time_compute(g);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  ASSERT_EQ(dev->last_timings().size(), 2u);
  double us = 0.0;
  for (const auto& d : dev->last_timings()) us += d.microseconds;
  EXPECT_GT(*t, 0.0);
  EXPECT_DOUBLE_EQ(*t, us * 1e-6);
  const std::vector<double> got = testing::download_values(*dev, g.tensor(z));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double want = 0.0;
      for (int64_t k = 0; k < K; ++k) want += double(x[size_t(m * K + k)]) * double(w[size_t(n * K + k)]);
      EXPECT_NEAR(got[size_t(m * N + n)], 2.0 * want, 1e-4) << "m " << m << " n " << n;
    }
}

TEST(VulkanDevice, BadIdsAndMetadataAreRejectedBeforeSubmitting) {
  auto dev = first_device();
  if (!dev) TESSERA_SKIP_HARDWARE() << "no usable Vulkan device";
  CaseContext c(*dev, 1);
  const ValueId out = c.graph().embed(c.input(DType::kF32, {4, 8}), c.i32_values({2}, {1, 4}));
  c.graph().mark_output(out);
  const Status s = dev->compute(c.graph());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("id 4"), std::string::npos) << s.message();

  CaseContext a(*dev, 2);
  const ValueId q = a.input(DType::kF32, {1, 2, 8}), k = a.input(DType::kF32, {1, 1, 8});
  const ValueId kc = a.input(DType::kF32, {2, 4, 1, 8}), vc = a.input(DType::kF32, {2, 4, 1, 8});
  const ValueId o = a.graph().attention({q, k, a.input(DType::kF32, {1, 1, 8}), kc, vc, a.i32_values({1}, {3}),
                                         a.i32_values({2}, {0, 1}), a.i32_values({1}, {6}), a.i32_values({1, 2}, {0, 7})},
                                        {});
  a.graph().mark_output(o);
  const Status st = dev->compute(a.graph());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_NE(st.message().find("block_tables[0, 1] = 7"), std::string::npos) << st.message();
}

TEST(VulkanValidation, MessagesAreCounted) {
  ScopedEnv env("TESSERA_VULKAN_VALIDATION", "1");
  auto inst = Instance::create();
  if (!inst.ok()) TESSERA_SKIP_HARDWARE() << inst.status().to_string();
  ASSERT_TRUE((*inst)->validation());
  const InstanceApi& api = (*inst)->api();
  uint32_t n = 1;
  VkPhysicalDevice pd = VK_NULL_HANDLE;
  api.vkEnumeratePhysicalDevices((*inst)->handle(), &n, &pd);
  if (pd == VK_NULL_HANDLE) TESSERA_SKIP_HARDWARE() << "no Vulkan device";
  EXPECT_EQ((*inst)->message_count(), 0u);
  // A queue priority outside [0, 1] is invalid usage the layer must report.
  const float bad_priority = 2.0f;
  VkDeviceQueueCreateInfo qci{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  qci.queueCount = 1;
  qci.pQueuePriorities = &bad_priority;
  VkDeviceCreateInfo dci{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  dci.queueCreateInfoCount = 1;
  dci.pQueueCreateInfos = &qci;
  VkDevice device = VK_NULL_HANDLE;
  if (api.vkCreateDevice(pd, &dci, nullptr, &device) == VK_SUCCESS) {
    auto destroy = reinterpret_cast<PFN_vkDestroyDevice>(api.vkGetDeviceProcAddr(device, "vkDestroyDevice"));
    destroy(device, nullptr);
  }
  EXPECT_GE((*inst)->message_count(), 1u);
  EXPECT_FALSE((*inst)->first_message().empty());
}

}  // namespace
}  // namespace tessera::vulkan

namespace tessera::vulkan {
namespace {

// A graph of a recurring shape over the same buffers is recorded once: later runs re-submit the
// recorded command buffer (no re-recording), and read the data uploaded since. Both memory paths.
TEST(VulkanDevice, RecurringGraphReplaysOneCommandBuffer) {
  for (bool staging : {false, true}) {
    auto dev = first_device({.force_staging = staging});
    if (!dev) TESSERA_SKIP_HARDWARE() << "no usable Vulkan device";
    SCOPED_TRACE(staging ? "staging" : "mapped");
    const int64_t M = 2, N = 8, K = 32;
    std::vector<float> w(size_t(N * K));
    for (size_t i = 0; i < w.size(); ++i) w[i] = float(int(i % 9) - 4) * 0.125f;
    auto xt = upload_new(*dev, Tensor::make(DType::kF32, {M, K}), nullptr);
    auto wt = upload_new(*dev, Tensor::make(DType::kF32, {N, K}), w.data());
    ASSERT_TRUE(xt.ok() && wt.ok());
    const int64_t recorded = dev->recordings();
    for (int step = 0; step < 5; ++step) {
      std::vector<float> x(size_t(M * K));
      for (size_t i = 0; i < x.size(); ++i) x[i] = float(int((i * 7 + size_t(step) * 3) % 11) - 5) * 0.25f;
      ASSERT_TRUE(dev->upload(*xt, x.data(), x.size() * 4).ok());
      Graph g;
      const ValueId z = g.scale(g.matmul(g.input(*xt), g.input(*wt)), 0.5f);
      g.mark_output(z);
      ASSERT_TRUE(dev->compute(g).ok());
      const std::vector<double> got = testing::download_values(*dev, g.tensor(z));
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          double want = 0.0;
          for (int64_t k = 0; k < K; ++k) want += double(x[size_t(m * K + k)]) * double(w[size_t(n * K + k)]);
          ASSERT_NEAR(got[size_t(m * N + n)], 0.5 * want, 1e-4) << "step " << step << " m " << m << " n " << n;
        }
    }
    EXPECT_EQ(dev->recordings() - recorded, 1) << "one recording, four replays";
    EXPECT_EQ(dev->executor().stats().reused, 4);
  }
}

}  // namespace
}  // namespace tessera::vulkan
