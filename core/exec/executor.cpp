#include "core/exec/executor.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "core/exec/key_hasher.h"

namespace tessera {

namespace {

// Whether |device| computes on host memory, so any host-addressable buffer is its to read.
bool computes_on_host(const Device& device) { return device.info().type == DeviceType::kCpu; }

}  // namespace

uint64_t graph_key(const Graph& graph) {
  KeyHasher h;
  h.mix(graph.values().size());
  for (const Value& v : graph.values()) {
    h.mix(uint64_t(v.kind));
    h.mix_tensor(v.tensor);
    h.mix(uint64_t(v.is_output));
    if (v.kind == Value::Kind::kExternal) {
      h.mix_place(v.tensor);
    } else if (v.kind == Value::Kind::kView) {
      h.mix(uint64_t(int64_t(v.view_base)));
      h.mix(uint64_t(v.view_offset));
    }
  }
  for (const Node& n : graph.nodes()) {
    h.mix(uint64_t(n.op));
    h.mix(n.inputs.size());
    for (ValueId v : n.inputs) h.mix(uint64_t(int64_t(v)));
    for (ValueId v : n.outputs) h.mix(uint64_t(int64_t(v)));
    h.mix_params(n.params);
  }
  return h.value();
}

Status check_supported(const Device& device, const Graph& graph) {
  TS_RETURN_IF_ERROR(graph.status());
  for (const Node& n : graph.nodes()) {
    if (n.op == OpKind::kView) continue;
    if (n.op == OpKind::kAllReduce)
      return InvalidArgument(device.info().id +
                             ": all_reduce is a tensor-parallel collective: a step graph holding one "
                             "runs through SplitGraph with a Communicator, not one executor");
    const OpDTypes d = op_dtypes(graph, n);
    if (!device.supports(n.op, d.act, d.weight))
      return Unimplemented(device.info().id + ": " + op_name(n.op) + " with " + dtype_name(d.act) + " activations and " +
                           dtype_name(d.weight) + " weights is not implemented");
  }
  return OkStatus();
}

Status check_copy_regions(const Device& device, std::span<const CopyRegion> regions) {
  auto owned = [&](const Buffer* b) { return b && (b->device() == &device || (computes_on_host(device) && b->host_ptr())); };
  for (size_t i = 0; i < regions.size(); ++i) {
    const CopyRegion& r = regions[i];
    const std::string where = device.info().id + ": copy region " + std::to_string(i) + " (src offset " +
                              std::to_string(r.src_offset) + ", dst offset " + std::to_string(r.dst_offset) + ", " +
                              std::to_string(r.bytes) + " bytes)";
    if (!owned(r.src) || !owned(r.dst)) return InvalidArgument(where + ": a buffer is missing or not this device's");
    if (r.src_offset > r.src->size() || r.bytes > r.src->size() - r.src_offset)
      return InvalidArgument(where + ": past the end of the source buffer (" + std::to_string(r.src->size()) + " bytes)");
    if (r.dst_offset > r.dst->size() || r.bytes > r.dst->size() - r.dst_offset)
      return InvalidArgument(where + ": past the end of the destination buffer (" + std::to_string(r.dst->size()) +
                             " bytes)");
  }
  return OkStatus();
}

Executor::Executor(Device& device, size_t capacity) : device_(device), capacity_(std::max<size_t>(capacity, 1)) {}

// NOTE: no synchronize() here: the executor dies inside its device's destructor, where virtual
// calls no longer reach the backend. Each executable waits for its own work when destroyed.
Executor::~Executor() { cache_.clear(); }

void Executor::clear() {
  stats_.evicted += int64_t(cache_.size());
  cache_.clear();
  stats_.cached = 0;
}

Status Executor::validate(const Graph& graph) const {
  TS_RETURN_IF_ERROR(check_supported(device_, graph));
  for (const Value& v : graph.values()) {
    if (v.kind != Value::Kind::kExternal) continue;
    const Buffer* b = v.tensor.buffer.get();
    if (!b || !(b->device() == &device_ || (computes_on_host(device_) && b->host_ptr())))
      return InvalidArgument(device_.info().id + ": input '" + v.tensor.name + "' " + v.tensor.shape_string() +
                             " is not in this device's memory");
    // A repacked weight (Device::prepare_weight) is readable only by the device that made it.
    if (v.tensor.layout != WeightLayout::kRows && b->device() != &device_)
      return InvalidArgument(device_.info().id + ": weight '" + v.tensor.name + "' was repacked by " +
                             (b->device() ? b->device()->info().id : std::string("another device")) +
                             " and only that device reads its layout");
  }
  // ... and only as the weight of a matmul: no other op reads the backend's tiles.
  for (const Node& n : graph.nodes()) {
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      if (n.inputs[i] < 0) continue;
      const Tensor& t = graph.tensor(n.inputs[i]);
      if (t.layout == WeightLayout::kRows) continue;
      const bool weight_slot = (n.op == OpKind::kMatmul && i == size_t(in::kMatmulW)) ||
                               (n.op == OpKind::kMatmulId && i == size_t(in::kMatmulIdW));
      if (!weight_slot)
        return InvalidArgument(device_.info().id + ": " + op_name(n.op) + " input " + std::to_string(i) + " '" + t.name +
                               "' is a repacked weight (layout " + std::to_string(int(t.layout)) +
                               "); only a matmul's weight may be");
    }
  }
  return OkStatus();
}

Result<Event> Executor::submit(Graph& graph) {
  TS_RETURN_IF_ERROR(graph.status());
  const uint64_t key = graph_key(graph);
  auto hit = std::find_if(cache_.begin(), cache_.end(), [key](const Entry& e) { return e.key == key; });
  if (hit != cache_.end()) {
    cache_.splice(cache_.begin(), cache_, hit);  // most recently used first
    Entry& e = cache_.front();
    bind_arena(graph, e.plan, arena_);
    ++stats_.reused;
    return submit_timed(*e.exe);
  }
  TS_RETURN_IF_ERROR(validate(graph));
  MemoryPlan plan = plan_memory(graph);
  if (!arena_ || int64_t(arena_->size()) < plan.arena_bytes) {
    // Every cached executable addresses the old arena: drop them, then release the old arena
    // before allocating its successor.
    clear();
    arena_.reset();
    TS_ASSIGN_OR_RETURN(arena_, device_.alloc(size_t(std::max<int64_t>(plan.arena_bytes, 256))));
    ++stats_.arena_allocations;
    stats_.arena_bytes = int64_t(arena_->size());
  }
  bind_arena(graph, plan, arena_);
  TS_ASSIGN_OR_RETURN(ExecutablePtr exe, device_.prepare(graph));
  ++stats_.built;
  if (cache_.size() >= capacity_) {
    cache_.pop_back();
    ++stats_.evicted;
  }
  cache_.push_front(Entry{key, std::move(plan), std::move(exe)});
  stats_.cached = int64_t(cache_.size());
  return submit_timed(*cache_.front().exe);
}

Result<Event> Executor::submit_timed(Executable& exe) {
  const auto t0 = std::chrono::steady_clock::now();
  auto e = device_.submit(exe);
  stats_.device_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return e;
}

Status Executor::run(Graph& graph) {
  TS_ASSIGN_OR_RETURN(const Event e, submit(graph));
  return wait(e);
}

Status Executor::wait(Event event) {
  const auto t0 = std::chrono::steady_clock::now();
  const Status s = device_.wait(event);
  stats_.device_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s;
}

Device::Device() = default;
Device::~Device() = default;

void Device::release_executor() { executor_.reset(); }

Executor& Device::executor() {
  if (!executor_) executor_ = std::make_unique<Executor>(*this);
  return *executor_;
}

Status Device::compute(Graph& graph) { return executor().run(graph); }

Result<Event> Device::compute_async(Graph& graph) { return executor().submit(graph); }

}  // namespace tessera
