// Planning one graph node (plan.h plan_node), one file per op family as backends/cpu/ and
// backends/vulkan/ have them: plan_pointwise.cpp (elementwise ops, norms, softmax, rope, embed),
// plan_linear.cpp (matmul, matmul_id, topk_route, lora), plan_attention.cpp, plan_recurrent.cpp
// (ssm_conv, gated_delta_net). Each planner pushes the node's launches onto NodePlan::out in
// the order they run. Internal to the GPU planner.
#pragma once
#include <string>
#include <vector>

#include "backends/cuda/plan.h"

namespace tessera::gpu {

constexpr uint32_t kMaxGridY = 65535;
constexpr int64_t kMaxGridX = 2147483647;

// The kernel-side view of a bound tensor (its device address, dtype, shape and strides).
View view_of(const Tensor& t, const AddressOf& address);
// The quantize_q8 launch of node |ni|: x's rows (the caller checked they fit one grid) into runs
// of 16 at |xq|.
Launch quantize_q8_launch(int ni, const View& x, Q8Run* xq);

// The node being planned and where its launches go.
struct NodePlan {
  const Graph& g;
  int ni;
  const Node& n;
  const AddressOf& address;
  int32_t* err;  // the device's error word (args.h KernelError)
  Scratch& scratch;
  std::vector<Launch>& out;

  View in(int i) const { return g.has_input(n, i) ? view_of(g.input_tensor(n, i), address) : View{}; }
  View output(int i = 0) const { return view_of(g.output_tensor(n, i), address); }
  // InvalidArgument naming the node and its op.
  Status fail(const std::string& why) const;
  // |l| with one block per row of |rows| (0 rows: nothing to launch).
  Status rows_grid(int64_t rows, Launch& l) const;
  Launch launch() const {
    Launch l;
    l.node = ni;
    return l;
  }
};

Status plan_pointwise(NodePlan& p);  // add, mul, scale, glu, gelu, cast, copy
Status plan_norm(NodePlan& p);       // rms_norm, layer_norm
Status plan_softmax(NodePlan& p);
Status plan_rope(NodePlan& p);
Status plan_embed(NodePlan& p);
Status plan_matmul(NodePlan& p);
Status plan_matmul_id(NodePlan& p);
Status plan_topk_route(NodePlan& p);
Status plan_lora(NodePlan& p);
Status plan_attention(NodePlan& p);  // the KV store, then attention (and its split-K combine)
Status plan_ssm_conv(NodePlan& p);
Status plan_gated_delta_net(NodePlan& p);

}  // namespace tessera::gpu
