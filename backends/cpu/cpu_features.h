// What the host CPU offers beyond a kernel file's Highway target, read once at run time. Highway
// dispatches the SIMD width (NEON/SVE/SVE2, AVX2/AVX-512); this covers what it does not name:
// the ARM int8-dot and f16 extensions, reported by `tessera info`.
#pragma once

#include <string>

namespace tessera::cpu {

struct ArmFeatures {
  bool neon = false;     // Advanced SIMD (HWCAP_ASIMD): always on AArch64 Linux
  bool fp16 = false;     // f16 arithmetic in FP and SIMD (HWCAP_FPHP and HWCAP_ASIMDHP)
  bool dotprod = false;  // sdot/udot (HWCAP_ASIMDDP)
  bool i8mm = false;     // smmla/ummla/usdot (HWCAP2_I8MM)
  bool bf16 = false;     // bfdot/bfmmla (HWCAP2_BF16)
  bool sve = false;      // HWCAP_SVE
  bool sve2 = false;     // HWCAP2_SVE2
};

// The running CPU's ARM features from getauxval(AT_HWCAP/AT_HWCAP2); all false off AArch64 Linux.
const ArmFeatures& arm_features();

// The features `tessera info` lists, space separated (x86: avx2 fma ...; ARM: neon dotprod ...).
std::string cpu_feature_string();

}  // namespace tessera::cpu
