// The Executor (core/exec): one executable per graph key, reused while the key recurs, rebuilt
// when shapes, params or external buffers change; the arena grows once per largest plan and its
// growth drops the executables bound to the old one; validation happens once, before prepare.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/exec/bucket.h"
#include "core/exec/executor.h"
#include "core/reference/reference.h"
#include "core/registry.h"

namespace tessera {
namespace {

struct ScaleGraph {
  Graph g;
  ValueId out;
};

// softmax(x * s) over |x|.
ScaleGraph scale_softmax(const Tensor& x, float s) {
  ScaleGraph sg;
  sg.out = sg.g.softmax(sg.g.scale(sg.g.input(x), s));
  sg.g.mark_output(sg.out);
  return sg;
}

std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  std::vector<float> v(n);
  for (float& f : v) f = u(rng);
  return v;
}

std::vector<float> expected_softmax(const std::vector<float>& x, int64_t cols, float s) {
  std::vector<float> y(x.size());
  for (size_t r = 0; r < x.size() / size_t(cols); ++r) {
    double mx = -1e30, sum = 0;
    for (int64_t c = 0; c < cols; ++c) mx = std::max(mx, double(x[r * size_t(cols) + size_t(c)]) * s);
    for (int64_t c = 0; c < cols; ++c) sum += std::exp(double(x[r * size_t(cols) + size_t(c)]) * s - mx);
    for (int64_t c = 0; c < cols; ++c)
      y[r * size_t(cols) + size_t(c)] = float(std::exp(double(x[r * size_t(cols) + size_t(c)]) * s - mx) / sum);
  }
  return y;
}

TEST(Executor, ReusesOneExecutablePerKeyAndReadsFreshData) {
  const DevicePtr cpu_device = make_cpu_device(1);
  Device& dev = *cpu_device;
  Executor exec(dev);
  auto x = upload_new(dev, Tensor::make(DType::kF32, {4, 16}), nullptr);
  ASSERT_TRUE(x.ok());
  for (uint32_t step = 0; step < 6; ++step) {
    const auto data = random_values(64, 100 + step);  // new data each step, same buffer
    ASSERT_TRUE(dev.upload(*x, data.data(), data.size() * 4).ok());
    ScaleGraph sg = scale_softmax(*x, 0.5f);
    ASSERT_TRUE(exec.run(sg.g).ok());
    std::vector<float> y(64);
    ASSERT_TRUE(dev.download(sg.g.tensor(sg.out), y.data(), y.size() * 4).ok());
    const auto want = expected_softmax(data, 16, 0.5f);
    for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], want[i], 1e-5f) << "step " << step << " element " << i;
  }
  EXPECT_EQ(exec.stats().built, 1);
  EXPECT_EQ(exec.stats().reused, 5);
  EXPECT_EQ(exec.stats().arena_allocations, 1);
}

TEST(Executor, KeyChangesWithShapeParamsAndBuffers) {
  const DevicePtr cpu_device = make_cpu_device(1);
  Device& dev = *cpu_device;
  auto x = upload_new(dev, Tensor::make(DType::kF32, {4, 16}), nullptr);
  auto x2 = upload_new(dev, Tensor::make(DType::kF32, {4, 16}), nullptr);
  auto wide = upload_new(dev, Tensor::make(DType::kF32, {4, 32}), nullptr);
  const uint64_t base = graph_key(scale_softmax(*x, 0.5f).g);
  EXPECT_EQ(graph_key(scale_softmax(*x, 0.5f).g), base) << "the same graph twice";
  EXPECT_NE(graph_key(scale_softmax(*x, 0.25f).g), base) << "another scale param";
  EXPECT_NE(graph_key(scale_softmax(*x2, 0.5f).g), base) << "another input buffer";
  EXPECT_NE(graph_key(scale_softmax(*wide, 0.5f).g), base) << "another shape";
  Tensor shifted = *x;
  shifted.shape[0] = 2;
  shifted.offset = 128;
  EXPECT_NE(graph_key(scale_softmax(shifted, 0.5f).g), graph_key(scale_softmax(Tensor{*x}, 0.5f).g)) << "another offset";
}

TEST(Executor, EvictsLeastRecentlyUsedPastCapacity) {
  ref::ReferenceDevice dev;
  Executor exec(dev, 2);
  auto x = upload_new(dev, Tensor::make(DType::kF32, {2, 8}), nullptr);
  const auto data = random_values(16, 7);
  ASSERT_TRUE(dev.upload(*x, data.data(), 64).ok());
  auto run = [&](float s) {
    ScaleGraph sg = scale_softmax(*x, s);
    ASSERT_TRUE(exec.run(sg.g).ok());
  };
  run(1.0f);
  run(2.0f);
  run(1.0f);  // hit; 2.0 is now the least recently used
  run(3.0f);  // evicts 2.0
  EXPECT_EQ(exec.stats().built, 3);
  EXPECT_EQ(exec.stats().reused, 1);
  EXPECT_EQ(exec.stats().evicted, 1);
  run(1.0f);  // still cached
  EXPECT_EQ(exec.stats().reused, 2);
  run(2.0f);  // was evicted: built again
  EXPECT_EQ(exec.stats().built, 4);
  EXPECT_EQ(exec.stats().cached, 2);
}

TEST(Executor, ArenaGrowthDropsExecutablesBoundToTheOldArena) {
  const DevicePtr cpu_device = make_cpu_device(1);
  Device& dev = *cpu_device;
  Executor exec(dev);
  auto small = upload_new(dev, Tensor::make(DType::kF32, {2, 16}), nullptr);
  auto big = upload_new(dev, Tensor::make(DType::kF32, {64, 16}), nullptr);
  const auto data = random_values(64 * 16, 11);
  ASSERT_TRUE(dev.upload(*small, data.data(), 2 * 16 * 4).ok());
  ASSERT_TRUE(dev.upload(*big, data.data(), data.size() * 4).ok());
  ScaleGraph a = scale_softmax(*small, 1.0f);
  ASSERT_TRUE(exec.run(a.g).ok());
  ScaleGraph b = scale_softmax(*big, 1.0f);
  ASSERT_TRUE(exec.run(b.g).ok());
  EXPECT_EQ(exec.stats().arena_allocations, 2);
  EXPECT_EQ(exec.stats().evicted, 1) << "the small graph's executable addressed the old arena";
  ScaleGraph a2 = scale_softmax(*small, 1.0f);
  ASSERT_TRUE(exec.run(a2.g).ok());
  EXPECT_EQ(exec.stats().built, 3);
  EXPECT_EQ(exec.stats().arena_allocations, 2) << "the grown arena fits the small plan";
  std::vector<float> y(32);
  ASSERT_TRUE(dev.download(a2.g.tensor(a2.out), y.data(), y.size() * 4).ok());
  const auto want = expected_softmax(std::vector<float>(data.begin(), data.begin() + 32), 16, 1.0f);
  for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], want[i], 1e-5f);
}

// The reference device, claiming no softmax: the executor must refuse before prepare().
class NoSoftmaxDevice final : public Device {
 public:
  ~NoSoftmaxDevice() override { release_executor(); }
  const DeviceInfo& info() const override { return inner_.info(); }
  Result<BufferPtr> alloc(size_t bytes, MemoryKind kind = MemoryKind::kDevice) override { return inner_.alloc(bytes, kind); }
  MemoryInfo memory() const override { return inner_.memory(); }
  Status upload(const Tensor& dst, const void* src, size_t bytes) override { return inner_.upload(dst, src, bytes); }
  Status download(const Tensor& src, void* dst, size_t bytes) override { return inner_.download(src, dst, bytes); }
  Result<Event> copy(std::span<const CopyRegion> regions) override { return inner_.copy(regions); }
  bool supports(OpKind op, DType act, DType weight) const override {
    return op != OpKind::kSoftmax && inner_.supports(op, act, weight);
  }
  Result<ExecutablePtr> prepare(Graph& graph) override {
    ++prepared;
    return inner_.prepare(graph);
  }
  Result<Event> submit(Executable& exe) override { return inner_.submit(exe); }
  Status wait(Event event) override { return inner_.wait(event); }
  Status synchronize() override { return OkStatus(); }
  int prepared = 0;

 private:
  ref::ReferenceDevice inner_;
};

TEST(Executor, UnsupportedOpFailsBeforePrepareNamingIt) {
  NoSoftmaxDevice dev;
  auto x = upload_new(dev, Tensor::make(DType::kF32, {4, 8}), nullptr);
  ASSERT_TRUE(x.ok());
  ScaleGraph sg = scale_softmax(*x, 1.0f);
  const Status s = dev.compute(sg.g);
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("softmax with f32 activations"), std::string::npos) << s.to_string();
  EXPECT_EQ(dev.prepared, 0);
  EXPECT_EQ(dev.executor().stats().built, 0);
}

// A weight in a backend's own layout (Device::prepare_weight) is read only as a matmul's weight,
// and only on the device whose buffer holds it; both misuses fail in validation, naming the weight.
TEST(Executor, RepackedWeightsAreReadOnlyByTheirDevicesMatmul) {
  const DevicePtr cpu_device = make_cpu_device(1);
  Device& dev = *cpu_device;
  ref::ReferenceDevice other;
  const auto xs = random_values(2 * 32, 7);
  auto x = upload_new(dev, Tensor::make(DType::kF32, {2, 32}), xs.data());
  ASSERT_TRUE(x.ok());
  Tensor w = Tensor::make(DType::kF32, {32}, "blk.0.attn_norm.weight");
  auto wt = upload_new(dev, w, xs.data());
  ASSERT_TRUE(wt.ok());
  wt->layout = WeightLayout{7};
  {
    Graph g;
    g.mark_output(g.rms_norm(g.input(*x), g.input(*wt), 1e-5f));
    const Status s = dev.compute(g);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("'blk.0.attn_norm.weight' is a repacked weight"), std::string::npos) << s.to_string();
  }
  {
    // The reference device computes on host memory, so it may read the CPU's rows, not its tiles.
    auto xo = upload_new(other, Tensor::make(DType::kF32, {2, 32}), xs.data());
    ASSERT_TRUE(xo.ok());
    Graph g;
    g.mark_output(g.rms_norm(g.input(*xo), g.input(*wt), 1e-5f));
    const Status s = other.compute(g);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("was repacked by cpu"), std::string::npos) << s.to_string();
    wt->layout = WeightLayout::kRows;
    Graph g2;
    g2.mark_output(g2.rms_norm(g2.input(*xo), g2.input(*wt), 1e-5f));
    EXPECT_TRUE(other.compute(g2).ok());
  }
  // The layout is part of the key: the same buffer in another layout is another executable.
  Graph a, b;
  a.mark_output(a.scale(a.input(*x), 2.0f));
  Tensor x2 = *x;
  x2.layout = WeightLayout{3};
  b.mark_output(b.scale(b.input(x2), 2.0f));
  EXPECT_NE(graph_key(a), graph_key(b));
}

TEST(Bucket, RoundsUpWithinBounds) {
  EXPECT_EQ(bucket_up(0), 1);
  EXPECT_EQ(bucket_up(1), 1);
  EXPECT_EQ(bucket_up(3), 4);
  EXPECT_EQ(bucket_up(64), 64);
  EXPECT_EQ(bucket_up(65), 128);
  EXPECT_EQ(bucket_up(129), 192);
  for (int32_t n = 1; n < 5000; ++n) {
    const int32_t b = bucket_up(n);
    ASSERT_GE(b, n);
    ASSERT_LE(b, 2 * n);
    ASSERT_EQ(bucket_up(b), b) << "a bucket is its own bucket";
  }
}

}  // namespace
}  // namespace tessera
