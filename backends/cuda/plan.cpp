#include "backends/cuda/plan.h"

#include <cmath>
#include <string>

#include "backends/cuda/plan_node.h"

namespace tessera::gpu {

const char* kernel_error_message(KernelError e) {
  switch (e) {
    case KernelError::kNone: return "no error";
    case KernelError::kEmbedId: return "embed: a token id outside the embedding's rows";
    case KernelError::kExpertId: return "matmul_id: an expert id outside [0, experts)";
    case KernelError::kAttnMetadata:
      return "attention: query_start, seq_lens, a block table entry or a slot is out of range";
    case KernelError::kStateMetadata:
      return "ssm_conv / gated_delta_net: query_start or a state slot is out of range";
    case KernelError::kLoraMetadata:
      return "lora: a segment start, slot or rank is out of range";
  }
  return "unknown kernel error";
}

const char* kernel_name(KernelKind k) {
  switch (k) {
    case KernelKind::kPointwise: return "pointwise";
    case KernelKind::kNorm: return "norm";
    case KernelKind::kSoftmax: return "softmax";
    case KernelKind::kRope: return "rope";
    case KernelKind::kEmbed: return "embed";
    case KernelKind::kMatmul: return "matmul";
    case KernelKind::kMatmulMma: return "matmul_mma";
    case KernelKind::kMatmulId: return "matmul_id";
    case KernelKind::kTopkRoute: return "topk_route";
    case KernelKind::kKvStore: return "kv_store";
    case KernelKind::kAttention: return "attention";
    case KernelKind::kAttentionWide:
      return "attention_wide";
    case KernelKind::kQuantizeQ8: return "quantize_q8";
    case KernelKind::kAttentionCombine: return "attention_combine";
    case KernelKind::kMoeSort: return "moe_sort";
    case KernelKind::kMoeWeightedSum: return "moe_weighted_sum";
    case KernelKind::kSsmConv: return "ssm_conv";
    case KernelKind::kGatedDeltaNet: return "gated_delta_net";
    case KernelKind::kLora:
      return "lora";
  }
  return "?";
}

namespace {

bool is_act(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }
bool is_weight(DType t) {
  switch (t) {
#define TS_CASE(D) case DType::D:
    TS_FOR_EACH_WEIGHT_DTYPE(TS_CASE)
#undef TS_CASE
    return true;
    default: return false;
  }
}
bool is_kv(DType t) { return is_act(t) || t == DType::kFP8_E4M3 || t == DType::kINT8_PC; }

}  // namespace

View view_of(const Tensor& t, const AddressOf& address) {
  View v;
  v.p = address(t);
  v.dtype = t.dtype;
  v.rank = t.rank;
  for (int i = 0; i < t.rank; ++i) {
    v.shape[i] = t.shape[size_t(i)];
    v.stride[i] = t.stride[size_t(i)];
  }
  // Block formats keep stride 0 in the last dim (core/tensor.h); kernels never step by it.
  return v;
}

Launch quantize_q8_launch(int ni, const View& x, Q8Run* xq) {
  Launch l;
  l.node = ni;
  l.kind = KernelKind::kQuantizeQ8;
  l.grid_x = uint32_t(x.rows());
  l.block = 128;
  l.args = QuantizeQ8Args{x, xq, x.cols() / 16};
  return l;
}

bool supports(OpKind op, DType act, DType weight) {
  switch (op) {
    case OpKind::kEmbed:
      return is_act(act) && is_weight(weight);
    case OpKind::kMatmul:
    case OpKind::kMatmulId:
      return is_act(act) && is_weight(weight);
    case OpKind::kAttention:
      return is_act(act) && is_kv(weight);
    case OpKind::kCast:
      return is_act(act) && is_act(weight);
    case OpKind::kSsmConv:
    case OpKind::kGatedDeltaNet:
      return is_act(act) && weight == DType::kF32;  // the state
    case OpKind::kLora:
      return is_act(act) && is_act(weight);  // the adapters' A and B
    case OpKind::kRmsNorm:
    case OpKind::kLayerNorm:
    case OpKind::kRope:
    case OpKind::kGlu:
    case OpKind::kAdd:
    case OpKind::kMul:
    case OpKind::kScale:
    case OpKind::kSoftmax:
    case OpKind::kTopkRoute:
    case OpKind::kCopy:
    case OpKind::kGelu:
      return is_act(act) && act == weight;
    case OpKind::kView:
      return true;
    case OpKind::kAllReduce:  // performed between segments by SplitGraph, never by a backend
    case OpKind::kCount:
      return false;
  }
  return false;
}

int attention_splits(int64_t rows, int64_t heads, int64_t capacity) {
  const int64_t units = rows * heads;
  if (units <= 0 || units >= kAttnSplitTarget || capacity < 2 * kAttnSplitKeys) return 1;
  int64_t s = capacity / kAttnSplitKeys;
  const int64_t fill = (kAttnSplitTarget + units - 1) / units;
  if (fill < s) s = fill;
  if (s > kAttnMaxSplits) s = kAttnMaxSplits;
  return int(s < 1 ? 1 : s);
}

bool matmul_uses_q8(DType weight, int64_t k) {
  switch (weight) {
#define TS_CASE(D) \
  case DType::D: return decode::kHasIntRun<DType::D> && k % 16 == 0;
    TS_FOR_EACH_WEIGHT_DTYPE(TS_CASE)
#undef TS_CASE
    default: return false;
  }
}

Status NodePlan::fail(const std::string& why) const {
  return InvalidArgument(std::string("gpu: node ") + std::to_string(ni) + " (" + op_name(n.op) + "): " + why);
}

Status NodePlan::rows_grid(int64_t rows, Launch& l) const {
  if (rows > kMaxGridX) return fail("too many rows for one launch");
  l.grid_x = uint32_t(rows);  // 0: nothing to launch
  return OkStatus();
}

Status plan_node(const Graph& g, int ni, const AddressOf& address, int32_t* err, Scratch& scratch,
                 std::vector<Launch>& out) {
  const Node& n = g.nodes()[size_t(ni)];
  NodePlan p{g, ni, n, address, err, scratch, out};
  for (int i = 0; i < int(n.inputs.size()); ++i)
    if (g.has_input(n, i) && g.input_tensor(n, i).layout != WeightLayout::kRows)
      return p.fail("input " + std::to_string(i) + " is in another backend's weight layout");
  switch (n.op) {
    case OpKind::kView:
      return OkStatus();  // a view computes nothing
    case OpKind::kAdd:
    case OpKind::kMul:
    case OpKind::kScale:
    case OpKind::kGlu:
    case OpKind::kGelu:
    case OpKind::kCast:
    case OpKind::kCopy:
      return plan_pointwise(p);
    case OpKind::kRmsNorm:
    case OpKind::kLayerNorm:
      return plan_norm(p);
    case OpKind::kSoftmax:
      return plan_softmax(p);
    case OpKind::kRope:
      return plan_rope(p);
    case OpKind::kEmbed:
      return plan_embed(p);
    case OpKind::kMatmul:
      return plan_matmul(p);
    case OpKind::kMatmulId:
      return plan_matmul_id(p);
    case OpKind::kTopkRoute:
      return plan_topk_route(p);
    case OpKind::kLora:
      return plan_lora(p);
    case OpKind::kAttention:
      return plan_attention(p);
    case OpKind::kSsmConv:
      return plan_ssm_conv(p);
    case OpKind::kGatedDeltaNet:
      return plan_gated_delta_net(p);
    case OpKind::kAllReduce:  // performed between segments by SplitGraph, never by a backend
    case OpKind::kCount:
      break;
  }
  return p.fail("not an op");
}

Result<std::vector<Launch>> plan_graph(const Graph& graph, const AddressOf& address, int32_t* err, Scratch& scratch) {
  std::vector<Launch> out;
  out.reserve(graph.nodes().size() + 4);
  for (int i = 0; i < int(graph.nodes().size()); ++i)
    TS_RETURN_IF_ERROR(plan_node(graph, i, address, err, scratch, out));
  return out;
}

}  // namespace tessera::gpu
