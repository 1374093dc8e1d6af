// Pins the CPU backend's SIMD dispatch to one target (--isa of gemv and model), so that one
// machine measures the path another machine would run (an AVX2-only laptop on an AVX-512 host).
#pragma once
#include <string>

namespace tessera::bench {

// "avx2", "avx3", "avx3_dl" or "scalar"; an empty name leaves the dispatch alone. Prints the
// forced target; false (with the reason on stderr) for a name this CPU and build cannot run.
// Process-wide and for the process's lifetime (Highway's test hook is the only way to pin it);
// oneDNN is capped alike through ONEDNN_MAX_CPU_ISA unless that is set already.
bool force_cpu_isa(const std::string& name);

}  // namespace tessera::bench
