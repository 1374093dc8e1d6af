#include <gtest/gtest.h>

#include "backends/null/null_device.h"
#include "core/registry.h"

namespace tessera {
namespace {

TEST(Registry, GlobalHasACpuDevice) {
  auto r = Registry::global().find("cpu");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)->info().type, DeviceType::kCpu);
  EXPECT_EQ((*r)->info().backend, "cpu");
  EXPECT_GT((*r)->info().threads, 0);
  ASSERT_NE(Registry::global().best(), nullptr);
}

TEST(Registry, ReferenceDeviceOpensByNameOnly) {
  const Registry& reg = Registry::global();
  auto r = reg.find("reference");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE((*r)->info().by_name_only);
  EXPECT_EQ((*r)->info().threads, 0) << "--threads does not size the reference device";
  // Never the default and never in the list every-device loops (tests, bench "all") walk.
  EXPECT_NE(reg.find("auto").value()->info().id, "reference");
  EXPECT_NE(reg.best()->info().id, "reference");
  for (const DevicePtr& d : reg.devices()) EXPECT_FALSE(d->info().by_name_only) << d->info().id;
}

// The registry ranks by what a device is, never by its backend: memory of its own first, then
// integrated GPUs, then the CPU, then GPU APIs emulated on the CPU; probes' order breaks ties.
TEST(Registry, RanksDevicesByTypeNotBackend) {
  const auto device = [](const char* id, DeviceType type, bool emulated = false, bool by_name_only = false) {
    DeviceInfo claims;
    claims.id = id, claims.type = type, claims.emulated = emulated, claims.by_name_only = by_name_only;
    return std::make_shared<null_backend::NullDevice>(claims);
  };
  Registry reg(
      {{"a",
        [&](std::vector<DeviceEntry>& out) {
          out.push_back({"a", "a:0", device("a:0", DeviceType::kCpu), OkStatus()});
          out.push_back({"a", "a:1", device("a:1", DeviceType::kIntegratedGpu, /*emulated=*/true), OkStatus()});
        }},
       {"b",
        [&](std::vector<DeviceEntry>& out) {
          out.push_back({"b", "b:0", device("b:0", DeviceType::kIntegratedGpu), OkStatus()});
          out.push_back({"b", "b:1", device("b:1", DeviceType::kGpu), OkStatus()});
          out.push_back({"b", "b:2", device("b:2", DeviceType::kGpu, false, /*by_name_only=*/true), OkStatus()});
        }},
       {"c", [&](std::vector<DeviceEntry>& out) {
          out.push_back({"c", "c:0", device("c:0", DeviceType::kAccelerator), OkStatus()});
        }}});
  std::vector<std::string> order;
  for (const DevicePtr& d : reg.devices()) order.push_back(d->info().id);
  EXPECT_EQ(order, (std::vector<std::string>{"b:1", "c:0", "b:0", "a:0", "a:1"}));
  EXPECT_EQ(reg.best()->info().id, "b:1");
  ASSERT_TRUE(reg.find("b:2").ok()) << "a by-name-only device still opens by its id";
  EXPECT_EQ(reg.find("b").value()->info().id, "b:0") << "a backend's name opens its first device";
}

// The skeleton backend holds memory and refuses every op, naming the op, through the Executor.
TEST(Registry, NullDeviceHoldsMemoryAndRunsNothing) {
  null_backend::NullDevice d(DeviceInfo{});
  EXPECT_EQ(d.info().id, "null");
  EXPECT_EQ(d.info().backend, "null");
  Tensor t = Tensor::make(DType::kF32, {4});
  auto buf = d.alloc(size_t(t.nbytes()), MemoryKind::kDevice);
  ASSERT_TRUE(buf.ok()) << buf.status().to_string();
  t.buffer = *buf;
  const float in[4] = {1.5f, -2.0f, 3.25f, 7.0f};
  float out[4] = {};
  ASSERT_TRUE(d.upload(t, in, sizeof in).ok());
  ASSERT_TRUE(d.download(t, out, sizeof out).ok());
  EXPECT_EQ(out[3], 7.0f);
  EXPECT_EQ(out[0], 1.5f);
  EXPECT_FALSE(d.supports(OpKind::kSoftmax, DType::kF32, DType::kF32));
  Graph g;
  g.mark_output(g.softmax(g.input(t)));
  const Status s = d.compute(g);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("softmax"), std::string::npos) << s.to_string();
}

TEST(Registry, ExplainsUnavailableBackendsAndUnknownIds) {
  Registry reg({{"cpu",
                 [](std::vector<DeviceEntry>& out) {
                   out.push_back({"cpu", "cpu", make_cpu_device(1), OkStatus()});
                 }},
                {"vulkan",
                 [](std::vector<DeviceEntry>& out) {
                   out.push_back({"vulkan", "vulkan", nullptr, Unavailable("vulkan: no loader (libvulkan.so.1)")});
                 }},
                {"cuda", [](std::vector<DeviceEntry>&) {}}});
  ASSERT_EQ(reg.entries().size(), 3u);
  EXPECT_EQ(reg.devices().size(), 1u);
  auto v = reg.find("vulkan:0");
  EXPECT_EQ(v.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(v.status().message().find("no loader"), std::string::npos);
  auto c = reg.find("cuda");
  EXPECT_EQ(c.status().code(), StatusCode::kUnavailable);
  auto x = reg.find("tpu");
  EXPECT_EQ(x.status().code(), StatusCode::kNotFound);
  EXPECT_NE(x.status().message().find("available: cpu"), std::string::npos);
  EXPECT_EQ(reg.find("auto").value()->info().id, "cpu");
}

}  // namespace
}  // namespace tessera
