// The activation planner: assigns every intermediate of a graph an offset in one arena from
// liveness (a value's memory is reused once its last reader has run), and binds the graph's
// intermediates and views to that arena. The Executor (core/exec/executor.h) keeps one arena per
// device and grows it to the largest plan it has seen, so a step of a known shape allocates nothing.
#pragma once
#include <cstdint>
#include <vector>

#include "core/device.h"
#include "core/graph.h"

namespace tessera {

struct MemoryPlan {
  std::vector<int64_t> offsets;  // per value; -1 for externals and views
  int64_t arena_bytes = 0;
};

// |alignment| must be a power of two.
MemoryPlan plan_memory(const Graph& graph, int64_t alignment = 256);

// Sets buffer/offset of every intermediate and view of |graph| from |plan| and |arena|.
void bind_arena(Graph& graph, const MemoryPlan& plan, const BufferPtr& arena);

}  // namespace tessera
