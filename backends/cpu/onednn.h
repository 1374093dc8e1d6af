// oneDNN (v2 API) for large f32 GEMMs, where it beats our own tiles (prefill). Only built when
// CMake found oneDNN (TESSERA_HAVE_DNNL).
#pragma once
#include "backends/cpu/kernels.h"

namespace tessera::cpu {

// Computes out = act @ w^T with oneDNN when the shape is one it handles better than gemm's own
// tiles (f32 weights, f32 activations, M >= kOneDnnMinRows); returns false to let the caller
// run its own kernel (also on any oneDNN error). oneDNN uses its own (OpenMP) threads; our pool
// is idle meanwhile, so the two never compete within an op.
bool onednn_gemm(const PackedAct& act, const WeightMat& w, float* out, int64_t ldo);

inline constexpr int64_t kOneDnnMinRows = 16;

}  // namespace tessera::cpu
