// bench/device_clock: samples come from Device::time_compute where the device has a clock, and
// from host wall time (compute + synchronize) where it answers Unimplemented; other errors stop
// the measurement.
#include <gtest/gtest.h>

#include <vector>

#include "bench/device_clock.h"
#include "core/reference/reference.h"

namespace tessera::bench {
namespace {

// The reference device with a scripted clock: time_compute runs the graph and returns
// |seconds|[call % size] (or |status| when it is not OK); counts every compute().
class ScriptedClockDevice final : public Device {
 public:
  ScriptedClockDevice(std::vector<double> seconds, Status status) : seconds_(std::move(seconds)), status_(std::move(status)) {}
  const DeviceInfo& info() const override { return inner_.info(); }
  Result<BufferPtr> alloc(size_t bytes, MemoryKind kind = MemoryKind::kDevice) override { return inner_.alloc(bytes, kind); }
  MemoryInfo memory() const override { return inner_.memory(); }
  Status upload(const Tensor& dst, const void* src, size_t bytes) override { return inner_.upload(dst, src, bytes); }
  Status download(const Tensor& src, void* dst, size_t bytes) override { return inner_.download(src, dst, bytes); }
  Result<Event> copy(std::span<const CopyRegion> regions) override { return inner_.copy(regions); }
  bool supports(OpKind op, DType act, DType weight) const override { return inner_.supports(op, act, weight); }
  Result<ExecutablePtr> prepare(Graph& graph) override { return inner_.prepare(graph); }
  Result<Event> submit(Executable& exe) override { return inner_.submit(exe); }
  Status wait(Event event) override { return inner_.wait(event); }
  Status compute(Graph& graph) override {
    ++computes;
    return inner_.compute(graph);
  }
  Status synchronize() override {
    ++synchronizes;
    return OkStatus();
  }
  Result<double> time_compute(Graph& graph) override {
    if (!status_.ok()) return status_;
    TS_RETURN_IF_ERROR(compute(graph));
    ++timed;
    return seconds_[size_t(timed - 1) % seconds_.size()];
  }
  int computes = 0, synchronizes = 0, timed = 0;

 private:
  ref::ReferenceDevice inner_;
  std::vector<double> seconds_;
  Status status_;
};

std::vector<Graph> two_graphs(Device& dev) {
  std::vector<Graph> graphs(2);
  const std::vector<float> x = {1.0f, -2.0f, 3.0f, 0.5f};
  for (Graph& g : graphs) {
    auto t = upload_new(dev, Tensor::make(DType::kF32, {1, 4}), x.data());
    EXPECT_TRUE(t.ok());
    g.mark_output(g.scale(g.input(*t), 3.0f));
  }
  return graphs;
}

TimingBudget small_budget() {
  TimingBudget b;
  b.budget_s = 0.01;
  b.min_samples = 3;
  b.max_samples = 5;
  b.min_sample_s = 1e-4;
  return b;
}

TEST(DeviceClock, SamplesAreTheDeviceTimesAfterAWarmUp) {
  // The first time is the warm-up's and must not be among the samples.
  ScriptedClockDevice dev({100.0, 1e-3, 3e-3, 2e-3}, OkStatus());
  std::vector<Graph> graphs = two_graphs(dev);
  std::string note;
  TimeSource source = TimeSource::kHostWall;
  auto s = time_graphs(dev, graphs, small_budget(), &note, &source);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(source, TimeSource::kDeviceTimestamps);
  EXPECT_EQ(note, "device time (timestamps)");
  EXPECT_EQ(dev.timed, dev.computes) << "every call went through time_compute";
  EXPECT_GE(dev.timed, 1 + 5);  // warm-up + at least max(max_samples, 5) samples
  EXPECT_EQ(s->n, dev.timed - 1);
  EXPECT_LT(s->median, 100.0);
  EXPECT_GE(s->median, 1e-3);
  EXPECT_LE(s->median, 3e-3);
}

TEST(DeviceClock, UnimplementedFallsBackToHostWallTime) {
  ScriptedClockDevice dev({1.0}, Unimplemented("scripted: no clock"));
  std::vector<Graph> graphs = two_graphs(dev);
  std::string note;
  TimeSource source = TimeSource::kDeviceTimestamps;
  auto s = time_graphs(dev, graphs, small_budget(), &note, &source);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(source, TimeSource::kHostWall);
  EXPECT_EQ(dev.timed, 0);
  EXPECT_GE(dev.computes, 1 + 3);
  EXPECT_GE(dev.synchronizes, 1);
  EXPECT_GT(s->median, 0.0);
  EXPECT_LT(s->median, 1.0) << "a scale of 4 floats on the host";
}

TEST(DeviceClock, AZeroDeviceTimeFallsBackToo) {
  ScriptedClockDevice dev({0.0}, OkStatus());
  std::vector<Graph> graphs = two_graphs(dev);
  TimeSource source = TimeSource::kDeviceTimestamps;
  auto s = time_graphs(dev, graphs, small_budget(), nullptr, &source);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(source, TimeSource::kHostWall);
  EXPECT_EQ(dev.timed, 1);  // only the warm-up asked the clock
}

TEST(DeviceClock, OtherErrorsStopTheMeasurement) {
  ScriptedClockDevice dev({1.0}, Unavailable("scripted: device lost"));
  std::vector<Graph> graphs = two_graphs(dev);
  auto s = time_graphs(dev, graphs, small_budget(), nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(dev.computes, 0);
  std::vector<Graph> none;
  EXPECT_EQ(time_graphs(dev, none, small_budget(), nullptr).status().code(), StatusCode::kInvalidArgument);
}

TEST(DeviceClock, TheReferenceDeviceHasNoClock) {
  ref::ReferenceDevice dev;
  std::vector<Graph> graphs = two_graphs(dev);
  EXPECT_EQ(dev.time_compute(graphs[0]).status().code(), StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace tessera::bench
