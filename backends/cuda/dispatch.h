// Launch -> kernel instantiation, once for every runner: the CUDA/HIP stream launcher
// (device.cu) and the host simulator (sim/). A Runner provides
//   template <class K> void run(const Launch& l, const typename K::Args& args);
#pragma once
#include "backends/cuda/kernels.h"
#include "backends/cuda/plan.h"

namespace tessera::gpu {

template <template <DType> class K, class R, class A>
void dispatch_weight(R& r, const Launch& l, const A& a) {
  switch (l.weight) {
#define TS_CASE(D)                         \
  case DType::D:                           \
    r.template run<K<DType::D>>(l, a);     \
    break;
    TS_FOR_EACH_WEIGHT_DTYPE(TS_CASE)
#undef TS_CASE
    default: break;  // plan_node admits only the formats above (supports())
  }
}

// dispatch_weight over the formats with integer runs (decode::kHasIntRun) only: kernels that
// read int8 codes are not instantiated for the float formats.
template <template <DType> class K, class R, class A>
void dispatch_int_weight(R& r, const Launch& l, const A& a) {
  switch (l.weight) {
#define TS_CASE(D)                                                      \
  case DType::D:                                                        \
    if constexpr (decode::kHasIntRun<DType::D>) r.template run<K<DType::D>>(l, a); \
    break;
    TS_FOR_EACH_WEIGHT_DTYPE(TS_CASE)
#undef TS_CASE
    default: break;
  }
}

template <class R>
void dispatch(R& r, const Launch& l) {
  if (l.grid_x == 0 || l.grid_y == 0) return;
  switch (l.kind) {
    case KernelKind::kPointwise: r.template run<PointwiseKernel>(l, std::get<PointwiseArgs>(l.args)); break;
    case KernelKind::kNorm: r.template run<NormKernel>(l, std::get<NormArgs>(l.args)); break;
    case KernelKind::kSoftmax: r.template run<SoftmaxKernel>(l, std::get<SoftmaxArgs>(l.args)); break;
    case KernelKind::kRope: r.template run<RopeKernel>(l, std::get<RopeArgs>(l.args)); break;
    case KernelKind::kEmbed: dispatch_weight<EmbedKernel>(r, l, std::get<EmbedArgs>(l.args)); break;
    case KernelKind::kMatmul: dispatch_weight<MatmulKernel>(r, l, std::get<MatmulArgs>(l.args)); break;
    case KernelKind::kMatmulMma: dispatch_int_weight<MatmulMmaKernel>(r, l, std::get<MatmulArgs>(l.args)); break;
    case KernelKind::kMatmulId: dispatch_weight<MatmulIdKernel>(r, l, std::get<MatmulIdArgs>(l.args)); break;
    case KernelKind::kTopkRoute: r.template run<TopkRouteKernel>(l, std::get<TopkRouteArgs>(l.args)); break;
    case KernelKind::kKvStore: r.template run<KvStoreKernel>(l, std::get<KvStoreArgs>(l.args)); break;
    case KernelKind::kAttention: r.template run<AttentionKernel>(l, std::get<AttentionArgs>(l.args)); break;
    case KernelKind::kAttentionWide:
      r.template run<AttentionKernelWide>(l, std::get<AttentionArgs>(l.args));
      break;
    case KernelKind::kQuantizeQ8: r.template run<QuantizeQ8Kernel>(l, std::get<QuantizeQ8Args>(l.args)); break;
    case KernelKind::kMoeSort: r.template run<MoeSortKernel>(l, std::get<MoeSortArgs>(l.args)); break;
    case KernelKind::kMoeWeightedSum: r.template run<MoeWeightedSumKernel>(l, std::get<MoeWeightedSumArgs>(l.args)); break;
    case KernelKind::kSsmConv: r.template run<SsmConvKernel>(l, std::get<SsmConvArgs>(l.args)); break;
    case KernelKind::kGatedDeltaNet: r.template run<GatedDeltaNetKernel>(l, std::get<GatedDeltaNetArgs>(l.args)); break;
    case KernelKind::kLora:
      r.template run<LoraKernel>(l, std::get<LoraArgs>(l.args));
      break;
    case KernelKind::kAttentionCombine:
      r.template run<AttentionCombineKernel>(l, std::get<AttentionCombineArgs>(l.args));
      break;
  }
}

}  // namespace tessera::gpu
