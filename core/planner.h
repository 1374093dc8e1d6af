// The activation planner: assigns every intermediate of a graph an offset in one arena from
// liveness (a value's memory is reused once its last reader has run), and binds the graph's
// intermediates and views to that arena. Backends keep one arena per device and grow it to the
// largest plan they have seen, so a decode step of a known shape allocates nothing.
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

// The per-device arena: plans |graph|, grows the arena if this plan needs more, binds.
class GraphArena {
 public:
  Status prepare(Device& device, Graph& graph);
  int64_t allocations() const { return allocations_; }  // arenas allocated so far
  int64_t bytes() const { return arena_ ? int64_t(arena_->size()) : 0; }

 private:
  BufferPtr arena_;
  int64_t allocations_ = 0;
};

}  // namespace tessera
