// From a graph node to the GPU kernel launches that compute it: which kernel, its grid and block,
// and its arguments (args.h). Host code only, shared by the CUDA and HIP devices and by the host
// simulator, so launch configuration and argument packing are tested here without a GPU.
#pragma once
#include <functional>
#include <variant>
#include <vector>

#include "backends/cuda/args.h"
#include "core/graph.h"
#include "core/status.h"

namespace tessera::gpu {

enum class KernelKind : uint8_t {
  kPointwise,
  kNorm,
  kSoftmax,
  kRope,
  kEmbed,
  kMatmul,
  kMatmulId,
  kTopkRoute,
  kKvStore,
  kAttention,
  kQuantizeQ8,
  kAttentionCombine,
  kMoeSort,
  kMoeWeightedSum,
  kMatmulMma,
  kSsmConv,
  kGatedDeltaNet,
  kAttentionWide,
  kLora,
};
const char* kernel_name(KernelKind k);

using KernelArgs = std::variant<PointwiseArgs, NormArgs, SoftmaxArgs, RopeArgs, EmbedArgs, MatmulArgs, MatmulIdArgs,
                                TopkRouteArgs, KvStoreArgs, AttentionArgs, QuantizeQ8Args, AttentionCombineArgs,
                                MoeSortArgs, MoeWeightedSumArgs, SsmConvArgs, GatedDeltaNetArgs, LoraArgs>;

struct Launch {
  KernelKind kind = KernelKind::kPointwise;
  DType weight = DType::kF32;  // the weight format a templated kernel is instantiated for
  uint32_t grid_x = 1, grid_y = 1;  // a grid with no block (no rows) launches nothing
  uint32_t block = 128;
  int node = -1;  // the graph node it computes (for messages)
  KernelArgs args;
};

// Device address of a bound tensor's element 0 (the backend's buffers know it).
using AddressOf = std::function<uint8_t*(const Tensor&)>;

// Whether the GPU kernels implement |op| for (act, weight) (the HAL's supports()).
bool supports(OpKind op, DType act, DType weight);

// Device memory a node's launches use between themselves (quantised activations): one region
// at |base|, reused by every node, since a graph's launches run in order on one stream. Planning
// with base == nullptr only sizes it (|need|, the largest node's); the device allocates that much
// for the executable and plans again with the real base.
struct Scratch {
  uint8_t* base = nullptr;
  size_t need = 0;
  uint8_t* reserve(size_t bytes) {
    need = need > bytes ? need : bytes;
    return base;
  }
};

// The launches of |node|, in order; |err| is the device's error word (args.h KernelError).
// Fails, naming the node, on a shape the kernels do not take (a head dim above kMaxHeadDimWide, a
// weight in another backend's layout, more than kMaxRouteExperts experts, a grid too large).
Status plan_node(const Graph& graph, int node_index, const AddressOf& address, int32_t* err, Scratch& scratch,
                 std::vector<Launch>& out);
// Every node of |graph| (views compute nothing and get no launch).
Result<std::vector<Launch>> plan_graph(const Graph& graph, const AddressOf& address, int32_t* err, Scratch& scratch);
// The split-K factor of an attention launch over |rows| query rows of |heads| heads with a KV
// capacity of |capacity| keys per sequence (args.h kAttnSplit*): 1 = no split.
int attention_splits(int64_t rows, int64_t heads, int64_t capacity);
// Whether a matmul of |weight| over rows of |k| runs on int8 dot products (QuantizeQ8 first).
bool matmul_uses_q8(DType weight, int64_t k);

}  // namespace tessera::gpu
