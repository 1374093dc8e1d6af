#include <gtest/gtest.h>

#include "backends/cpu/cpu_device.h"
#include "core/registry.h"

namespace tessera {
namespace {

TEST(Registry, GlobalHasACpuDevice) {
  auto r = Registry::global().find("cpu");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)->info().kind, DeviceKind::kCpu);
  ASSERT_NE(Registry::global().best(), nullptr);
}

TEST(Registry, ReferenceDeviceOpensByNameOnly) {
  const Registry& reg = Registry::global();
  auto r = reg.find("reference");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)->info().kind, DeviceKind::kReference);
  // Never the default and never in the list every-device loops (tests, bench "all") walk.
  EXPECT_NE(reg.find("auto").value()->info().kind, DeviceKind::kReference);
  EXPECT_NE(reg.best()->info().kind, DeviceKind::kReference);
  for (const DevicePtr& d : reg.devices()) EXPECT_NE(d->info().kind, DeviceKind::kReference) << d->info().id;
}

TEST(Registry, ExplainsUnavailableBackendsAndUnknownIds) {
  Registry reg({{"cpu", [](std::vector<DeviceEntry>& out) {
                   out.push_back({"cpu", "cpu", std::make_shared<cpu::CpuDevice>(1), OkStatus()});
                 }},
                {"vulkan", [](std::vector<DeviceEntry>& out) {
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
