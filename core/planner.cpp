#include "core/planner.h"

#include <algorithm>
#include <map>

namespace tessera {

namespace {
int64_t align_up(int64_t x, int64_t a) { return (x + a - 1) & ~(a - 1); }
}  // namespace

MemoryPlan plan_memory(const Graph& graph, int64_t alignment) {
  const auto& values = graph.values();
  const auto& nodes = graph.nodes();
  const int32_t n_nodes = int32_t(nodes.size());
  MemoryPlan plan;
  plan.offsets.assign(values.size(), -1);

  // last_use[v]: index of the last node that reads v (directly or through a view of it).
  std::vector<int32_t> last_use(values.size(), -1);
  auto base_of = [&](ValueId v) {
    return values[size_t(v)].kind == Value::Kind::kView ? values[size_t(v)].view_base : v;
  };
  for (int32_t i = 0; i < n_nodes; ++i)
    for (ValueId v : nodes[size_t(i)].inputs)
      if (v != kNoValue) last_use[size_t(base_of(v))] = std::max(last_use[size_t(base_of(v))], i);
  for (size_t v = 0; v < values.size(); ++v)
    if (values[v].is_output) last_use[size_t(base_of(ValueId(v)))] = n_nodes;

  // Greedy first-fit over a list of live blocks ordered by offset.
  std::map<int64_t, std::pair<int64_t, ValueId>> live;  // offset -> (size, value)
  std::vector<std::vector<ValueId>> frees_after(size_t(n_nodes) + 1);
  for (int32_t i = 0; i < n_nodes; ++i) {
    // Allocate this node's outputs (before freeing its inputs: an op may not write in place).
    for (ValueId out : nodes[size_t(i)].outputs) {
      const Value& val = values[size_t(out)];
      if (val.kind != Value::Kind::kIntermediate) continue;
      const int64_t size = align_up(std::max<int64_t>(val.tensor.nbytes(), 1), alignment);
      int64_t offset = 0;
      for (const auto& [off, block] : live) {
        if (off - offset >= size) break;
        offset = std::max(offset, align_up(off + block.first, alignment));
      }
      live[offset] = {size, out};
      plan.offsets[size_t(out)] = offset;
      plan.arena_bytes = std::max(plan.arena_bytes, offset + size);
      // An output nobody reads dies right after its node.
      const int32_t death = last_use[size_t(out)] < 0 ? i : last_use[size_t(out)];
      frees_after[size_t(death)].push_back(out);
    }
    for (ValueId v : frees_after[size_t(i)]) live.erase(plan.offsets[size_t(v)]);
  }
  return plan;
}

void bind_arena(Graph& graph, const MemoryPlan& plan, const BufferPtr& arena) {
  auto& values = graph.mutable_values();
  for (size_t v = 0; v < values.size(); ++v) {
    if (values[v].kind == Value::Kind::kIntermediate) {
      values[v].tensor.buffer = arena;
      values[v].tensor.offset = size_t(plan.offsets[v]);
    }
  }
  for (auto& val : values) {
    if (val.kind != Value::Kind::kView) continue;
    const Value& base = values[size_t(val.view_base)];
    val.tensor.buffer = base.tensor.buffer;
    val.tensor.offset = size_t(int64_t(base.tensor.offset) + val.view_offset);
  }
}

}  // namespace tessera
