// SplitGraph: one step graph over tensors of several devices (a model placed across a GPU and
// the CPU: docs/multi-device.md), run as a chain of segments. A segment is a run of consecutive
// nodes on one device; each becomes a graph of its own with its own Executor (so it is validated,
// planned and recorded once, and its arena keeps its outputs until its next run), and the values
// that cross from one segment to another are copied into "landing" tensors the consuming
// segment's device owns.
//
// Where a node runs is decided by its inputs, as llama.cpp's scheduler assigns nodes by the
// backend of their weights:
//   1. an external it writes in place (the KV cache of attention, the recurrent state of ssm_conv
//      and gated_delta_net): that tensor's device;
//   2. else its weight input (a matmul's W, a norm's scale, an embedding table, a LoRA's A):
//      that tensor's device;
//   3. else the device of its most recently computed input;
//   4. else the main device.
// Step inputs (the caller names their buffers: token ids, positions, block tables) decide nothing
// and are copied to the segments of other devices that read them, each run.
//
// Copies between devices go through host memory (download, then upload) and wait for the
// producing segment: correct on every pair of devices, not yet overlapped (HAL events across
// devices and pinned staging are the next step).
//
// Tensor parallelism: an all_reduce node (OpKind::kAllReduce) also ends a segment. Its input is
// brought to the host after its segment, summed over the ranks by the Communicator, and lands in
// the next segment as the node's output, the way a value crossing devices does. Every rank
// builds the same graph, so the ranks meet in the same collectives in the same order.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/exec/executor.h"
#include "core/graph.h"

namespace tessera {

struct SplitStats {
  int segments = 0;
  int64_t copies = 0;         // landing copies made by run() so far (all segments' inputs)
  int64_t copied_bytes = 0;   // their bytes
  double copy_seconds = 0;    // host wall time of the copies themselves
  double wait_seconds = 0;    // host wall time waiting for a producing segment before its copies
  int64_t reduces = 0;        // all-reduces made by run() so far (tensor parallelism)
  int64_t reduced_bytes = 0;  // their bytes (per rank)
  double reduce_seconds = 0;  // host wall time in the Communicator (the other ranks' lag included)
};

class Communicator;

class SplitGraph {
 public:
  // Splits |graph| (its nodes in order; its externals on any device). |main| runs nodes nothing
  // else places; |step_inputs| are the buffers whose tensors decide no placement. Fails naming
  // the node when an op writes an external that lives on a device other than its own (a KV
  // cache and a weight of one attention placed apart cannot both be honoured) or when a value
  // that crosses devices is not contiguous. |comm| performs the graph's all_reduce nodes (a
  // graph with one and no communicator is refused); it must outlive the SplitGraph.
  static Result<std::unique_ptr<SplitGraph>> build(const Graph& graph, Device& main,
                                                   std::span<const Buffer* const> step_inputs,
                                                   Communicator* comm = nullptr);
  ~SplitGraph();

  // Queues every segment in order, copying the crossing values before each; returns the event
  // of the last segment on final_device().
  Result<Event> run();
  // Waits for an event of final_device() (counted as device time by its executor).
  Status wait(Event e);

  // Value |v| of the original graph as the last run computed it: its tensor (buffer and offset in
  // its segment's memory) and the device that holds it. Only outputs (mark_output) and the values
  // that crossed a device boundary are kept past their segment.
  const Tensor& tensor(ValueId v) const;
  Device& device_of(ValueId v) const;
  Device& final_device() const;
  // Which segment each node of the original graph runs in, and each segment's device.
  int n_segments() const { return int(segments_.size()); }
  Device& segment_device(int s) const { return *segments_[size_t(s)].device; }
  int segment_of_node(int node) const { return node_segment_[size_t(node)]; }
  const SplitStats& stats() const { return stats_; }
  // Adds the segments' executors' statistics to |sum|.
  void add_executor_stats(ExecutorStats* sum) const;

 private:
  // A value copied into segment |to| before it runs: from an external tensor (from_segment -1)
  // or from |value| of segment |from_segment|'s graph.
  struct Landing {
    int from_segment = -1;
    ValueId from_value = kNoValue;  // in the original graph: the external or the producing root
    Tensor landing;                 // on the consuming segment's device
    bool reduce = false;            // an all_reduce's output: the sum over the ranks of from_value
  };
  struct Segment {
    Device* device = nullptr;
    Graph graph;
    std::unique_ptr<Executor> executor;
    std::vector<ValueId> map;  // original value -> this graph's value (kNoValue: not here)
    std::vector<Landing> landings;
    Event event;
  };
  SplitGraph() = default;
  // build's steps: each node's device (the rules above); runs of one device into segments; a
  // segment's graph (value_in maps an original value into it, land makes a landing for one
  // from elsewhere); the graph's outputs and the crossing values marked as outputs.
  static Result<std::vector<Device*>> assign_devices(const Graph& graph, Device& main,
                                                     std::span<const Buffer* const> step_inputs);
  void make_segments(const std::vector<Device*>& node_device);
  Status build_segment(int si);
  Result<ValueId> value_in(int si, ValueId v);
  Result<ValueId> land(int si, ValueId v, int from_segment, bool reduce = false);
  Status mark_exports();
  Status copy_in(Segment& seg, const Landing& l);
  Status reduce_in(Segment& seg, const Landing& l, const Tensor& src, Device& from);

  const Graph* original_ = nullptr;
  Communicator* comm_ = nullptr;
  std::vector<Segment> segments_;
  std::vector<int> node_segment_;   // [nodes]
  std::vector<int> value_segment_;  // [values]: the segment whose graph holds the kept value, -1: external
  std::vector<std::pair<int, ValueId>> exports_;  // build's: (segment, value) a later segment copies
  std::vector<uint8_t> staging_;                  // host bounce buffer, grown as needed
  SplitStats stats_;
};

}  // namespace tessera
