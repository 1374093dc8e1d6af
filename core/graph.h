// Graph: a builder over the closed op set with shape inference. The model builds one per step;
// a backend receives the whole graph in Device::compute and may fuse or record it.
//
// Building never throws: the first invalid call records a Status (status()) naming the op, the
// shapes and dtypes, and later calls are ignored; check it before compute.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "core/op.h"
#include "core/status.h"
#include "core/tensor.h"

namespace tessera {

using ValueId = int32_t;
inline constexpr ValueId kNoValue = -1;

struct Value {
  enum class Kind : uint8_t {
    kExternal,      // bound by the caller: weights, KV cache, step inputs
    kIntermediate,  // placed by the planner in the graph's arena
    kView,          // aliases |view_base| at |view_offset|
  };
  Kind kind = Kind::kIntermediate;
  Tensor tensor;                // dtype/shape/strides; buffer+offset once bound
  int32_t producer = -1;        // node index, -1 for externals
  ValueId view_base = kNoValue; // for kView: the value whose memory this aliases
  int64_t view_offset = 0;      // bytes from the base's element 0
  bool is_output = false;       // kept alive to the end; readable after compute
};

struct Node {
  OpKind op = OpKind::kCount;
  std::vector<ValueId> inputs;   // by position (core/op.h in::), kNoValue for absent optionals
  std::vector<ValueId> outputs;  // one, except topk_route (ids, weights)
  OpParams params;

  template <class P> const P& param() const { return std::get<P>(params); }
};

class Graph {
 public:
  Graph() = default;

  // An external tensor (must have a buffer). The graph never frees or reallocates it.
  ValueId input(const Tensor& t);

  ValueId embed(ValueId weight, ValueId ids, DType out_dtype = DType::kF32);
  ValueId matmul(ValueId x, ValueId w, ValueId bias = kNoValue);
  ValueId matmul_id(ValueId x, ValueId w, ValueId ids, ValueId weights = kNoValue, ValueId bias = kNoValue);
  ValueId rms_norm(ValueId x, ValueId w, float eps);
  ValueId layer_norm(ValueId x, ValueId w, ValueId b, float eps);
  ValueId gelu(ValueId x);  // erf form
  // The sum of contiguous |x| over the ranks of a tensor-parallel group (OpKind::kAllReduce).
  ValueId all_reduce(ValueId x);
  ValueId rope(ValueId x, ValueId positions, const RopeParams& p, ValueId freq_factors = kNoValue);
  struct AttentionInputs {
    ValueId q, k, v, k_cache, v_cache, slot_mapping, query_start, seq_lens, block_tables;
    ValueId sinks = kNoValue;  // [Hq] f32 (core/op.h in::Attention)
  };
  ValueId attention(const AttentionInputs& in, const AttentionParams& p);
  ValueId swiglu(ValueId gate, ValueId up) { return glu(gate, up, GluKind::kSilu); }
  ValueId geglu(ValueId gate, ValueId up) { return glu(gate, up, GluKind::kGelu); }
  ValueId glu(ValueId gate, ValueId up, GluKind kind);
  ValueId glu(ValueId gate, ValueId up, const GluParams& p);
  // Recurrent layers (core/op.h in::SsmConv, in::GatedDeltaNet): the state is updated in place.
  struct SsmConvInputs {
    ValueId x, w, state, query_start, state_slots;
  };
  ValueId ssm_conv(const SsmConvInputs& in, const SsmConvParams& p);
  struct GatedDeltaNetInputs {
    ValueId q, k, v, alpha, beta, decay_rate = kNoValue, dt_bias = kNoValue, state, query_start, state_slots;
  };
  ValueId gated_delta_net(const GatedDeltaNetInputs& in, const GatedDeltaNetParams& p);
  // Multi-LoRA delta over |base| (core/op.h in::Lora).
  struct LoraInputs {
    ValueId x, base, a, b, ranks, scales, seg_start, seg_slot;
  };
  ValueId lora(const LoraInputs& in);
  ValueId add(ValueId a, ValueId b);
  ValueId mul(ValueId a, ValueId b);
  // x * s; with |softcap| > 0 then softcap * tanh(. / softcap) (final logit softcapping).
  ValueId scale(ValueId x, float s, float softcap = 0.0f);
  ValueId softmax(ValueId x, float scale = 1.0f);
  // Returns {ids [T,k] i32, weights [T,k] f32}.
  std::pair<ValueId, ValueId> topk_route(ValueId logits, const TopkRouteParams& p,
                                         ValueId bias = kNoValue);
  ValueId cast(ValueId x, DType to);
  ValueId copy(ValueId x);  // contiguous copy of a (possibly strided) value

  // Views alias memory; they compute nothing. |shape|/|stride| describe the new window,
  // |byte_offset| is relative to x's element 0. reshape needs x contiguous.
  ValueId view(ValueId x, std::initializer_list<int64_t> shape,
               std::initializer_list<int64_t> stride, int64_t byte_offset);
  ValueId reshape(ValueId x, std::initializer_list<int64_t> shape);

  // Keeps |v| alive to the end of the graph so the caller can download it after compute.
  void mark_output(ValueId v);

  // For graph rewriting (core/exec/split_graph.h splits a graph at device boundaries): a node
  // like |like| (op, params) over |inputs| of this graph, with outputs shaped as |outs| (their
  // buffers dropped); and a view of |base| (not itself a view) shaped as |t| at |byte_offset|.
  // Nothing is re-checked: |like| came from a graph that built it.
  ValueId clone_node(const Node& like, std::vector<ValueId> inputs, const std::vector<Tensor>& outs);
  ValueId alias(ValueId base, const Tensor& t, int64_t byte_offset);

  const Status& status() const { return status_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<Value>& values() const { return values_; }
  std::vector<Value>& mutable_values() { return values_; }
  const Value& value(ValueId v) const { return values_[size_t(v)]; }
  const Tensor& tensor(ValueId v) const { return values_[size_t(v)].tensor; }
  Tensor& mutable_tensor(ValueId v) { return values_[size_t(v)].tensor; }
  const Tensor& input_tensor(const Node& n, int i) const { return tensor(n.inputs[size_t(i)]); }
  const Tensor& output_tensor(const Node& n, int i = 0) const { return tensor(n.outputs[size_t(i)]); }
  bool has_input(const Node& n, int i) const {
    return size_t(i) < n.inputs.size() && n.inputs[size_t(i)] != kNoValue;
  }

  // A stable key of the graph's shapes and ops (for caching plans and recorded command buffers).
  uint64_t shape_hash() const;

 private:
  bool check(bool cond, OpKind op, const std::string& what);
  bool valid(ValueId v) const { return v >= 0 && size_t(v) < values_.size(); }
  ValueId add_node(OpKind op, std::vector<ValueId> inputs, Tensor out, OpParams params);
  ValueId new_value(Tensor t, Value::Kind kind, int32_t producer);
  ValueId binary(OpKind op, ValueId a, ValueId b);

  std::vector<Value> values_;
  std::vector<Node> nodes_;
  Status status_;
};

// The (activation, weight) dtype pair by which backends declare support for a node:
// embed (out, weight); matmul/matmul_id (x, w); attention (q, k_cache); cast (in, out);
// ssm_conv / gated_delta_net (x or q, state); lora (x, a);
// every other op (input 0, input 0).
struct OpDTypes {
  DType act;
  DType weight;
};
OpDTypes op_dtypes(const Graph& graph, const Node& node);

}  // namespace tessera
