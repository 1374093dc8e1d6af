// Op-family dispatch for the CPU backend: one closed switch over OpKind to the kernel families
// (matmul.cpp, moe.cpp, attention.cpp, ...), and the exact list of what they implement.
#include <string>

#include "backends/cpu/cpu_device.h"
#include "backends/cpu/kernels.h"

namespace tessera::cpu {

namespace {
bool is_float(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }
// Every block format of quant/ runs through matmul (matmul_q8.cpp, matmul_kq.cpp, FP8 in
// matmul.cpp), matmul_id (the same gemm) and embed (the reference dequantisation of a row).
bool is_weight(DType t) { return is_float(t) || dtype_traits(t).is_quantized; }
}  // namespace

bool kernels_support(OpKind op, DType act, DType weight) {
  if (!is_float(act)) return false;
  switch (op) {
    case OpKind::kEmbed:
    case OpKind::kMatmul:
    case OpKind::kMatmulId: return is_weight(weight);
    case OpKind::kAttention:  // weight = the KV cache dtype
      return is_float(weight) || weight == DType::kFP8_E4M3 || weight == DType::kINT8_PC;
    case OpKind::kCast: return is_float(weight);
    case OpKind::kSsmConv:
    case OpKind::kGatedDeltaNet: return weight == DType::kF32;  // the state
    case OpKind::kLora:
      return is_float(act) && is_float(weight);  // weight = the adapters' A and B
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
    case OpKind::kCount: break;
  }
  return false;
}

Status run_node(ThreadPool& pool, const Graph& graph, const Node& node) {
  switch (node.op) {
    case OpKind::kEmbed: return embed(pool, graph, node);
    case OpKind::kMatmul: return matmul(pool, graph, node);
    case OpKind::kMatmulId: return matmul_id(pool, graph, node);
    case OpKind::kRmsNorm: return rms_norm(pool, graph, node);
    case OpKind::kLayerNorm: return layer_norm(pool, graph, node);
    case OpKind::kGelu: return gelu(pool, graph, node);
    case OpKind::kRope: return rope(pool, graph, node);
    case OpKind::kAttention: return attention(pool, graph, node);
    case OpKind::kGlu: return glu(pool, graph, node);
    case OpKind::kAdd:
    case OpKind::kMul: return binary(pool, graph, node);
    case OpKind::kScale: return scale(pool, graph, node);
    case OpKind::kSoftmax: return softmax(pool, graph, node);
    case OpKind::kTopkRoute: return topk_route(pool, graph, node);
    case OpKind::kCast:
    case OpKind::kCopy: return convert(pool, graph, node);
    case OpKind::kSsmConv: return ssm_conv(pool, graph, node);
    case OpKind::kGatedDeltaNet: return gated_delta_net(pool, graph, node);
    case OpKind::kLora:
      return lora(pool, graph, node);
    case OpKind::kView: return OkStatus();
    case OpKind::kAllReduce:  // performed between segments by SplitGraph, never by a backend
    case OpKind::kCount: break;
  }
  return Unimplemented(std::string("cpu: op ") + op_name(node.op) + " (" + std::to_string(int(node.op)) + ")");
}

}  // namespace tessera::cpu
