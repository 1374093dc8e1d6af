// The CUDA (and, built by hipcc, the HIP) device on HAL v2: one non-blocking stream per device;
// device, pinned and mapped memory; batched copies; every executable captured once as a graph
// (CUDA graphs / HIP graphs) of the node's kernel launches (plan.h) and replayed on submit;
// events recorded per submission. Data errors the kernels find (a token id outside the vocabulary,
// a bad block table) land in an error word in device memory that wait() and synchronize() read.
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>

#include "backends/cuda/dispatch.h"
#include "backends/cuda/kernel_ctx.h"
#include "backends/cuda/vendor.h"
#include "core/registry.h"

namespace tessera::TS_GPU_NS {

#include "backends/cuda/peaks.cuh"

namespace {

template <class K>
__global__ void entry(typename K::Args args) {
  gpu::DeviceCtx c;
  K::run(c, args);
}

Status gpu_status(gpuError_t e, const std::string& what) {
  if (e == gpuSuccess) return OkStatus();
  return Internal(std::string(TS_GPU_NAME) + ": " + what + ": " + gpuGetErrorName(e) + ": " + gpuGetErrorString(e));
}

// Launches every kernel of a plan on one stream (dispatch.h's runner).
struct StreamRunner {
  gpuStream_t stream;
  gpuError_t error = gpuSuccess;
  template <class K>
  void run(const gpu::Launch& l, const typename K::Args& args) {
    entry<K><<<dim3(l.grid_x, l.grid_y), dim3(l.block), 0, stream>>>(args);
    if (error == gpuSuccess) error = gpuGetLastError();
  }
};

class GpuBuffer final : public Buffer {
 public:
  GpuBuffer(Device* d, size_t size, void* host, void* dev, bool pinned)
      : Buffer(d, size, host), dev_(dev), pinned_(pinned) {}
  ~GpuBuffer() override {
    if (pinned_) (void)gpuFreeHost(dev_);
    else (void)gpuFree(dev_);
  }
  uint8_t* device_ptr() const { return static_cast<uint8_t*>(dev_); }

 private:
  void* dev_;
  bool pinned_;
};

struct GpuExecutable final : Executable {
  gpuGraph_t graph = nullptr;
  gpuGraphExec_t exec = nullptr;
  gpuStream_t stream = nullptr;
  void* scratch = nullptr;  // the plan's Scratch (quantised activations)
  ~GpuExecutable() override {
    if (stream) (void)gpuStreamSynchronize(stream);
    if (exec) (void)gpuGraphExecDestroy(exec);
    if (graph) (void)gpuGraphDestroy(graph);
    if (scratch) (void)gpuFree(scratch);
  }
};

class GpuDevice final : public Device {
 public:
  static Result<DevicePtr> create(int ordinal) {
    auto d = std::shared_ptr<GpuDevice>(new GpuDevice(ordinal));
    TS_RETURN_IF_ERROR(d->init());
    return DevicePtr(d);
  }
  ~GpuDevice() override {
    release_executor();
    if (stream_) (void)gpuStreamSynchronize(stream_);
    for (auto& e : events_) (void)gpuEventDestroy(e.second);
    for (auto e : free_events_) (void)gpuEventDestroy(e);
    if (error_word_) (void)gpuFree(error_word_);
    if (stream_) (void)gpuStreamDestroy(stream_);
  }
  const DeviceInfo& info() const override { return info_; }

  Result<BufferPtr> alloc(size_t bytes, MemoryKind kind) override {
    TS_RETURN_IF_ERROR(select());
    void* p = nullptr;
    const size_t n = bytes ? bytes : 1;
    if (kind == MemoryKind::kDevice) {
      if (gpuMalloc(&p, n) != gpuSuccess) {
        (void)gpuGetLastError();
        return ResourceExhausted(info_.id + ": cannot allocate " + std::to_string(bytes) + " bytes of device memory");
      }
      return BufferPtr(std::make_shared<GpuBuffer>(this, bytes, nullptr, p, false));
    }
    // Pinned and host-visible memory: page-locked and mapped, one address for host and device.
    if (gpuHostAlloc(&p, n, gpuHostAllocMapped) != gpuSuccess) {
      (void)gpuGetLastError();
      return ResourceExhausted(info_.id + ": cannot allocate " + std::to_string(bytes) + " bytes of pinned memory");
    }
    return BufferPtr(std::make_shared<GpuBuffer>(this, bytes, p, p, true));
  }
  MemoryInfo memory() const override {
    size_t free = 0, total = 0;
    if (const_cast<GpuDevice*>(this)->select().ok() && gpuMemGetInfo(&free, &total) == gpuSuccess) return {total, free};
    return {};
  }

  Status upload(const Tensor& dst, const void* src, size_t bytes) override {
    TS_RETURN_IF_ERROR(check_tensor(dst, bytes, "upload to"));
    // From pageable memory the copy has been staged when the call returns, so |src| is reusable.
    return gpu_status(gpuMemcpyAsync(address(dst), src, bytes, gpuMemcpyDefault, stream_), "upload");
  }
  Status download(const Tensor& src, void* dst, size_t bytes) override {
    TS_RETURN_IF_ERROR(check_tensor(src, bytes, "download from"));
    TS_RETURN_IF_ERROR(gpu_status(gpuMemcpyAsync(dst, address(src), bytes, gpuMemcpyDefault, stream_), "download"));
    return synchronize();
  }
  Result<Event> copy(std::span<const CopyRegion> regions) override {
    TS_RETURN_IF_ERROR(check_copy_regions(*this, regions));
    TS_RETURN_IF_ERROR(select());
    for (const CopyRegion& r : regions) {
      auto* src = static_cast<const GpuBuffer*>(r.src)->device_ptr() + r.src_offset;
      auto* dst = static_cast<const GpuBuffer*>(r.dst)->device_ptr() + r.dst_offset;
      TS_RETURN_IF_ERROR(gpu_status(gpuMemcpyAsync(dst, src, r.bytes, gpuMemcpyDefault, stream_), "copy"));
    }
    return record();
  }

  bool supports(OpKind op, DType act, DType weight) const override { return gpu::supports(op, act, weight); }

  // Plans the graph's launches and captures them into a graph, replayed by every submit().
  Result<ExecutablePtr> prepare(Graph& graph) override {
    TS_RETURN_IF_ERROR(select());
    const gpu::AddressOf addr = [](const Tensor& t) { return address(t); };
    gpu::Scratch sizing;
    TS_RETURN_IF_ERROR(gpu::plan_graph(graph, addr, error_word_, sizing).status());
    auto exe = std::make_unique<GpuExecutable>();
    exe->stream = stream_;
    if (sizing.need > 0 && gpuMalloc(&exe->scratch, sizing.need) != gpuSuccess) {
      (void)gpuGetLastError();
      return ResourceExhausted(info_.id + ": cannot allocate " + std::to_string(sizing.need) + " bytes of scratch");
    }
    gpu::Scratch scratch{static_cast<uint8_t*>(exe->scratch), 0};
    TS_ASSIGN_OR_RETURN(auto launches, gpu::plan_graph(graph, addr, error_word_, scratch));
    TS_RETURN_IF_ERROR(gpu_status(gpuStreamBeginCapture(stream_, gpuStreamCaptureModeThreadLocal), "begin capture"));
    StreamRunner runner{stream_};
    for (const gpu::Launch& l : launches) gpu::dispatch(runner, l);
    const gpuError_t end = gpuStreamEndCapture(stream_, &exe->graph);
    TS_RETURN_IF_ERROR(gpu_status(runner.error, "kernel launch during capture"));
    TS_RETURN_IF_ERROR(gpu_status(end, "end capture"));
    TS_RETURN_IF_ERROR(gpu_status(gpuGraphInstantiate(&exe->exec, exe->graph), "instantiate graph"));
    return ExecutablePtr(std::move(exe));
  }
  Result<Event> submit(Executable& e) override {
    TS_RETURN_IF_ERROR(select());
    auto& exe = static_cast<GpuExecutable&>(e);
    TS_RETURN_IF_ERROR(gpu_status(gpuGraphLaunch(exe.exec, stream_), "graph launch"));
    return record();
  }
  Status wait(Event ev) override {
    if (ev.value == 0) return check_error_word();
    auto it = events_.find(ev.value);
    if (it != events_.end()) {
      TS_RETURN_IF_ERROR(gpu_status(gpuEventSynchronize(it->second), "wait"));
      // Events up to this one are complete: recycle them.
      for (auto j = events_.begin(); j != events_.end() && j->first <= ev.value;) {
        free_events_.push_back(j->second);
        j = events_.erase(j);
      }
    }
    return check_error_word();
  }
  Result<std::vector<PeakFigure>> measure_peaks(bool quick) override {
    TS_RETURN_IF_ERROR(synchronize());
    std::vector<PeakFigure> out;
    const int reps = quick ? 3 : 7;
    gpuEvent_t t0 = nullptr, t1 = nullptr;
    TS_RETURN_IF_ERROR(gpu_status(gpuEventCreate(&t0), "timing event"));
    TS_RETURN_IF_ERROR(gpu_status(gpuEventCreate(&t1), "timing event"));
    // Times |launch| |reps| times on the device clock; amount / seconds / 1e9 per repetition.
    auto timed = [&](const std::string& name, const std::string& method, double amount, auto launch) -> Status {
      PeakFigure f{name, method, {}};
      launch();  // warm-up
      for (int r = 0; r < reps; ++r) {
        TS_RETURN_IF_ERROR(gpu_status(gpuEventRecord(t0, stream_), "record"));
        launch();
        TS_RETURN_IF_ERROR(gpu_status(gpuGetLastError(), name + " peak kernel"));
        TS_RETURN_IF_ERROR(gpu_status(gpuEventRecord(t1, stream_), "record"));
        TS_RETURN_IF_ERROR(gpu_status(gpuEventSynchronize(t1), "wait"));
        float ms = 0.0f;
        TS_RETURN_IF_ERROR(gpu_status(gpuEventElapsedTime(&ms, t0, t1), "elapsed"));
        if (ms > 0.0f) f.samples.push_back(amount / (double(ms) * 1e-3) / 1e9);
      }
      out.push_back(std::move(f));
      return OkStatus();
    };
    const size_t bytes = quick ? (size_t(512) << 20) : (size_t(4) << 30);
    void* buf = nullptr;
    uint32_t* sink = nullptr;
    TS_RETURN_IF_ERROR(gpu_status(gpuMalloc(&buf, bytes), "peak buffer"));
    Status st = gpu_status(gpuMalloc(reinterpret_cast<void**>(&sink), 1 << 16), "sink");
    const int blocks = sms_ * 8;
    if (st.ok())
      (void)(st = timed("read", "16-byte loads over " + std::to_string(bytes >> 20) + " MiB (device clock)", double(bytes), [&] {
        peaks::read_kernel<<<blocks, 256, 0, stream_>>>(static_cast<const uint4*>(buf), bytes / 16, sink);
      }));
    if (st.ok())
      (void)(st = timed("copy", "device-to-device copy of " + std::to_string(bytes >> 21) + " MiB (read + write)", double(bytes),
                 [&] { (void)gpuMemcpyAsync(static_cast<char*>(buf) + bytes / 2, buf, bytes / 2, gpuMemcpyDeviceToDevice, stream_); }));
    const int iters = quick ? 2048 : 8192;
    if (st.ok())
      (void)(st = timed("f32", std::to_string(peaks::kFmaChains) + " FMA chains per thread (f32)",
                 2.0 * peaks::kFmaChains * double(iters) * blocks * 256,
                 [&] { peaks::fma_kernel<<<blocks, 256, 0, stream_>>>(reinterpret_cast<float*>(sink), iters); }));
#if !defined(__HIPCC__)
    const double mma_flops = 2.0 * 16 * 16 * 16 * peaks::kMmaChains * double(iters) * blocks * 4;  // 4 warps a block
    if (st.ok())
      (void)(st = timed("f16", "WMMA 16x16x16 f16 -> f32 from registers (mma.sync)", mma_flops, [&] {
        peaks::mma_kernel<__half, float><<<blocks, 128, 0, stream_>>>(reinterpret_cast<float*>(sink), iters);
      }));
    if (st.ok())
      (void)(st = timed("bf16", "WMMA 16x16x16 bf16 -> f32 from registers (mma.sync)", mma_flops, [&] {
        peaks::mma_kernel<__nv_bfloat16, float><<<blocks, 128, 0, stream_>>>(reinterpret_cast<float*>(sink), iters);
      }));
    if (st.ok())
      (void)(st = timed("int8", "WMMA 16x16x16 s8 -> s32 from registers (mma.sync)", mma_flops, [&] {
        peaks::mma_kernel<signed char, int><<<blocks, 128, 0, stream_>>>(reinterpret_cast<int*>(sink), iters);
      }));
#endif
    (void)gpuFree(buf);
    (void)gpuFree(sink);
    (void)gpuEventDestroy(t0);
    (void)gpuEventDestroy(t1);
    TS_RETURN_IF_ERROR(st);
    return out;
  }

  Status synchronize() override {
    TS_RETURN_IF_ERROR(select());
    TS_RETURN_IF_ERROR(gpu_status(gpuStreamSynchronize(stream_), "synchronize"));
    for (auto& e : events_) free_events_.push_back(e.second);
    events_.clear();
    return check_error_word();
  }

 private:
  explicit GpuDevice(int ordinal) : ordinal_(ordinal) {}

  Status init() {
    TS_RETURN_IF_ERROR(select());
    gpuDeviceProp prop{};
    TS_RETURN_IF_ERROR(gpu_status(gpuGetDeviceProperties(&prop, ordinal_), "device properties"));
    info_.id = std::string(TS_GPU_NAME) + ":" + std::to_string(ordinal_);
    info_.name = prop.name;
    info_.backend = TS_GPU_BACKEND;
    info_.type = DeviceType::kGpu;
    info_.memory_bytes = prop.totalGlobalMem;
    sms_ = prop.multiProcessorCount;
    info_.features = "cc " + std::to_string(prop.major) + "." + std::to_string(prop.minor) + " sms " +
                     std::to_string(prop.multiProcessorCount) + " warp " + std::to_string(prop.warpSize) + " graphs";
    // NOTE: f32 activations until the tensor-core GEMMs land (the kernels take f16/bf16 too).
    info_.activation_dtype = DType::kF32;
    info_.pads_decode_batches = true;
    TS_RETURN_IF_ERROR(gpu_status(gpuStreamCreateWithFlags(&stream_, gpuStreamNonBlocking), "create stream"));
    // Device memory, not mapped host memory: atomics on host memory need PCIe atomics.
    void* w = nullptr;
    TS_RETURN_IF_ERROR(gpu_status(gpuMalloc(&w, sizeof(int32_t)), "error word"));
    error_word_ = static_cast<int32_t*>(w);
    return gpu_status(gpuMemset(error_word_, 0, sizeof(int32_t)), "error word");
  }
  Status select() { return gpu_status(gpuSetDevice(ordinal_), "set device " + std::to_string(ordinal_)); }

  static uint8_t* address(const Tensor& t) {
    return static_cast<const GpuBuffer*>(t.buffer.get())->device_ptr() + t.offset;
  }
  Status check_tensor(const Tensor& t, size_t bytes, const char* what) const {
    if (!t.buffer || t.buffer->device() != this) return InvalidArgument(info_.id + ": " + what + " a tensor of another device");
    if (int64_t(bytes) > t.nbytes() || t.offset + bytes > t.buffer->size())
      return OutOfRange(info_.id + ": " + what + " " + t.shape_string() + ": " + std::to_string(bytes) + " bytes");
    return OkStatus();
  }
  Result<Event> record() {
    gpuEvent_t e = nullptr;
    if (!free_events_.empty()) {
      e = free_events_.back();
      free_events_.pop_back();
    } else {
      TS_RETURN_IF_ERROR(gpu_status(gpuEventCreateWithFlags(&e, gpuEventDisableTiming), "create event"));
    }
    TS_RETURN_IF_ERROR(gpu_status(gpuEventRecord(e, stream_), "record event"));
    const uint64_t v = ++next_event_;
    events_.emplace_back(v, e);
    return Event{v};
  }
  // Called once the work that could have set it is complete. A blocking copy on the legacy
  // stream, which does not wait for work queued since on this (non-blocking) stream.
  Status check_error_word() {
    int32_t code = 0;
    TS_RETURN_IF_ERROR(gpu_status(gpuMemcpy(&code, error_word_, sizeof code, gpuMemcpyDeviceToHost), "error word"));
    if (code == 0) return OkStatus();
    TS_RETURN_IF_ERROR(gpu_status(gpuMemset(error_word_, 0, sizeof(int32_t)), "error word"));
    return InvalidArgument(info_.id + ": " + gpu::kernel_error_message(gpu::KernelError(code)));
  }

  int ordinal_;
  int sms_ = 1;
  DeviceInfo info_;
  gpuStream_t stream_ = nullptr;
  int32_t* error_word_ = nullptr;
  uint64_t next_event_ = 0;
  // Recorded events not yet waited for, in submission order.
  struct EventList : std::deque<std::pair<uint64_t, gpuEvent_t>> {
    iterator find(uint64_t v) {
      for (auto it = begin(); it != end(); ++it)
        if (it->first == v) return it;
      return end();
    }
  } events_;
  std::vector<gpuEvent_t> free_events_;
};

}  // namespace

// Every device the runtime reports, or one unavailable entry saying why there is none.
void probe(std::vector<DeviceEntry>& out) {
  int count = 0;
  const gpuError_t err = gpuGetDeviceCount(&count);
  if (err != gpuSuccess || count <= 0) {
    std::string why = err == gpuSuccess ? "no device" : std::string(gpuGetErrorName(err)) + ": " + gpuGetErrorString(err);
#if !defined(__HIPCC__)
    if (err == cudaErrorInsufficientDriver) why = "no NVIDIA driver (or one older than this CUDA runtime) is installed";
    if (err == cudaErrorNoDevice) why = "the driver found no CUDA device";
#endif
    (void)gpuGetLastError();
    out.push_back({TS_GPU_NAME, TS_GPU_NAME, nullptr, Unavailable(std::string(TS_GPU_NAME) + ": " + why)});
    return;
  }
  for (int i = 0; i < count; ++i) {
    const std::string id = std::string(TS_GPU_NAME) + ":" + std::to_string(i);
    auto d = GpuDevice::create(i);
    if (d.ok()) out.push_back({TS_GPU_NAME, id, *d, OkStatus()});
    else out.push_back({TS_GPU_NAME, id, nullptr, Unavailable(d.status().message())});
  }
}

}  // namespace tessera::TS_GPU_NS
