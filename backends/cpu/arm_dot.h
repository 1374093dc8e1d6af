// AArch64 int8 dot products for the weight formats whose codes are plain int8 (Q8_0, INT8_PC),
// used by q8_dot-inl.h's portable path on ARM targets. Two variants of one loop: sdot (the
// dotprod extension, Armv8.2+) when the CPU reports it at run time, else widening multiplies
// (smull/sadalp) that every Armv8 CPU has. Only compiled for AArch64.
#pragma once

#include <cstdint>

#include "backends/cpu/kernels.h"

namespace tessera::cpu {

// sum over b < |nb| of scale(b) * x[b].d * dot(codes(b), x[b].qs), where weight block b starts at
// |w| + b * |stride|, its 32 int8 codes at byte |codes_at| and, when |f16_scale|, its f16 scale
// at byte 0 (else the scale is 1 and the caller applies a row scale).
float arm_dot_s8_blocks(const char* w, int64_t stride, int64_t codes_at, bool f16_scale, const ActQ8* x, int64_t nb);

// "sdot" or "smull": the variant arm_dot_s8_blocks runs on this CPU.
const char* arm_dot_s8_variant();

}  // namespace tessera::cpu
