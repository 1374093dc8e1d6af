#include "backends/cuda/sim/sim_device.h"

#include <cstring>
#include <string>

#include "backends/cuda/dispatch.h"
#include "backends/cuda/sim/block_sim.h"
#include "core/host_buffer.h"

namespace tessera::gpu::sim {

namespace {

struct SimExecutable final : Executable {
  std::vector<Launch> launches;
  std::vector<uint64_t> scratch;  // the plan's Scratch (8-byte aligned)
};

// The dispatch runner (dispatch.h) that runs each launch's blocks through BlockSim.
struct SimRunner {
  BlockSim& sim;
  std::string error;
  template <class K>
  void run(const Launch& l, const typename K::Args& args) {
    if (!error.empty()) return;
    std::string e = sim.run(l.grid_x, l.grid_y, l.block, [&](HostCtx& c) { K::run(c, args); });
    if (!e.empty()) error = std::string(kernel_name(l.kind)) + " (node " + std::to_string(l.node) + "): " + e;
  }
};

class SimDevice final : public Device {
 public:
  SimDevice() {
    info_.id = "cuda-sim";
    info_.name = "GPU kernels on the host simulator";
    info_.backend = "cuda-sim";
    info_.type = DeviceType::kGpu;
    info_.emulated = true;
    info_.features = "simulated warp32";
  }
  ~SimDevice() override { release_executor(); }
  const DeviceInfo& info() const override { return info_; }
  Result<BufferPtr> alloc(size_t bytes, MemoryKind) override {
    auto b = HostBuffer::create(this, bytes);
    if (!b) return ResourceExhausted("cuda-sim: cannot allocate " + std::to_string(bytes) + " bytes");
    return BufferPtr(b);
  }
  MemoryInfo memory() const override { return {}; }
  Status upload(const Tensor& dst, const void* src, size_t bytes) override {
    if (!dst.host_data() || int64_t(bytes) > dst.nbytes()) return InvalidArgument("cuda-sim: bad upload to " + dst.shape_string());
    std::memcpy(dst.host_data(), src, bytes);
    return OkStatus();
  }
  Status download(const Tensor& src, void* dst, size_t bytes) override {
    if (!src.host_data() || int64_t(bytes) > src.nbytes()) return InvalidArgument("cuda-sim: bad download from " + src.shape_string());
    std::memcpy(dst, src.host_data(), bytes);
    return OkStatus();
  }
  Result<Event> copy(std::span<const CopyRegion> regions) override {
    TS_RETURN_IF_ERROR(check_copy_regions(*this, regions));
    copy_host_regions(regions);
    return Event{};
  }
  bool supports(OpKind op, DType act, DType weight) const override { return gpu::supports(op, act, weight); }
  Result<ExecutablePtr> prepare(Graph& graph) override {
    auto exe = std::make_unique<SimExecutable>();
    const AddressOf address = [](const Tensor& t) { return static_cast<uint8_t*>(t.host_data()); };
    Scratch sizing;
    TS_RETURN_IF_ERROR(plan_graph(graph, address, &error_, sizing).status());
    exe->scratch.resize((sizing.need + 7) / 8);
    Scratch scratch{reinterpret_cast<uint8_t*>(exe->scratch.data()), 0};
    TS_ASSIGN_OR_RETURN(exe->launches, plan_graph(graph, address, &error_, scratch));
    return ExecutablePtr(std::move(exe));
  }
  Result<Event> submit(Executable& exe) override {
    SimRunner runner{sim_, {}};
    for (const Launch& l : static_cast<SimExecutable&>(exe).launches) dispatch(runner, l);
    if (!runner.error.empty()) return Internal("cuda-sim: " + runner.error);
    if (error_ != 0) {
      const auto e = KernelError(error_);
      error_ = 0;
      return InvalidArgument(std::string("cuda-sim: ") + kernel_error_message(e));
    }
    return Event{};
  }
  Status wait(Event) override { return OkStatus(); }
  Status synchronize() override { return OkStatus(); }

 private:
  DeviceInfo info_;
  BlockSim sim_;
  int32_t error_ = 0;
};

}  // namespace

DevicePtr make_sim_device() { return std::make_shared<SimDevice>(); }

}  // namespace tessera::gpu::sim
