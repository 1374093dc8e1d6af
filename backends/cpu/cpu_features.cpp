#include "backends/cpu/cpu_features.h"

#include "backends/cpu/matmul_amx.h"

#if defined(__aarch64__) && defined(__linux__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

namespace tessera::cpu {

namespace {
#if defined(__aarch64__) && defined(__linux__)
// NOTE: the bit values of the Linux arm64 ABI (arch/arm64/include/uapi/asm/hwcap.h), for older
// kernel headers that lack a name.
#ifndef HWCAP2_SVE2
#define HWCAP2_SVE2 (1 << 1)
#endif
#ifndef HWCAP2_I8MM
#define HWCAP2_I8MM (1 << 13)
#endif
#ifndef HWCAP2_BF16
#define HWCAP2_BF16 (1 << 14)
#endif
ArmFeatures detect_arm() {
  const unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
  ArmFeatures f;
  f.neon = (hw & HWCAP_ASIMD) != 0;
  f.fp16 = (hw & HWCAP_FPHP) != 0 && (hw & HWCAP_ASIMDHP) != 0;
  f.dotprod = (hw & HWCAP_ASIMDDP) != 0;
  f.sve = (hw & HWCAP_SVE) != 0;
  f.sve2 = (hw2 & HWCAP2_SVE2) != 0;
  f.i8mm = (hw2 & HWCAP2_I8MM) != 0;
  f.bf16 = (hw2 & HWCAP2_BF16) != 0;
  return f;
}
#else
ArmFeatures detect_arm() { return {}; }
#endif
}  // namespace

const ArmFeatures& arm_features() {
  static const ArmFeatures f = detect_arm();
  return f;
}

std::string cpu_feature_string() {
  std::string out;
  const auto add = [&](bool on, const char* name) {
    if (on) out += std::string(out.empty() ? "" : " ") + name;
  };
#if defined(__x86_64__)
  __builtin_cpu_init();
  add(__builtin_cpu_supports("avx2"), "avx2");
  add(__builtin_cpu_supports("fma"), "fma");
  add(__builtin_cpu_supports("f16c"), "f16c");
  add(__builtin_cpu_supports("avx512f"), "avx512f");
  add(__builtin_cpu_supports("avx512bw"), "avx512bw");
  add(__builtin_cpu_supports("avx512vnni"), "avx512vnni");
  add(__builtin_cpu_supports("avx512bf16"), "avx512bf16");
  // AMX (bf16 prefill GEMM): "(off)" when present but not used (opt-in: TESSERA_CPU_AMX=1).
  add(amx_present(), amx_usable() ? "amx-bf16" : "amx-bf16(off)");
#else
  const ArmFeatures& f = arm_features();
  add(f.neon, "neon");
  add(f.fp16, "fp16");
  add(f.dotprod, "dotprod");
  add(f.i8mm, "i8mm");
  add(f.bf16, "bf16");
  add(f.sve, "sve");
  add(f.sve2, "sve2");
#endif
  return out;
}

}  // namespace tessera::cpu
