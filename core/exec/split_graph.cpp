#include "core/exec/split_graph.h"

#include <algorithm>
#include <chrono>

#include "core/comm/communicator.h"

namespace tessera {

namespace {

// The value whose memory |v| is: itself, or a view's base.
ValueId root_of(const Graph& g, ValueId v) {
  const Value& val = g.value(v);
  return val.kind == Value::Kind::kView ? val.view_base : v;
}

// The inputs an op writes in place (they must live on the device that runs it).
std::vector<int> written_inputs(OpKind op) {
  switch (op) {
    case OpKind::kAttention:
      return {in::kAttnKCache, in::kAttnVCache};
    case OpKind::kSsmConv:
      return {in::kConvState};
    case OpKind::kGatedDeltaNet:
      return {in::kGdnState};
    default:
      return {};
  }
}

// The input that is an op's weight (the matrix, the norm's scale, the table, the adapter), or -1.
// Other external inputs (a rope's frequency factors, a router's bias) decide nothing: they are
// small, and copied to wherever the node runs.
int weight_input(OpKind op) {
  switch (op) {
    case OpKind::kEmbed:
      return in::kEmbedWeight;
    case OpKind::kMatmul:
      return in::kMatmulW;
    case OpKind::kMatmulId:
      return in::kMatmulIdW;
    case OpKind::kRmsNorm:
      return in::kRmsNormW;
    case OpKind::kLayerNorm:
      return in::kLayerNormW;
    case OpKind::kLora:
      return in::kLoraA;
    default:
      return -1;
  }
}

}  // namespace

SplitGraph::~SplitGraph() = default;

Result<std::vector<Device*>> SplitGraph::assign_devices(const Graph& graph, Device& main,
                                                        std::span<const Buffer* const> step_inputs) {
  auto is_step_input = [&](const Buffer* b) {
    return std::find(step_inputs.begin(), step_inputs.end(), b) != step_inputs.end();
  };
  auto external_device = [&](ValueId v) -> Device* {
    const Value& r = graph.value(root_of(graph, v));
    return r.kind == Value::Kind::kExternal && r.tensor.buffer ? r.tensor.buffer->device() : nullptr;
  };
  const std::vector<Node>& nodes = graph.nodes();
  std::vector<Device*> node_device(nodes.size(), nullptr);
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    Device* d = nullptr;
    for (int w : written_inputs(n.op)) {  // 1. what it writes in place
      if (!graph.has_input(n, w)) continue;
      Device* wd = external_device(n.inputs[size_t(w)]);
      if (!wd) continue;
      if (d && d != wd)
        return InvalidArgument(std::string("split graph: node ") + std::to_string(i) + " (" + op_name(n.op) +
                               ") writes tensors on two devices (" + d->info().id + ", " + wd->info().id + ")");
      d = wd;
    }
    if (const int w = weight_input(n.op); !d && w >= 0 && graph.has_input(n, w)) {  // 2. its weight
      const Value& r = graph.value(root_of(graph, n.inputs[size_t(w)]));
      if (r.kind == Value::Kind::kExternal && r.tensor.buffer && !is_step_input(r.tensor.buffer.get()))
        d = r.tensor.buffer->device();
    }
    if (!d) {  // 3. its most recently computed input
      int32_t latest = -1;
      for (ValueId v : n.inputs)
        if (v != kNoValue) latest = std::max(latest, graph.value(root_of(graph, v)).producer);
      if (latest >= 0) d = node_device[size_t(latest)];
    }
    node_device[i] = d ? d : &main;  // 4. the main device
  }
  return node_device;
}

void SplitGraph::make_segments(const std::vector<Device*>& node_device) {
  const size_t n_values = original_->values().size();
  node_segment_.assign(node_device.size(), -1);
  for (size_t i = 0; i < node_device.size(); ++i) {
    // An all_reduce starts a segment: its sum lands in the segment as a copy does.
    const bool collective = original_->nodes()[i].op == OpKind::kAllReduce;
    if (segments_.empty() || segments_.back().device != node_device[i] || collective) {
      Segment s;
      s.device = node_device[i];
      s.map.assign(n_values, kNoValue);
      s.executor = std::make_unique<Executor>(*s.device, 4);
      segments_.push_back(std::move(s));
    }
    node_segment_[i] = int(segments_.size()) - 1;
  }
  value_segment_.assign(n_values, -1);
  for (size_t v = 0; v < n_values; ++v) {
    const Value& r = original_->value(root_of(*original_, ValueId(v)));
    if (r.kind == Value::Kind::kIntermediate && r.producer >= 0) value_segment_[v] = node_segment_[size_t(r.producer)];
  }
}

Result<ValueId> SplitGraph::land(int si, ValueId v, int from_segment, bool reduce) {
  Segment& seg = segments_[size_t(si)];
  const Tensor& t = original_->tensor(v);
  if (!t.is_contiguous())
    return InvalidArgument("split graph: value '" + t.name + "' crosses to " + seg.device->info().id +
                           " but is not contiguous");
  TS_ASSIGN_OR_RETURN(BufferPtr buf, seg.device->alloc(size_t(t.nbytes())));
  Landing l;
  l.from_segment = from_segment;
  l.from_value = v;
  l.landing = t;
  l.landing.buffer = std::move(buf);
  l.landing.offset = 0;
  l.reduce = reduce;
  seg.landings.push_back(l);
  if (from_segment >= 0) exports_.push_back({from_segment, v});
  return seg.graph.input(seg.landings.back().landing);
}

Result<ValueId> SplitGraph::value_in(int si, ValueId v) {
  Segment& seg = segments_[size_t(si)];
  if (v == kNoValue || seg.map[size_t(v)] != kNoValue) return v == kNoValue ? kNoValue : seg.map[size_t(v)];
  const Value& val = original_->value(v);
  ValueId out = kNoValue;
  if (val.kind == Value::Kind::kView) {  // a view's base is never a view: one level of recursion
    TS_ASSIGN_OR_RETURN(const ValueId base, value_in(si, val.view_base));
    out = seg.graph.alias(base, val.tensor, val.view_offset);
  } else if (val.kind == Value::Kind::kExternal) {
    if (val.tensor.buffer && val.tensor.buffer->device() == seg.device) {
      out = seg.graph.input(val.tensor);
    } else {
      TS_ASSIGN_OR_RETURN(out, land(si, v, -1));
    }
  } else {
    const int from = value_segment_[size_t(v)];
    if (from == si) return Internal("split graph: value used before the node that computes it");
    TS_ASSIGN_OR_RETURN(out, land(si, v, from));
  }
  TS_RETURN_IF_ERROR(seg.graph.status());
  seg.map[size_t(v)] = out;
  return out;
}

Status SplitGraph::build_segment(int si) {
  Segment& seg = segments_[size_t(si)];
  const std::vector<Node>& nodes = original_->nodes();
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (node_segment_[i] != si) continue;
    const Node& n = nodes[i];
    if (n.op == OpKind::kAllReduce) {  // its output is its input's sum, landed here by copy_in
      const ValueId x = n.inputs[0];
      const Value& xv = original_->value(x);
      TS_ASSIGN_OR_RETURN(const ValueId summed,
                          land(si, x, xv.kind == Value::Kind::kExternal ? -1 : value_segment_[size_t(x)], true));
      TS_RETURN_IF_ERROR(seg.graph.status());
      seg.map[size_t(n.outputs[0])] = summed;
      continue;
    }
    std::vector<ValueId> ins;
    ins.reserve(n.inputs.size());
    for (ValueId v : n.inputs) {
      TS_ASSIGN_OR_RETURN(const ValueId mapped, value_in(si, v));
      ins.push_back(mapped);
    }
    std::vector<Tensor> outs;
    for (ValueId o : n.outputs) outs.push_back(original_->tensor(o));
    seg.graph.clone_node(n, std::move(ins), outs);
    TS_RETURN_IF_ERROR(seg.graph.status());
    const std::vector<ValueId>& made = seg.graph.nodes().back().outputs;
    for (size_t k = 0; k < n.outputs.size(); ++k) seg.map[size_t(n.outputs[k])] = made[k];
  }
  return OkStatus();
}

Status SplitGraph::mark_exports() {
  const std::vector<Value>& values = original_->values();
  for (size_t v = 0; v < values.size(); ++v)
    if (values[v].is_output && value_segment_[v] >= 0) exports_.push_back({value_segment_[v], ValueId(v)});
  for (const auto& [si, v] : exports_) {
    Segment& seg = segments_[size_t(si)];
    ValueId m = seg.map[size_t(v)];
    const Value& val = values[size_t(v)];
    if (m == kNoValue && val.kind == Value::Kind::kView) {  // an output view nothing in its segment read
      const ValueId base = seg.map[size_t(val.view_base)];
      if (base == kNoValue) return Internal("split graph: an output's base is not in its segment");
      m = seg.map[size_t(v)] = seg.graph.alias(base, val.tensor, val.view_offset);
    }
    if (m == kNoValue) return Internal("split graph: an exported value is not in its segment");
    seg.graph.mark_output(m);
  }
  for (const Segment& s : segments_) TS_RETURN_IF_ERROR(s.graph.status());
  return OkStatus();
}

Result<std::unique_ptr<SplitGraph>> SplitGraph::build(const Graph& graph, Device& main,
                                                      std::span<const Buffer* const> step_inputs, Communicator* comm) {
  TS_RETURN_IF_ERROR(graph.status());
  for (const Node& n : graph.nodes())
    if (n.op == OpKind::kAllReduce && !comm)
      return InvalidArgument(
          "split graph: the graph holds all_reduce nodes (a tensor-parallel model) but no communicator");
  std::unique_ptr<SplitGraph> sg(new SplitGraph());
  sg->original_ = &graph;
  sg->comm_ = comm;
  TS_ASSIGN_OR_RETURN(const std::vector<Device*> node_device, assign_devices(graph, main, step_inputs));
  sg->make_segments(node_device);
  // Each segment's graph: its nodes cloned over its own values, with landings for what it reads
  // from other devices or segments; then what must outlive a segment is marked.
  for (int si = 0; si < int(sg->segments_.size()); ++si) TS_RETURN_IF_ERROR(sg->build_segment(si));
  TS_RETURN_IF_ERROR(sg->mark_exports());
  sg->exports_.clear();
  sg->stats_.segments = int(sg->segments_.size());
  return sg;
}

Status SplitGraph::copy_in(Segment& seg, const Landing& l) {
  using Clock = std::chrono::steady_clock;
  const Tensor* src = nullptr;
  Device* from = nullptr;
  if (l.from_segment < 0) {
    src = &original_->tensor(l.from_value);
    from = src->buffer->device();
  } else {
    const Segment& p = segments_[size_t(l.from_segment)];
    src = &p.graph.tensor(p.map[size_t(l.from_value)]);
    from = p.device;
    if (from != seg.device || l.reduce) {  // the host waits for the producer (devices cannot wait on each other yet)
      const auto w0 = Clock::now();
      TS_RETURN_IF_ERROR(from->wait(p.event));
      stats_.wait_seconds += std::chrono::duration<double>(Clock::now() - w0).count();
    }
  }
  if (l.reduce) return reduce_in(seg, l, *src, *from);
  const auto t0 = Clock::now();
  const size_t bytes = size_t(l.landing.nbytes());
  if (from == seg.device) {
    const CopyRegion region{src->buffer.get(), src->offset, l.landing.buffer.get(), 0, bytes};
    TS_RETURN_IF_ERROR(seg.device->copy(std::span<const CopyRegion>(&region, 1)).status());
  } else {
    std::vector<uint8_t>& host = staging_;
    if (host.size() < bytes) host.resize(bytes);
    TS_RETURN_IF_ERROR(from->download(*src, host.data(), bytes));
    TS_RETURN_IF_ERROR(seg.device->upload(l.landing, host.data(), bytes));
  }
  ++stats_.copies;
  stats_.copied_bytes += int64_t(bytes);
  stats_.copy_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  return OkStatus();
}

Status SplitGraph::reduce_in(Segment& seg, const Landing& l, const Tensor& src, Device& from) {
  using Clock = std::chrono::steady_clock;
  const size_t bytes = size_t(l.landing.nbytes());
  std::vector<uint8_t>& host = staging_;
  if (host.size() < bytes) host.resize(bytes);
  TS_RETURN_IF_ERROR(from.download(src, host.data(), bytes));
  const auto t0 = Clock::now();
  TS_RETURN_IF_ERROR(comm_->all_reduce_sum(host.data(), l.landing.numel(), l.landing.dtype));
  stats_.reduce_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  TS_RETURN_IF_ERROR(seg.device->upload(l.landing, host.data(), bytes));
  ++stats_.reduces;
  stats_.reduced_bytes += int64_t(bytes);
  return OkStatus();
}

Result<Event> SplitGraph::run() {
  Event last;
  for (Segment& seg : segments_) {
    for (const Landing& l : seg.landings) TS_RETURN_IF_ERROR(copy_in(seg, l));
    TS_ASSIGN_OR_RETURN(seg.event, seg.executor->submit(seg.graph));
    last = seg.event;
  }
  return last;
}

Status SplitGraph::wait(Event e) {
  if (segments_.empty()) return OkStatus();
  return segments_.back().executor->wait(e);
}

const Tensor& SplitGraph::tensor(ValueId v) const {
  const int s = value_segment_[size_t(v)];
  if (s < 0) return original_->tensor(v);
  const Segment& seg = segments_[size_t(s)];
  return seg.graph.tensor(seg.map[size_t(v)]);
}

Device& SplitGraph::device_of(ValueId v) const {
  const int s = value_segment_[size_t(v)];
  if (s < 0) return *original_->tensor(v).buffer->device();
  return *segments_[size_t(s)].device;
}

Device& SplitGraph::final_device() const { return *segments_.back().device; }

void SplitGraph::add_executor_stats(ExecutorStats* sum) const {
  for (const Segment& s : segments_) {
    const ExecutorStats& e = s.executor->stats();
    sum->built += e.built;
    sum->reused += e.reused;
    sum->evicted += e.evicted;
    sum->arena_allocations += e.arena_allocations;
    sum->arena_bytes += e.arena_bytes;
    sum->cached += e.cached;
    sum->device_seconds += e.device_seconds;
  }
}

}  // namespace tessera
