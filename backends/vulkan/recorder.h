// Records one graph into one command buffer: params structs into the executable's params memory, a pipeline
// barrier only where a dispatch touches memory an earlier, unbarriered dispatch wrote (or writes
// what one read), and timestamp queries around every dispatch.
#pragma once
#include <array>
#include <string>
#include <vector>

#include "backends/vulkan/device.h"
#include "backends/vulkan/params.h"

namespace tessera::vulkan {

// A byte range of a buffer that a dispatch reads or writes.
struct Span {
  const Buffer* buffer;
  int64_t begin, end;
};
// The bytes |t| can touch (from its strides).
Span span_of(const Tensor& t);

// A recorded graph: its command buffer (replayed by every submit), the params it reads, the
// timestamp queries around its dispatches and the buffers it addresses (kept alive with it).
class VulkanExecutable final : public Executable {
 public:
  VulkanExecutable(VulkanDevice& device, VkCommandBuffer cmd) : device_(device), cmd_(cmd) {}
  ~VulkanExecutable() override;

 private:
  friend class VulkanDevice;
  friend class Recorder;
  VulkanDevice& device_;
  VkCommandBuffer cmd_;
  VkQueryPool queries_ = VK_NULL_HANDLE;
  std::vector<std::shared_ptr<VulkanBuffer>> params_;  // params chunks, written once when recorded
  std::vector<BufferPtr> buffers_;                     // every buffer the graph addresses
  std::vector<std::string> kernels_;                   // per dispatch, for timings
  std::vector<OpKind> ops_;
  uint64_t last_ = 0;                                  // the event of its latest submission
  mutable bool timings_read_ = false;  // timings_ already holds this run's times
};

class Recorder {
 public:
  Recorder(VulkanDevice& device, VulkanExecutable& exe, uint32_t max_dispatches);

  // Appends a dispatch of |kernel| (specialised by |spec|: constant_id 0, 1, ...) over |groups|
  // workgroups, with |params| in the params ring.
  template <class P>
  Status dispatch(const std::string& kernel, const std::vector<uint32_t>& spec, const P& params,
                  const std::array<uint32_t, 3>& groups, const std::vector<Span>& reads, const std::vector<Span>& writes) {
    TS_ASSIGN_OR_RETURN(const uint64_t addr, put(&params, sizeof(P)));
    return dispatch_at(kernel, spec, addr, groups, reads, writes);
  }
  // Copies |bytes| of side data (such as rope's f64 frequency table) into the params ring.
  Result<uint64_t> put(const void* data, size_t bytes);

  OpKind current_op = OpKind::kCount;  // for timings
  const Capabilities& caps() const { return device_.caps_; }
  // Whether the host reads now what the device will read in |t| (when the recording is first
  // submitted): mapped memory with no queued copy into it still pending. Step data that arrives
  // by queued copies (Model::submit) is not, and host-side checks of it are skipped: the shaders
  // bounds-check every id, slot and block they read.
  bool host_current(const Tensor& t) const {
    return t.host_data() != nullptr && static_cast<const VulkanBuffer&>(*t.buffer).queued_write() <= device_.completed_;
  }
  // Whether the host can check input |input| of |n| now (ids, slots, tables a shader will trust):
  // a value not computed in-graph whose memory is host_current.
  bool host_checkable(const Graph& g, const Node& n, int input) const {
    const ValueId id = n.inputs[size_t(input)];
    return !computed_in_graph(g, id) && host_current(g.value(id).tensor);
  }
  // Whether |v|, or the value a view of it aliases, is computed by the graph (its bytes are not
  // there yet when the graph is recorded).
  static bool computed_in_graph(const Graph& g, ValueId v) {
    while (g.value(v).kind == Value::Kind::kView && g.value(v).view_base != kNoValue) v = g.value(v).view_base;
    return g.value(v).kind == Value::Kind::kIntermediate;
  }
  uint32_t dispatches() const { return n_dispatch_; }

 private:
  Status dispatch_at(const std::string& kernel, const std::vector<uint32_t>& spec, uint64_t params_addr,
                     const std::array<uint32_t, 3>& groups, const std::vector<Span>& reads, const std::vector<Span>& writes);
  void barrier_if_needed(const std::vector<Span>& reads, const std::vector<Span>& writes);

  VulkanDevice& device_;
  VulkanExecutable& exe_;
  VkCommandBuffer cmd_;
  uint32_t max_dispatches_;
  uint32_t n_dispatch_ = 0;
  size_t chunk_used_ = 0;  // bytes used of the last params chunk
  std::vector<Span> pending_writes_, pending_reads_;
};

// Device address and row description of a tensor bound to a VulkanBuffer.
uint64_t address_of(const Tensor& t);
TensorRef ref_of(const Tensor& t);
// Workgroups for |n| items of |per_group| each, capped at the dispatch limit (kernels loop).
uint32_t groups_for(int64_t n, int64_t per_group);

// The op families (one file each). Each validates what the shader trusts, then records.
Status record_embed(Recorder& rec, const Graph& g, const Node& n);
Status record_matmul(Recorder& rec, const Graph& g, const Node& n);
Status record_matmul_id(Recorder& rec, const Graph& g, const Node& n);
Status record_norm(Recorder& rec, const Graph& g, const Node& n);  // rms_norm, softmax
Status record_rope(Recorder& rec, const Graph& g, const Node& n);
Status record_attention(Recorder& rec, const Graph& g, const Node& n);
Status record_elementwise(Recorder& rec, const Graph& g, const Node& n);  // glu add mul scale cast copy
Status record_topk_route(Recorder& rec, const Graph& g, const Node& n);
Status record_ssm_conv(Recorder& rec, const Graph& g, const Node& n);         // recurrent.cpp
Status record_gated_delta_net(Recorder& rec, const Graph& g, const Node& n);  // recurrent.cpp
Status record_lora(Recorder& rec, const Graph& g, const Node& n);             // lora.cpp

// The weight-format suffix of the per-format kernels ("f32", "q4_0"), or null if unsupported.
const char* weight_kernel_suffix(DType w);

}  // namespace tessera::vulkan
