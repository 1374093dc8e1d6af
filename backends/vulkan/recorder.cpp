// Graph -> one command buffer: VulkanDevice::compute and time_compute, supports, and the Recorder.
#include "backends/vulkan/recorder.h"

#include <algorithm>
#include <cstring>

namespace tessera::vulkan {

namespace {
constexpr size_t kParamsChunk = size_t(64) << 10;  // params chunk (bytes); a decode graph needs a few
constexpr size_t kParamsAlign = 16;
}  // namespace

Span span_of(const Tensor& t) {
  int64_t extent = t.row_bytes();
  if (!dtype_traits(t.dtype).is_quantized) {
    extent = dtype_traits(t.dtype).block_bytes;
    for (int d = 0; d < t.rank; ++d) extent += (t.shape[size_t(d)] - 1) * t.stride[size_t(d)];
  } else {
    for (int d = 0; d < t.rank - 1; ++d) extent += (t.shape[size_t(d)] - 1) * t.stride[size_t(d)];
  }
  return {t.buffer.get(), int64_t(t.offset), int64_t(t.offset) + extent};
}

uint64_t address_of(const Tensor& t) {
  return static_cast<const VulkanBuffer*>(t.buffer.get())->address() + t.offset;
}

// shaders/types.glsl reads dtypes by these values (DT_F32 ...).
static_assert(uint32_t(DType::kF32) == 0 && uint32_t(DType::kF16) == 1 && uint32_t(DType::kBF16) == 2 &&
              uint32_t(DType::kI8) == 3 && uint32_t(DType::kI32) == 4);
// The generator table (CMakeLists.txt) and dequant.glsl's W_* name weight formats by these.
static_assert(uint32_t(DType::kQ8_0) == 5 && uint32_t(DType::kQ4_K) == 10 && uint32_t(DType::kMXFP4) == 13 &&
              uint32_t(DType::kFP8_E4M3) == 15 && uint32_t(DType::kINT8_PC) == 17 && uint32_t(DType::kINT4_G128) == 20);

TensorRef ref_of(const Tensor& t) {
  TensorRef r;
  r.addr = address_of(t);
  const int lead = t.rank - 1;  // leading dims, right-aligned into the 3 slots
  for (int i = 0; i < lead; ++i) {
    r.shape[3 - lead + i] = uint32_t(t.shape[size_t(i)]);
    r.stride[3 - lead + i] = uint32_t(t.stride[size_t(i)]);
  }
  r.col_stride = uint32_t(t.stride[size_t(t.rank - 1)]);
  r.dtype = uint32_t(t.dtype);
  return r;
}

uint32_t groups_for(int64_t n, int64_t per_group) {
  return uint32_t(std::clamp<int64_t>((n + per_group - 1) / per_group, 1, 65535));
}

const char* weight_kernel_suffix(DType w) {
  switch (w) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kQ8_0: return "q8_0";
    case DType::kQ4_0: return "q4_0";
    case DType::kQ4_1: return "q4_1";
    case DType::kQ5_0: return "q5_0";
    case DType::kQ5_1: return "q5_1";
    case DType::kQ4_K: return "q4_k";
    case DType::kQ5_K: return "q5_k";
    case DType::kQ6_K: return "q6_k";
    case DType::kMXFP4: return "mxfp4";
    case DType::kNVFP4: return "nvfp4";
    case DType::kFP8_E4M3: return "fp8_e4m3";
    case DType::kFP8_E5M2: return "fp8_e5m2";
    case DType::kINT8_PC: return "int8_pc";
    case DType::kINT4_G32: return "int4_g32";
    case DType::kINT4_G64: return "int4_g64";
    case DType::kINT4_G128: return "int4_g128";
    default: return nullptr;
  }
}

Recorder::Recorder(VulkanDevice& device, VulkanExecutable& exe, uint32_t max_dispatches)
    : device_(device), exe_(exe), cmd_(exe.cmd_), max_dispatches_(max_dispatches) {}

Result<uint64_t> Recorder::put(const void* data, size_t bytes) {
  auto& chunks = exe_.params_;
  const size_t need = (bytes + kParamsAlign - 1) / kParamsAlign * kParamsAlign;
  if (chunks.empty() || chunk_used_ + need > chunks.back()->size()) {
    TS_ASSIGN_OR_RETURN(auto b, device_.make_buffer(std::max(kParamsChunk, need), true));
    chunks.push_back(std::move(b));
    chunk_used_ = 0;
  }
  VulkanBuffer& b = *chunks.back();
  std::memcpy(static_cast<char*>(b.host_ptr()) + chunk_used_, data, bytes);
  const uint64_t addr = b.address() + chunk_used_;
  chunk_used_ += need;
  return addr;
}

void Recorder::barrier_if_needed(const std::vector<Span>& reads, const std::vector<Span>& writes) {
  auto overlaps = [](const Span& a, const std::vector<Span>& set) {
    for (const Span& b : set)
      if (a.buffer == b.buffer && a.begin < b.end && b.begin < a.end) return true;
    return false;
  };
  bool needed = false;
  for (const Span& r : reads) needed = needed || overlaps(r, pending_writes_);
  for (const Span& w : writes) needed = needed || overlaps(w, pending_writes_) || overlaps(w, pending_reads_);
  if (needed) {
    VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_SHADER_READ_BIT;
    mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
    device_.ctx_->api.vkCmdPipelineBarrier(cmd_, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                                           VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb, 0, nullptr, 0, nullptr);
    pending_writes_.clear();
    pending_reads_.clear();
  }
  pending_writes_.insert(pending_writes_.end(), writes.begin(), writes.end());
  pending_reads_.insert(pending_reads_.end(), reads.begin(), reads.end());
}

Status Recorder::dispatch_at(const std::string& kernel, const std::vector<uint32_t>& spec, uint64_t params_addr,
                             const std::array<uint32_t, 3>& groups, const std::vector<Span>& reads, const std::vector<Span>& writes) {
  if (n_dispatch_ >= max_dispatches_) return Internal("vulkan: more dispatches than planned");
  TS_ASSIGN_OR_RETURN(VkPipeline p, device_.pipeline(kernel, spec));
  const DeviceApi& api = device_.ctx_->api;
  barrier_if_needed(reads, writes);
  const VkQueryPool queries = exe_.queries_;
  if (queries) api.vkCmdWriteTimestamp(cmd_, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, queries, 2 * n_dispatch_);
  api.vkCmdBindPipeline(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, p);
  api.vkCmdPushConstants(cmd_, device_.layout_, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof(params_addr), &params_addr);
  api.vkCmdDispatch(cmd_, groups[0], groups[1], groups[2]);
  if (queries) api.vkCmdWriteTimestamp(cmd_, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, queries, 2 * n_dispatch_ + 1);
  exe_.kernels_.push_back(kernel);
  exe_.ops_.push_back(current_op);
  ++n_dispatch_;
  return OkStatus();
}

bool VulkanDevice::supports(OpKind op, DType act, DType weight) const {
  const bool float_act = act == DType::kF32 || act == DType::kF16 || act == DType::kBF16;
  if (!float_act) return false;
  switch (op) {
    case OpKind::kEmbed:
    case OpKind::kMatmul:
    case OpKind::kMatmulId: return weight_kernel_suffix(weight) != nullptr;
    case OpKind::kAttention:  // |weight| is the KV cache dtype
      return weight == DType::kF32 || weight == DType::kF16 || weight == DType::kBF16 || weight == DType::kFP8_E4M3 ||
             weight == DType::kINT8_PC;
    case OpKind::kCast: return weight == DType::kF32 || weight == DType::kF16 || weight == DType::kBF16;
    case OpKind::kSsmConv:
    case OpKind::kGatedDeltaNet: return weight == DType::kF32;  // the state
    case OpKind::kLora:
      return weight == DType::kF32 || weight == DType::kF16 || weight == DType::kBF16;  // A and B
    case OpKind::kRmsNorm:
    case OpKind::kLayerNorm:
    case OpKind::kGelu:
    case OpKind::kRope:
    case OpKind::kGlu:
    case OpKind::kAdd:
    case OpKind::kMul:
    case OpKind::kScale:
    case OpKind::kSoftmax:
    case OpKind::kTopkRoute:
    case OpKind::kCopy:
    case OpKind::kView: return true;
    case OpKind::kAllReduce:  // performed between segments by SplitGraph, never by a backend
    case OpKind::kCount: return false;
  }
  return false;  // NOTE: no default above, so a new OpKind is a compiler warning (an error in CI)
}

namespace {
Status record_node(Recorder& rec, const Graph& g, const Node& n) {
  rec.current_op = n.op;
  switch (n.op) {
    case OpKind::kEmbed: return record_embed(rec, g, n);
    case OpKind::kMatmul: return record_matmul(rec, g, n);
    case OpKind::kMatmulId: return record_matmul_id(rec, g, n);
    case OpKind::kRmsNorm:
    case OpKind::kLayerNorm:
    case OpKind::kSoftmax: return record_norm(rec, g, n);
    case OpKind::kRope: return record_rope(rec, g, n);
    case OpKind::kAttention: return record_attention(rec, g, n);
    case OpKind::kGlu:
    case OpKind::kAdd:
    case OpKind::kMul:
    case OpKind::kScale:
    case OpKind::kGelu:
    case OpKind::kCast:
    case OpKind::kCopy: return record_elementwise(rec, g, n);
    case OpKind::kTopkRoute: return record_topk_route(rec, g, n);
    case OpKind::kSsmConv: return record_ssm_conv(rec, g, n);
    case OpKind::kGatedDeltaNet: return record_gated_delta_net(rec, g, n);
    case OpKind::kLora:
      return record_lora(rec, g, n);
    case OpKind::kView: return OkStatus();
    case OpKind::kAllReduce:  // performed between segments by SplitGraph, never by a backend
    case OpKind::kCount: break;
  }
  return Unimplemented(std::string("vulkan: op ") + op_name(n.op));
}

}  // namespace

VulkanExecutable::~VulkanExecutable() {
  const DeviceApi& api = device_.ctx_->api;
  (void)device_.wait(Event{last_});  // the command buffer and params must outlive its last run
  if (device_.last_exe_ == this) device_.last_exe_ = nullptr;
  // NOTE: while the device closes, destroying its command pool frees every command buffer; a
  // vkFreeCommandBuffers then (at process exit) crashed inside the validation layer.
  if (!device_.closing_) api.vkFreeCommandBuffers(device_.ctx_->device, device_.pool_, 1, &cmd_);
  if (queries_) api.vkDestroyQueryPool(device_.ctx_->device, queries_, nullptr);
}

Result<ExecutablePtr> VulkanDevice::prepare(Graph& graph) {
  const DeviceApi& api = ctx_->api;
  VkCommandBufferAllocateInfo cai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  cai.commandPool = pool_;
  cai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  cai.commandBufferCount = 1;
  VkCommandBuffer cmd = VK_NULL_HANDLE;
  TS_VK_RETURN_IF_ERROR(api.vkAllocateCommandBuffers(ctx_->device, &cai, &cmd), "vkAllocateCommandBuffers");
  auto exe = std::make_unique<VulkanExecutable>(*this, cmd);
  for (const Value& v : graph.values())
    if (v.tensor.buffer && std::find(exe->buffers_.begin(), exe->buffers_.end(), v.tensor.buffer) == exe->buffers_.end())
      exe->buffers_.push_back(v.tensor.buffer);
  const uint32_t max_dispatches = uint32_t(graph.nodes().size()) * 2 + 2;
  if (caps_.timestamp_bits > 0) {
    VkQueryPoolCreateInfo qci{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
    qci.queryType = VK_QUERY_TYPE_TIMESTAMP;
    qci.queryCount = max_dispatches * 2;
    TS_VK_RETURN_IF_ERROR(api.vkCreateQueryPool(ctx_->device, &qci, nullptr, &exe->queries_), "vkCreateQueryPool");
  }
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  TS_VK_RETURN_IF_ERROR(api.vkBeginCommandBuffer(cmd, &bi), "vkBeginCommandBuffer");
  if (exe->queries_) api.vkCmdResetQueryPool(cmd, exe->queries_, 0, max_dispatches * 2);
  // Copies and earlier graphs (other submissions) before this graph's first dispatch.
  memory_barrier(api, cmd, VK_PIPELINE_STAGE_TRANSFER_BIT | VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_HOST_BIT,
                 VK_ACCESS_TRANSFER_WRITE_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_HOST_WRITE_BIT,
                 VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
  Recorder rec(*this, *exe, max_dispatches);
  Status recorded = OkStatus();
  for (const Node& n : graph.nodes()) {
    recorded = record_node(rec, graph, n);
    if (!recorded.ok()) break;
  }
  // The results (outputs, the KV cache) before the host reads mapped memory or copies them out.
  memory_barrier(api, cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT,
                 VK_PIPELINE_STAGE_HOST_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                 VK_ACCESS_HOST_READ_BIT | VK_ACCESS_TRANSFER_READ_BIT);
  TS_VK_RETURN_IF_ERROR(api.vkEndCommandBuffer(cmd), "vkEndCommandBuffer");
  TS_RETURN_IF_ERROR(recorded);  // nothing was submitted: external tensors are untouched
  ++recordings_;
  return ExecutablePtr(std::move(exe));
}

Result<Event> VulkanDevice::submit(Executable& executable) {
  auto& exe = static_cast<VulkanExecutable&>(executable);
  // A command buffer is not resubmitted while it is pending (it is recorded for reuse, not for
  // simultaneous use): its previous run must have finished.
  if (exe.last_ > completed_) TS_RETURN_IF_ERROR(wait(Event{exe.last_}));
  TS_ASSIGN_OR_RETURN(exe.last_, queue_submit(exe.cmd_));
  exe.timings_read_ = false;
  last_exe_ = &exe;
  return Event{exe.last_};
}

Status VulkanDevice::read_timings(const VulkanExecutable& exe) {
  if (exe.timings_read_ || exe.last_ > completed_) return OkStatus();
  exe.timings_read_ = true;
  timings_.clear();
  if (!exe.queries_ || exe.kernels_.empty()) return OkStatus();
  std::vector<uint64_t> ts(exe.kernels_.size() * 2);
  TS_VK_RETURN_IF_ERROR(ctx_->api.vkGetQueryPoolResults(ctx_->device, exe.queries_, 0, uint32_t(ts.size()), ts.size() * 8,
                                                        ts.data(), 8, VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT),
                        "vkGetQueryPoolResults");
  for (size_t i = 0; i < exe.kernels_.size(); ++i)
    timings_.push_back({exe.kernels_[i], exe.ops_[i], double(ts[2 * i + 1] - ts[2 * i]) * caps_.timestamp_period_ns * 1e-3});
  return OkStatus();
}

Result<double> VulkanDevice::time_compute(Graph& graph) {
  if (caps_.timestamp_bits == 0) return Unimplemented(info_.id + ": the compute queue has no timestamp queries");
  // compute() waits for the executable, which fills timings_ with every dispatch's time.
  TS_RETURN_IF_ERROR(compute(graph));
  double us = 0.0;
  for (const DispatchTiming& t : timings_) us += t.microseconds;
  return us * 1e-6;
}

}  // namespace tessera::vulkan
