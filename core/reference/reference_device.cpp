#include <cstring>

#include "core/host_buffer.h"
#include "core/reference/reference.h"

namespace tessera::ref {

Status run_node(const Graph& g, const Node& n) {
  switch (n.op) {
    case OpKind::kEmbed: return embed(g, n);
    case OpKind::kMatmul: return matmul(g, n);
    case OpKind::kMatmulId: return matmul_id(g, n);
    case OpKind::kRmsNorm: return rms_norm(g, n);
    case OpKind::kRope: return rope(g, n);
    case OpKind::kAttention: return attention(g, n);
    case OpKind::kGlu: return glu(g, n);
    case OpKind::kAdd:
    case OpKind::kMul: return binary(g, n);
    case OpKind::kScale: return scale(g, n);
    case OpKind::kSoftmax: return softmax(g, n);
    case OpKind::kTopkRoute: return topk_route(g, n);
    case OpKind::kCast:
    case OpKind::kCopy: return convert(g, n);
    case OpKind::kView: return OkStatus();
    case OpKind::kLayerNorm: return layer_norm(g, n);
    case OpKind::kGelu: return gelu(g, n);
    case OpKind::kSsmConv: return ssm_conv(g, n);
    case OpKind::kGatedDeltaNet: return gated_delta_net(g, n);
    case OpKind::kLora:
      return lora(g, n);
    case OpKind::kAllReduce:  // performed between segments by SplitGraph, never by a backend
    case OpKind::kCount: break;
  }
  return Unimplemented(std::string("reference: op ") + op_name(n.op));
}

ReferenceDevice::ReferenceDevice() {
  info_.id = "reference";
  info_.name = "scalar reference (double accumulation)";
  info_.backend = "reference";
  info_.type = DeviceType::kCpu;
  info_.by_name_only = true;
}

ReferenceDevice::~ReferenceDevice() { release_executor(); }

Result<BufferPtr> ReferenceDevice::alloc(size_t bytes, MemoryKind) {
  auto b = HostBuffer::create(this, bytes);
  if (!b) return ResourceExhausted("reference: cannot allocate " + std::to_string(bytes) + " bytes");
  return BufferPtr(b);
}

Status ReferenceDevice::upload(const Tensor& dst, const void* src, size_t bytes) {
  if (!dst.host_data() || int64_t(bytes) > dst.nbytes()) return InvalidArgument("reference: bad upload to " + dst.shape_string());
  std::memcpy(dst.host_data(), src, bytes);
  return OkStatus();
}

Status ReferenceDevice::download(const Tensor& src, void* dst, size_t bytes) {
  if (!src.host_data() || int64_t(bytes) > src.nbytes()) return InvalidArgument("reference: bad download of " + src.shape_string());
  std::memcpy(dst, src.host_data(), bytes);
  return OkStatus();
}

bool ReferenceDevice::supports(OpKind, DType, DType) const { return true; }

Result<Event> ReferenceDevice::copy(std::span<const CopyRegion> regions) {
  TS_RETURN_IF_ERROR(check_copy_regions(*this, regions));
  copy_host_regions(regions);
  return Event{};
}

namespace {
struct ReferenceExecutable final : Executable {
  explicit ReferenceExecutable(const Graph& g) : graph(g) {}
  Graph graph;
};
}  // namespace

Result<ExecutablePtr> ReferenceDevice::prepare(Graph& graph) { return ExecutablePtr(new ReferenceExecutable(graph)); }

Result<Event> ReferenceDevice::submit(Executable& exe) {
  const Graph& graph = static_cast<ReferenceExecutable&>(exe).graph;
  for (const Node& n : graph.nodes()) TS_RETURN_IF_ERROR(run_node(graph, n));
  return Event{};
}

}  // namespace tessera::ref
