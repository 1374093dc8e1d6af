// The CPU backend: host memory, a persistent thread pool, Highway SIMD kernels with dynamic
// dispatch, int8-dot-product quantised GEMV, oneDNN for large f32/bf16 GEMMs.
#pragma once
#include <memory>

#include "backends/cpu/thread_pool.h"
#include "core/device.h"
#include "core/planner.h"

namespace tessera::cpu {

class CpuDevice final : public Device {
 public:
  explicit CpuDevice(int n_threads);
  const DeviceInfo& info() const override { return info_; }
  Result<BufferPtr> alloc(size_t bytes) override;
  Status upload(const Tensor& dst, const void* src, size_t bytes) override;
  Status download(const Tensor& src, void* dst, size_t bytes) override;
  bool supports(OpKind op, DType act, DType weight) const override;
  Status compute(Graph& graph) override;
  Status synchronize() override { return OkStatus(); }
  Result<BufferPtr> map_host(const void* ptr, size_t bytes, std::shared_ptr<const void> keepalive) override;

  ThreadPool& pool() { return pool_; }
  const GraphArena& arena() const { return arena_; }

 private:
  DeviceInfo info_;
  ThreadPool pool_;
  GraphArena arena_;
};

// Executes one node on host memory with |pool| (the op-family dispatch, backends/cpu/ops.cpp).
Status run_node(ThreadPool& pool, const Graph& graph, const Node& node);
// Whether the CPU kernels implement |op| for (act, weight).
bool kernels_support(OpKind op, DType act, DType weight);

}  // namespace tessera::cpu
