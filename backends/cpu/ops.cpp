// Op-family dispatch for the CPU backend.
// NOTE(skeleton): until the SIMD kernels land, every family forwards to the scalar reference.
// This file is replaced by the per-family kernels (matmul.cpp, attention.cpp, ...).
#include "backends/cpu/cpu_device.h"
#include "core/reference/reference.h"

namespace tessera::cpu {

bool kernels_support(OpKind op, DType act, DType weight) {
  return dtype_traits(act).is_float || op == OpKind::kCast;
}

Status run_node(ThreadPool& pool, const Graph& graph, const Node& node) {
  return ref::run_node(graph, node);
}

}  // namespace tessera::cpu
