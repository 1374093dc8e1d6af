#include "backends/cpu/cpu_device.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "backends/cpu/cpu_features.h"
#include "backends/cpu/kernels.h"
#include "core/host_buffer.h"
#include "core/profiling.h"
#include "core/registry.h"

namespace tessera::cpu {

namespace {
std::string cpu_model_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) {
      auto p = line.find(':');
      if (p != std::string::npos) return line.substr(p + 2);
    }
  return "CPU";
}
// A /proc/meminfo field ("MemTotal:", "MemAvailable:") in bytes, 0 when absent.
size_t meminfo_bytes(const std::string& field) {
  std::ifstream f("/proc/meminfo");
  std::string key;
  size_t kb = 0;
  while (f >> key >> kb) {
    if (key == field) return kb * 1024;
    f.ignore(256, '\n');
  }
  return 0;
}

// The CPU's executable: the graph as the executor bound it, and the pool lane it runs on.
struct CpuExecutable final : Executable {
  explicit CpuExecutable(const Graph& g) : graph(g) {
    for (const Node& n : graph.nodes())
      if (n.op == OpKind::kMatmul && graph.input_tensor(n, in::kMatmulX).rows() > 1) lane = ThreadPool::kBatch;
  }
  Graph graph;
  // Single-row graphs (decode) run on the decode lane, the rest (prefill, batches) on the batch lane.
  ThreadPool::Lane lane = ThreadPool::kDecode;
};
}  // namespace

CpuDevice::CpuDevice(int n_threads, int n_threads_batch)
    : pool_(std::max({1, n_threads, n_threads_batch})),
      threads_decode_(std::clamp(n_threads, 1, pool_.size())),
      threads_batch_(n_threads_batch > 0 ? std::min(n_threads_batch, pool_.size()) : threads_decode_) {
  pool_.set_caps(threads_decode_, threads_batch_);
  info_.id = "cpu";
  info_.backend = "cpu";
  info_.type = DeviceType::kCpu;
  info_.threads = pool_.size();
  info_.name = cpu_model_name() + " (" + std::to_string(threads_decode_) + " threads" +
               (threads_batch_ != threads_decode_ ? ", " + std::to_string(threads_batch_) + " for prefill" : "") + ")";
  info_.features = cpu_feature_string();
  info_.memory_bytes = meminfo_bytes("MemTotal:");
}

CpuDevice::~CpuDevice() { release_executor(); }

MemoryInfo CpuDevice::memory() const { return {info_.memory_bytes, meminfo_bytes("MemAvailable:")}; }

Result<BufferPtr> CpuDevice::alloc(size_t bytes, MemoryKind) {
  auto b = HostBuffer::create(this, bytes);
  if (!b) return ResourceExhausted("cpu: cannot allocate " + std::to_string(bytes) + " bytes");
  return BufferPtr(b);
}

Status CpuDevice::upload(const Tensor& dst, const void* src, size_t bytes) {
  if (!dst.host_data()) return InvalidArgument("cpu: upload to a tensor without host memory: " + dst.shape_string());
  if (int64_t(bytes) > dst.nbytes())
    return OutOfRange("cpu: upload of " + std::to_string(bytes) + " bytes into " + dst.shape_string() + " (" +
                      std::to_string(dst.nbytes()) + " bytes)");
  std::memcpy(dst.host_data(), src, bytes);
  return OkStatus();
}

Status CpuDevice::download(const Tensor& src, void* dst, size_t bytes) {
  if (!src.host_data()) return InvalidArgument("cpu: download from a tensor without host memory: " + src.shape_string());
  if (int64_t(bytes) > src.nbytes())
    return OutOfRange("cpu: download of " + std::to_string(bytes) + " bytes from " + src.shape_string());
  std::memcpy(dst, src.host_data(), bytes);
  return OkStatus();
}

Result<BufferPtr> CpuDevice::map_host(const void* ptr, size_t bytes, std::shared_ptr<const void> keepalive) {
  // NOTE: the memory may be a read-only file mapping; kernels never write weights.
  return BufferPtr(HostBuffer::wrap(this, const_cast<void*>(ptr), bytes, std::move(keepalive)));
}

Result<Tensor> CpuDevice::prepare_weight(const Tensor& w, OpKind use) {
#if defined(__x86_64__)
  static const bool enabled = [] {
    const char* e = std::getenv("TESSERA_CPU_REPACK");
    return !(e && std::string(e) == "0");
  }();
  if (!enabled || use != OpKind::kMatmul || w.rank != 2 || w.layout != WeightLayout::kRows || !w.host_data() ||
      !repack_tiles_supported(w.dtype, w.shape[0], w.shape[1]))
    return w;
  const int64_t N = w.shape[0], K = w.shape[1];
  TS_ASSIGN_OR_RETURN(BufferPtr buf, alloc(size_t(N * w.row_bytes())));
  repack_tiles(pool_, w.dtype, static_cast<const char*>(w.host_data()), w.stride[0], N, K,
               static_cast<char*>(buf->host_ptr()));
  Tensor t = Tensor::make(w.dtype, {N, K}, w.name);
  t.buffer = std::move(buf);
  t.layout = WeightLayout::kCpuTile16;
  return t;
#else
  (void)use;
  return w;  // NOTE: arm64 keeps rows: its Q8_0 sdot path (arm_dot.h) and the portable decoders read them
#endif
}

Result<Event> CpuDevice::copy(std::span<const CopyRegion> regions) {
  TS_RETURN_IF_ERROR(check_copy_regions(*this, regions));
  copy_host_regions(regions);
  return Event{};
}

bool CpuDevice::supports(OpKind op, DType act, DType weight) const { return kernels_support(op, act, weight); }

Result<ExecutablePtr> CpuDevice::prepare(Graph& graph) { return ExecutablePtr(new CpuExecutable(graph)); }

std::string CpuDevice::thread_summary() const {
  const ThreadPoolStats s = pool_.stats();
  char buf[512];
  std::string out = std::to_string(threads_decode_) + " threads";
  if (threads_batch_ != threads_decode_) out += " (" + std::to_string(threads_batch_) + " for prefill)";
  if (s.tbb) return out + ", on a oneTBB arena (TESSERA_CPU_POOL=tbb)";
  if (!s.adaptive) return out + ", fixed (TESSERA_CPU_ADAPT=0)";
  if (s.ops == 0) return out + ", adaptive";
  std::snprintf(buf, sizeof(buf),
                ", adaptive: %s (%.0f%% of %llu pool calls below the cap; narrowest %d decode, %d prefill); "
                "%llu stalls, %llu late arrivals, %llu steals, %llu involuntary switches",
                s.shrinks > 0 ? "shrank under load" : "never shrank",
                100.0 * double(s.narrow_ops) / double(s.ops), (unsigned long long)s.ops, s.min_width[0], s.min_width[1],
                (unsigned long long)s.stalls, (unsigned long long)s.late, (unsigned long long)s.steals,
                (unsigned long long)s.nivcsw);
  return out + buf;
}

Result<Event> CpuDevice::submit(Executable& exe) {
  const auto& cpu_exe = static_cast<CpuExecutable&>(exe);
  const Graph& graph = cpu_exe.graph;
  pool_.set_lane(cpu_exe.lane);
  begin_graph_run();
  for (const Node& n : graph.nodes()) TS_RETURN_IF_ERROR(run_node(pool_, graph, n));
  return Event{};
}

}  // namespace tessera::cpu
