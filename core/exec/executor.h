// Executor: turns graphs into executables once per shape bucket and submits them. It owns what
// every backend used to repeat at the top of compute(): validation (supported ops and dtypes,
// external tensors in memory the device reads), the activation arena (core/planner.h) and its
// growth, and a cache of prepared executables keyed by everything a recorded executable bakes
// in (graph_key below). A model that keeps its step inputs at stable addresses and pads a step
// to a bucket (core/exec/bucket.h) re-submits one recorded executable per bucket in a steady
// decode: no validation, planning or recording on that path.
//
// Not thread-safe: the thread that calls the device calls it.
#pragma once
#include <cstdint>
#include <list>
#include <memory>

#include "core/device.h"
#include "core/planner.h"

namespace tessera {

struct ExecutorStats {
  int64_t built = 0;     // executables prepared (cache misses)
  int64_t reused = 0;    // submissions of a cached executable (hits)
  int64_t evicted = 0;   // dropped: least recently used past the capacity, or bound to a replaced arena
  int64_t arena_allocations = 0;  // activation arenas allocated (each growth invalidates the cache)
  int64_t arena_bytes = 0;
  int64_t cached = 0;    // executables held now
  // Seconds spent in the device's submit() and wait() for run() and wait(): its compute as the host sees it
  // (what tessera-bench subtracts from a step's wall time to get the host overhead).
  double device_seconds = 0;
};

// Everything an executable records: ops, params, each value's dtype, shape, strides and kind, and
// each external tensor's buffer and offset. Two graphs with equal keys can share an executable.
uint64_t graph_key(const Graph& graph);

class Executor {
 public:
  explicit Executor(Device& device, size_t capacity = 16);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Validates |graph| (or finds its key in the cache), binds its intermediates and views to the
  // arena, prepares or reuses its executable and queues it. After it returns, |graph|'s tensors
  // name the memory the run writes: download its outputs, or wait() for the event.
  Result<Event> submit(Graph& graph);
  // submit() and wait.
  Status run(Graph& graph);
  // Waits for |event| (of a submit()), counting the wait as device time like run() does.
  Status wait(Event event);

  const ExecutorStats& stats() const { return stats_; }
  // Drops every cached executable (each waits for its own work).
  void clear();

 private:
  struct Entry {
    uint64_t key = 0;
    MemoryPlan plan;
    ExecutablePtr exe;
  };
  Status validate(const Graph& graph) const;
  Result<Event> submit_timed(Executable& exe);

  Device& device_;
  size_t capacity_;
  std::list<Entry> cache_;  // most recently used first
  BufferPtr arena_;
  ExecutorStats stats_;
};

}  // namespace tessera
