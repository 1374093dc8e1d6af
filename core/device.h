// The HAL: what every backend implements. A Device is one stream-ordered queue: copies and
// executables are submitted in order and run in that order; an Event names a point on the
// queue that the host can wait for. A graph becomes an Executable once (validated, its
// intermediates placed, recorded: core/exec/executor.h), and is then submitted as often as the
// step's shape bucket recurs.
//
// Threading: a Device may be called from one thread at a time (the engine thread); backends
// may use their own worker threads internally.
#pragma once
#include <cstddef>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/graph.h"
#include "core/status.h"
#include "core/tensor.h"

namespace tessera {

// What a device is, by capability rather than vendor (as ggml types its devices): everything
// above backends/ that must treat devices differently branches on this and on DeviceInfo's
// flags, never on which backend or vendor a device comes from, so a new backend changes no code
// outside its own folder.
enum class DeviceType : uint8_t {
  kCpu,            // the host's own cores computing on host memory (the CPU backend, the reference)
  kGpu,            // a GPU with memory of its own
  kIntegratedGpu,  // a GPU sharing the host's memory (and GPU APIs implemented on the CPU: lavapipe)
  kAccelerator,    // anything else with memory of its own (an NPU)
};
const char* device_type_name(DeviceType t);

struct DeviceInfo {
  std::string id;           // "cpu", "vulkan:0", "cuda:1": what --device takes
  std::string name;         // "AMD EPYC 9R45 (2 threads, AVX-512 VNNI)", "llvmpipe (LLVM 15.0.7, 256 bits)"
  std::string backend;      // "cpu", "vulkan", "cuda", "hip", "cuda-sim", "reference": shown, never branched on
  DeviceType type = DeviceType::kCpu;
  bool emulated = false;      // a GPU API implemented on the CPU (lavapipe, cuda-sim): never the default
  bool by_name_only = false;  // chosen only by its id (the reference device): never "auto", not in devices()
  size_t memory_bytes = 0;    // usable device memory
  int threads = 0;            // the worker threads --threads sizes (the CPU backend's pool), or 0
  std::string features;     // "avx2 avx512 vnni", "fp16 int8 subgroup=8"
  // The dtype models build activations in on this device: f32 where the kernels are fastest in
  // it (the CPU's int8-dot and f32 paths, lavapipe), f16/bf16 where matrix units want it (GPUs).
  // Any float dtype works on every device (the conformance suite covers all three); this is the
  // default a model picks (LoadOptions::activation_dtype overrides it).
  DType activation_dtype = DType::kF32;
  // Whether models pad a decode-only step to a bucket of sequences (core/exec/bucket.h) with
  // rows that write nothing, so a batch that grows or shrinks reuses its bucket's executable:
  // worth it where recording an executable costs more than computing a few extra rows (GPUs:
  // command buffers, CUDA graphs). The CPU and lavapipe compute every padding row on the host
  // and re-plan cheaply, so they do not. LoadOptions::pad_decode_batches overrides it.
  bool pads_decode_batches = false;
  // Roofline ceilings, filled by tessera-bench measurements when known (0 = not measured).
  double peak_read_gbs = 0.0;
  std::map<DType, double> peak_flops;  // per activation/weight dtype
};

// Where an allocation lives. On the CPU all three are ordinary host memory.
enum class MemoryKind : uint8_t {
  kDevice,       // the device's own memory; may not be host-addressable (Buffer::host_ptr null)
  kHostPinned,   // host memory the device copies to and from at full speed (page-locked on GPUs):
                 // swap space, staging; always host-addressable
  kHostVisible,  // device memory the host can map (small, frequently rewritten data)
};
const char* memory_kind_name(MemoryKind k);

struct MemoryInfo {
  size_t total = 0;  // bytes the device can hold
  size_t free = 0;   // bytes an alloc() could still get (a best estimate on some drivers)
};

// A point on a device's queue: every submission before it has completed once wait() returns.
// Values of one device increase with each submission; 0 is always complete.
struct Event {
  uint64_t value = 0;
};

// One region of a batched copy: |bytes| from |src| at byte |src_offset| to |dst| at |dst_offset|.
// Both buffers come from the same device (any MemoryKind); regions of one call must not overlap
// a destination another region of the call reads or writes.
struct CopyRegion {
  const Buffer* src = nullptr;
  size_t src_offset = 0;
  const Buffer* dst = nullptr;
  size_t dst_offset = 0;
  size_t bytes = 0;
};

// A graph prepared for repeated submission: validated, its memory bound, recorded (a command
// buffer on Vulkan, the node list on the CPU, a CUDA graph later). It references the graph's
// buffers by address, so it stays valid while those buffers do; the Executor that built it owns
// it and drops it when the arena it was bound to is replaced. Destroying one waits for its work.
class Executable {
 public:
  virtual ~Executable() = default;
  Executable() = default;
  Executable(const Executable&) = delete;
  Executable& operator=(const Executable&) = delete;
};
using ExecutablePtr = std::unique_ptr<Executable>;

class Executor;
class DeviceProfiling;

// A ceiling of the roofline measured by a kernel written for it (Device::measure_peaks): the
// widest streaming loads for bandwidth, an FMA / matrix-unit throughput loop per dtype.
struct PeakFigure {
  std::string name;              // "read", "copy" (GB/s); "f32", "f16", "bf16", "int8" (GFLOP/s)
  std::string method;            // how it was measured, in words
  std::vector<double> samples;   // one figure per timed repetition, in GB/s or GFLOP/s
};

class Device {
 public:
  virtual ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  virtual const DeviceInfo& info() const = 0;

  // |bytes| of memory of |kind|, uninitialised. ResourceExhausted when it does not fit.
  virtual Result<BufferPtr> alloc(size_t bytes, MemoryKind kind = MemoryKind::kDevice) = 0;
  // Total and free memory of kind kDevice.
  virtual MemoryInfo memory() const = 0;

  // Copies |bytes| from host |src| into |dst|'s memory starting at dst's element 0. |dst| must be
  // contiguous and bytes <= dst.nbytes(). Ordered on the queue: later submissions see the data;
  // |src| may be reused when it returns.
  virtual Status upload(const Tensor& dst, const void* src, size_t bytes) = 0;
  // Copies |bytes| of |src| (contiguous) to host |dst|; waits for queued work first.
  virtual Status download(const Tensor& src, void* dst, size_t bytes) = 0;
  // Queues every region of |regions| as one batched copy after the work already queued and
  // returns its event. Device-to-device and host-pinned <-> device copies never pass through
  // host code on a device whose memory the host cannot address. Fails before queueing anything
  // (InvalidArgument naming the region) when a region is out of its buffers' bounds or a buffer
  // belongs to another device.
  virtual Result<Event> copy(std::span<const CopyRegion> regions) = 0;

  // Whether the device implements |op| with activation dtype |act| and weight (second input)
  // dtype |weight|. For ops without a weight pass act twice.
  virtual bool supports(OpKind op, DType act, DType weight) const = 0;

  // Records |graph| for submission. The caller (core/exec's Executor) has validated it (every op
  // supported, every external tensor in memory this device reads) and bound its intermediates
  // and views to an arena it allocated from this device; the graph must not change afterwards.
  // Fails on a shape or layout the device's kernels cannot run, naming the node.
  virtual Result<ExecutablePtr> prepare(Graph& graph) = 0;
  // Queues |exe| after the work already queued. Outputs are readable by download() (which waits)
  // or after wait() on the event. An executable submitted again waits for its previous run.
  virtual Result<Event> submit(Executable& exe) = 0;
  // Blocks until |event| has completed; reports a device error that happened on the way.
  virtual Status wait(Event event) = 0;
  // Waits for all queued work.
  virtual Status synchronize() = 0;

  // Runs |graph| once and waits: validation, arena placement, prepare, submit and wait through
  // this device's own Executor, which caches one executable per graph key (shapes, params,
  // buffers), so a recurring step shape re-submits a recorded executable. Decorators override it.
  virtual Status compute(Graph& graph);
  // compute() without the wait: queues |graph| through the Executor and returns its event, so
  // the host can queue more (the outputs' copy to host-pinned memory) or do other work while the
  // device runs. The graph's tensors name its outputs' memory as soon as it returns; they stay
  // valid until the next compute on this device. Decorators that observe a graph's outputs
  // (quantize/calibrate) override it too; they may run synchronously and return Event{}.
  virtual Result<Event> compute_async(Graph& graph);
  // The executor compute() runs on (its cache statistics); created on first use.
  Executor& executor();

  // (optional) Wraps host memory that outlives the buffer through |keepalive| (a mapped model
  // file) as a read-only device buffer without copying. Devices that cannot address host memory
  // return Unimplemented and callers fall back to alloc + upload.
  virtual Result<BufferPtr> map_host(const void* ptr, size_t bytes, std::shared_ptr<const void> keepalive) {
    return Unimplemented(info().id + ": cannot map host memory");
  }

  // (optional) The weight |w| (kRows layout, this device's memory or mapped host memory) as the
  // device wants it for |use| (kMatmul or kMatmulId, as the weight input): either |w| itself, or
  // a copy in memory of its own, repacked into the backend's tiled layout (Tensor::layout names
  // it; its buffer's size is the memory it costs). Called once per weight at load time; the
  // caller keeps |w| only if another op still reads it (a tied embedding). The default keeps |w|.
  virtual Result<Tensor> prepare_weight(const Tensor& w, [[maybe_unused]] OpKind use) { return w; }

  // (optional) The bench's view of the device's kernels (core/profiling.h), or null.
  virtual DeviceProfiling* profiling() { return nullptr; }

  // (optional) Runs |graph| as compute() does, waits for it, and returns the seconds the device's
  // own clock (GPU timestamp queries) measured for its work: the sum over the graph's dispatches,
  // leaving out submission, fences and host wake-ups. For benchmarks (tessera-bench); no serving
  // path calls it. A device without such a clock returns Unimplemented without running |graph|,
  // and the caller times compute() by host wall time instead.
  virtual Result<double> time_compute([[maybe_unused]] Graph& graph) {
    return Unimplemented(info().id + ": no device clock to time compute() by");
  }

  // (optional) The device's ceilings, measured by purpose-built peak kernels on the device's own
  // clock (tessera-bench roofline). A device without them returns Unimplemented and the bench
  // measures through the HAL's own ops instead.
  virtual Result<std::vector<PeakFigure>> measure_peaks([[maybe_unused]] bool quick) {
    return Unimplemented(info().id + ": no peak kernels");
  }

 protected:
  Device();
  // Drops the executor and its executables. A backend whose executables hold its own objects
  // (command buffers, pools) calls it first in its destructor, while those objects still exist.
  void release_executor();

 private:
  std::unique_ptr<Executor> executor_;
};

using DevicePtr = std::shared_ptr<Device>;

// Unimplemented naming the first node of |graph| that |device| does not support (op and dtypes),
// else OK. The Executor calls it before prepare(): a missing op is an error, never a fallback.
Status check_supported(const Device& device, const Graph& graph);

// InvalidArgument naming the region when a region of |regions| is out of its buffers' bounds, or
// when a buffer is null or not |device|'s (shared by the backends' copy()).
Status check_copy_regions(const Device& device, std::span<const CopyRegion> regions);

// Uploads host data into a new tensor on |device| (helper for tests, loaders and the engine).
Result<Tensor> upload_new(Device& device, const Tensor& desc, const void* src);

}  // namespace tessera
