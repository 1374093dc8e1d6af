// The scalar reference implementation of the op set: the truth every backend is checked
// against. Double accumulation, no SIMD, no threads, readable over fast. Every op validates the
// data-dependent inputs it reads (token ids, expert ids, block tables, slots) and returns
// InvalidArgument instead of reading out of bounds.
#pragma once
#include <memory>
#include <vector>

#include "core/device.h"
#include "core/graph.h"
#include "core/planner.h"

namespace tessera::ref {

// Host-memory element access for any dtype (rows of the last dimension, any strides).
std::vector<double> load_row(const Tensor& t, int64_t flat_row);
void store_row(const Tensor& t, int64_t flat_row, const double* values);
int32_t load_i32(const Tensor& t, int64_t flat_index);

// Executes one node; all its tensors must be host-addressable.
Status run_node(const Graph& graph, const Node& node);

Status embed(const Graph& g, const Node& n);
Status matmul(const Graph& g, const Node& n);
Status matmul_id(const Graph& g, const Node& n);
Status rms_norm(const Graph& g, const Node& n);
Status layer_norm(const Graph& g, const Node& n);
Status gelu(const Graph& g, const Node& n);
Status rope(const Graph& g, const Node& n);
Status attention(const Graph& g, const Node& n);
Status glu(const Graph& g, const Node& n);
Status binary(const Graph& g, const Node& n);
Status scale(const Graph& g, const Node& n);
Status softmax(const Graph& g, const Node& n);
Status topk_route(const Graph& g, const Node& n);
Status convert(const Graph& g, const Node& n);  // cast and copy
Status ssm_conv(const Graph& g, const Node& n);
Status gated_delta_net(const Graph& g, const Node& n);
// Validates ssm_conv / gated_delta_net metadata (query_start covers the rows, each state slot in
// range and named once): backends call it before kernels that trust it.
Status check_recurrent_metadata(const Graph& g, const Node& n);
Status lora(const Graph& g, const Node& n);
// Validates lora metadata (segments cover the rows in order, each slot in [-1, slots), each rank
// in [0, R]): backends call it before kernels that trust it.
Status check_lora_metadata(const Graph& g, const Node& n);

// Validates attention metadata (shared by backends: call before launching kernels that trust it).
Status check_attention_metadata(const Graph& g, const Node& n);

// The YaRN/linear/freq-factor angle of rotary pair |i0| (even) at |pos|: cos and sin, scaled.
void rope_cos_sin(const RopeParams& p, int64_t pos, int i0, float freq_factor, double* cos_out, double* sin_out);

// A device that runs the reference ops on host memory. Not registered: tests build one to
// produce expected outputs.
class ReferenceDevice final : public Device {
 public:
  ReferenceDevice();
  ~ReferenceDevice() override;
  const DeviceInfo& info() const override { return info_; }
  Result<BufferPtr> alloc(size_t bytes, MemoryKind kind = MemoryKind::kDevice) override;
  MemoryInfo memory() const override { return {}; }
  Status upload(const Tensor& dst, const void* src, size_t bytes) override;
  Status download(const Tensor& src, void* dst, size_t bytes) override;
  Result<Event> copy(std::span<const CopyRegion> regions) override;
  bool supports(OpKind op, DType act, DType weight) const override;
  Result<ExecutablePtr> prepare(Graph& graph) override;
  Result<Event> submit(Executable& exe) override;
  Status wait(Event) override { return OkStatus(); }
  Status synchronize() override { return OkStatus(); }

 private:
  DeviceInfo info_;
};

}  // namespace tessera::ref
