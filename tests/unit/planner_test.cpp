#include <gtest/gtest.h>

#include "core/exec/executor.h"
#include "core/planner.h"
#include "core/reference/reference.h"
#include "core/registry.h"

namespace tessera {
namespace {

// A chain x -> a -> b -> c -> d: each intermediate dies after its reader, so the arena needs
// only two live values at a time, not four.
TEST(Planner, ReusesMemoryOfDeadValues) {
  ref::ReferenceDevice dev;
  Graph g;
  const ValueId x = g.input(*upload_new(dev, Tensor::make(DType::kF32, {256, 256}), nullptr));
  ValueId v = x;
  for (int i = 0; i < 4; ++i) v = g.scale(v, 2.0f);
  g.mark_output(v);
  const MemoryPlan plan = plan_memory(g);
  const int64_t one = 256 * 256 * 4;
  EXPECT_EQ(plan.arena_bytes, 2 * one);
  // Consecutive values never share memory (an op does not write its own input).
  for (size_t i = 1; i + 1 < g.values().size(); ++i)
    EXPECT_NE(plan.offsets[i], plan.offsets[i + 1]);
}

TEST(Planner, OutputsAndViewBasesStayAlive) {
  ref::ReferenceDevice dev;
  Graph g;
  const ValueId x = g.input(*upload_new(dev, Tensor::make(DType::kF32, {4, 64}), nullptr));
  const ValueId a = g.scale(x, 2.0f);
  const ValueId view = g.reshape(a, {4, 2, 32});
  const ValueId b = g.scale(x, 3.0f);  // must not overwrite a: its view is read below
  const ValueId c = g.add(view, g.reshape(b, {4, 2, 32}));
  g.mark_output(c);
  g.mark_output(a);
  const MemoryPlan plan = plan_memory(g);
  EXPECT_NE(plan.offsets[size_t(a)], plan.offsets[size_t(b)]);
  EXPECT_NE(plan.offsets[size_t(a)], plan.offsets[size_t(c)]);
  EXPECT_NE(plan.offsets[size_t(b)], plan.offsets[size_t(c)]);
}

// A step of the same shape allocates nothing after the first; a larger one grows the arena once.
TEST(Planner, ArenaAllocatesOncePerLargestShape) {
  const DevicePtr cpu_device = make_cpu_device(1);
  Device& dev = *cpu_device;
  auto run = [&](int64_t rows) {
    Graph g;
    const ValueId x = g.input(*upload_new(dev, Tensor::make(DType::kF32, {rows, 64}), nullptr));
    g.mark_output(g.softmax(g.scale(x, 0.5f)));
    ASSERT_TRUE(dev.compute(g).ok());
  };
  run(8);
  EXPECT_EQ(dev.executor().stats().arena_allocations, 1);
  for (int i = 0; i < 5; ++i) run(8);
  run(4);
  EXPECT_EQ(dev.executor().stats().arena_allocations, 1);
  run(64);
  EXPECT_EQ(dev.executor().stats().arena_allocations, 2);
  run(8);
  EXPECT_EQ(dev.executor().stats().arena_allocations, 2);
}

}  // namespace
}  // namespace tessera
