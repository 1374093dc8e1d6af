// The GPU device's host-visible behaviour without a GPU: the CUDA/HIP probes say why a backend
// is unavailable; through cuda-sim (the same planner and kernels), a recurring step shape reuses
// its executable (on CUDA: replays its captured graph), and a bad token id is reported by the
// kernel's error word instead of reading out of bounds.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "core/exec/executor.h"
#include "core/registry.h"
#include "tests/support/test_support.h"

namespace tessera {
namespace {

const DeviceEntry* entry(const std::string& backend) {
  for (const DeviceEntry& e : Registry::global().entries())
    if (e.backend == backend) return &e;
  return nullptr;
}

TEST(GpuDevice, ProbesWithoutAGpuSayWhatIsMissing) {
#if TESSERA_HAVE_CUDA
  const DeviceEntry* e = entry("cuda");
  ASSERT_NE(e, nullptr) << "a CUDA build lists the cuda backend";
  if (std::filesystem::exists("/dev/nvidia0") || std::filesystem::exists("/dev/nvidiactl")) {
    TESSERA_SKIP_HARDWARE() << "an NVIDIA driver is present: the no-driver path is not reachable here";
  }
  EXPECT_EQ(e->device, nullptr);
  EXPECT_NE(e->why.message().find("no NVIDIA driver"), std::string::npos) << e->why.to_string();
#endif
#if TESSERA_HAVE_HIP
  const DeviceEntry* h = entry("hip");
  ASSERT_NE(h, nullptr);
  if (!std::filesystem::exists("/dev/kfd")) {
    EXPECT_EQ(h->device, nullptr);
    EXPECT_FALSE(h->why.message().empty());
  }
#endif
  ASSERT_NE(entry("cuda-sim"), nullptr) << "unit_gpu runs with TESSERA_CUDA_SIM=1";
}

DevicePtr sim_device() {
  auto d = Registry::global().find("cuda-sim");
  return d.ok() ? *d : nullptr;
}

TEST(GpuDevice, ARecurringGraphShapeReusesItsExecutable) {
  DevicePtr dev = sim_device();
  ASSERT_NE(dev, nullptr);
  testing::Rng rng(3);
  auto w = upload_new(*dev, Tensor::make(DType::kF32, {24, 64}), testing::random_floats(rng, 24 * 64).data());
  ASSERT_TRUE(w.ok());
  // The step's input lives at the same address every step (as the model's step buffer does);
  // each step uploads new data into it.
  auto x = upload_new(*dev, Tensor::make(DType::kF32, {2, 64}), nullptr);
  ASSERT_TRUE(x.ok());
  std::vector<std::vector<double>> outs;
  const auto before = dev->executor().stats();
  for (int step = 0; step < 3; ++step) {
    const auto xv = testing::random_floats(rng, 2 * 64);
    ASSERT_TRUE(dev->upload(*x, xv.data(), xv.size() * 4).ok());
    Graph g;
    const ValueId y = g.matmul(g.input(*x), g.input(*w));
    g.mark_output(y);
    ASSERT_TRUE(dev->compute(g).ok());
    outs.push_back(testing::download_values(*dev, g.tensor(y)));
  }
  const auto after = dev->executor().stats();
  EXPECT_EQ(after.built - before.built, 1);
  EXPECT_EQ(after.reused - before.reused, 2);
  EXPECT_NE(outs[0], outs[1]) << "a replay computes the new step's data";
}

TEST(GpuDevice, AnOutOfRangeTokenIdIsAnErrorNotARead) {
  DevicePtr dev = sim_device();
  ASSERT_NE(dev, nullptr);
  testing::Rng rng(4);
  const Tensor desc = Tensor::make(DType::kQ8_0, {10, 32});
  const auto bytes = testing::encode(desc, testing::random_floats(rng, 10 * 32));
  auto table = upload_new(*dev, desc, bytes.data());
  ASSERT_TRUE(table.ok());
  const std::vector<int32_t> ids = {1, 10, 3};
  auto id_t = upload_new(*dev, Tensor::make(DType::kI32, {3}), ids.data());
  ASSERT_TRUE(id_t.ok());
  Graph g;
  g.mark_output(g.embed(g.input(*table), g.input(*id_t)));
  const Status s = dev->compute(g);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("token id outside"), std::string::npos) << s.to_string();
}

TEST(GpuDevice, AnOutOfRangeExpertIdIsAnErrorNotARead) {
  DevicePtr dev = sim_device();
  ASSERT_NE(dev, nullptr);
  testing::Rng rng(5);
  const int64_t E = 4, N = 8, K = 32;
  const Tensor wdesc = Tensor::make(DType::kQ4_0, {E, N, K});
  const auto wbytes = testing::encode(wdesc, testing::random_floats(rng, E * N * K));
  auto w = upload_new(*dev, wdesc, wbytes.data());
  const auto xv = testing::random_floats(rng, 3 * K);
  auto x = upload_new(*dev, Tensor::make(DType::kF32, {3, K}), xv.data());
  const std::vector<int32_t> ids = {0, 3, 2, 4, 1, 1};  // token 1, slot 1: expert 4 of 4
  auto id_t = upload_new(*dev, Tensor::make(DType::kI32, {3, 2}), ids.data());
  ASSERT_TRUE(w.ok() && x.ok() && id_t.ok());
  Graph g;
  g.mark_output(g.matmul_id(g.input(*x), g.input(*w), g.input(*id_t)));
  const Status s = dev->compute(g);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("expert id outside"), std::string::npos) << s.to_string();
}

// lora: a segment naming a slot that is not there. cuda-sim reports it through the kernel's
// error word (its kernel reads the metadata on the device); the CPU checks it on the host. Both
// name the problem instead of reading another slot's adapter.
TEST(GpuDevice, AnOutOfRangeLoraSlotIsAnErrorNotARead) {
  for (const char* name : {"cuda-sim", "cpu"}) {
    SCOPED_TRACE(name);
    auto found = Registry::global().find(name);
    ASSERT_TRUE(found.ok()) << found.status().to_string();
    Device& dev = **found;
    testing::Rng rng(6);
    const int64_t T = 3, K = 32, N = 16, R = 8, S = 2;
    auto upload = [&](DType t, std::initializer_list<int64_t> shape, const void* data) {
      auto r = upload_new(dev, Tensor::make(t, shape), data);
      EXPECT_TRUE(r.ok()) << r.status().to_string();
      return r.ok() ? *r : Tensor{};
    };
    const auto xv = testing::random_floats(rng, T * K), bv = testing::random_floats(rng, T * N);
    const auto av = testing::random_floats(rng, S * R * K), uv = testing::random_floats(rng, S * N * R);
    const std::vector<int32_t> ranks = {8, 4}, starts = {0, 1, 3}, slots = {0, 5};  // slot 5 of 2
    const std::vector<float> scales = {1.0f, 2.0f};
    Graph g;
    Graph::LoraInputs in{};
    in.x = g.input(upload(DType::kF32, {T, K}, xv.data()));
    in.base = g.input(upload(DType::kF32, {T, N}, bv.data()));
    in.a = g.input(upload(DType::kF32, {S, R, K}, av.data()));
    in.b = g.input(upload(DType::kF32, {S, R, N}, uv.data()));
    in.ranks = g.input(upload(DType::kI32, {S}, ranks.data()));
    in.scales = g.input(upload(DType::kF32, {S}, scales.data()));
    in.seg_start = g.input(upload(DType::kI32, {3}, starts.data()));
    in.seg_slot = g.input(upload(DType::kI32, {2}, slots.data()));
    g.mark_output(g.lora(in));
    ASSERT_TRUE(g.status().ok()) << g.status().to_string();
    Status s = dev.compute(g);
    if (s.ok()) s = dev.synchronize();
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("lora: "), std::string::npos) << s.to_string();
    EXPECT_NE(s.message().find("slot"), std::string::npos) << s.to_string();
  }
}

}  // namespace
}  // namespace tessera
