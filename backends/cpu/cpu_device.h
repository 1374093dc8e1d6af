// The CPU backend: host memory, a persistent thread pool, Highway SIMD kernels with dynamic
// dispatch, int8-dot-product quantised GEMV, oneDNN for large f32/bf16 GEMMs.
#pragma once
#include <memory>
#include <string>

#include "backends/cpu/thread_pool.h"
#include "core/device.h"

namespace tessera::cpu {

class CpuDevice final : public Device {
 public:
  // |n_threads| threads for every graph; with |n_threads_batch| (> 0) the pool has
  // max(n_threads, n_threads_batch) threads and graphs whose matmuls have more than one row
  // (prefill, batches) use up to n_threads_batch, single-row graphs (decode) up to n_threads.
  explicit CpuDevice(int n_threads, int n_threads_batch = 0);
  ~CpuDevice() override;
  const DeviceInfo& info() const override { return info_; }
  // Every MemoryKind is ordinary host memory here.
  Result<BufferPtr> alloc(size_t bytes, MemoryKind kind = MemoryKind::kDevice) override;
  MemoryInfo memory() const override;
  Status upload(const Tensor& dst, const void* src, size_t bytes) override;
  Status download(const Tensor& src, void* dst, size_t bytes) override;
  // The queue is synchronous: copy() and submit() have finished when they return (event 0).
  Result<Event> copy(std::span<const CopyRegion> regions) override;
  bool supports(OpKind op, DType act, DType weight) const override;
  // The executable is the bound graph; submit() runs its nodes on the pool.
  Result<ExecutablePtr> prepare(Graph& graph) override;
  Result<Event> submit(Executable& exe) override;
  Status wait(Event) override { return OkStatus(); }
  Status synchronize() override { return OkStatus(); }
  Result<BufferPtr> map_host(const void* ptr, size_t bytes, std::shared_ptr<const void> keepalive) override;
  // Q4_0, Q4_1 and Q8_0 matmul weights with N a multiple of 16 become row tiles
  // (WeightLayout::kCpuTile16, backends/cpu/matmul_tiled.cpp) in memory of their own, the same
  // size as the rows; everything else, kMatmulId weights, and every weight on 64-bit Arm (whose
  // sdot kernels read rows) stay |w|. TESSERA_CPU_REPACK=0 keeps every weight in rows (for
  // measuring the two layouts against each other).
  Result<Tensor> prepare_weight(const Tensor& w, OpKind use) override;

  DeviceProfiling* profiling() override;

  ThreadPool& pool() { return pool_; }
  // Thread counts per lane (decode, batch) and what the pool did under load, in one line.
  std::string thread_summary() const;

 private:
  DeviceInfo info_;
  ThreadPool pool_;
  int threads_decode_, threads_batch_;
  std::unique_ptr<DeviceProfiling> profiling_;  // created on first use (backends/cpu/profiling.cpp)
};

// Executes one node on host memory with |pool| (the op-family dispatch, backends/cpu/ops.cpp).
Status run_node(ThreadPool& pool, const Graph& graph, const Node& node);
// Whether the CPU kernels implement |op| for (act, weight).
bool kernels_support(OpKind op, DType act, DType weight);

}  // namespace tessera::cpu
