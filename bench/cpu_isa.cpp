#include "bench/cpu_isa.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include <hwy/targets.h>

namespace tessera::bench {

bool force_cpu_isa(const std::string& name) {
  if (name.empty()) return true;
  const int64_t target = name == "avx2" ? HWY_AVX2 : name == "avx3" ? HWY_AVX3 : name == "avx3_dl" ? HWY_AVX3_DL
                       : name == "scalar" ? HWY_SCALAR : 0;
  if (target == 0 || (target != HWY_SCALAR && !(hwy::SupportedTargets() & target))) {
    std::fprintf(stderr, "tessera-bench: --isa %s: not a SIMD target this CPU and build run (avx2, avx3, avx3_dl, scalar)\n",
                 name.c_str());
    return false;
  }
  hwy::SetSupportedTargetsForTest(target);
  // oneDNN (large f32 GEMMs, the int8 GEMM ceiling) dispatches on its own; cap it alike unless
  // the caller already did. It reads the variable once, at its first primitive.
  const char* dnnl = target == HWY_AVX2 ? "AVX2" : target == HWY_AVX3 ? "AVX512_CORE"
                   : target == HWY_AVX3_DL ? "AVX512_CORE_VNNI" : "SSE41";
  setenv("ONEDNN_MAX_CPU_ISA", dnnl, 0);
  std::printf("CPU kernels forced to %s\n", hwy::TargetName(target));
  return true;
}

}  // namespace tessera::bench
